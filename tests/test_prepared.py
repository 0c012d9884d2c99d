"""The data prepared once (`data.prepared`, `bertology prepare`): a second identical run reuses the trained
tokenizer and the examples, without training or tokenizing again; any change to what makes them (the corpus, the
recipe's data fields, the tokenizer, the length, the seed) prepares again; a half-written entry is never read.
(Two processes: tests/test_multiprocess.py, where rank 1 reuses what rank 0 prepared.)"""

from __future__ import annotations

import os
import types

import pytest

from hf_bertology.cli import main as cli_main
from hf_bertology.data.prepared import MANIFEST, PreparedStore, prepared_key
from hf_bertology.recipes.recipe import Recipe
from hf_bertology.training import corpora, prepare, pretrain
from hf_bertology.utils import BertologyError
from platform_support import write_corpus


@pytest.fixture
def setup(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=40)
    store = tmp_path / "prepared"

    def run(*extra: str, file=corpus) -> dict:
        flags = ["--recipe", "bert-tiny", "--train_file", str(file), "--vocab_size", "300"]
        return prepare.main([*flags, "--prepared_data_dir", str(store), *extra])

    return types.SimpleNamespace(corpus=corpus, store=store, run=run, tmp_path=tmp_path)


def forbid_preparing(monkeypatch) -> None:
    """A run that trains a tokenizer or builds examples fails: what it uses must have been reused."""

    def fail(*args, **kwargs):
        raise AssertionError("prepared again")

    monkeypatch.setattr(Recipe, "train_tokenizer", fail)
    monkeypatch.setattr(corpora, "make_examples", fail)


def entries(store, kind: str) -> list[str]:
    return sorted(p.name for p in store.glob(f"{kind}-*"))


def test_a_second_run_reuses_the_tokenizer_and_the_examples(setup, monkeypatch, capsys):
    first = setup.run()
    assert first["train_examples"] > 0
    assert "bertology pretrain` with the same flags reuses them" in capsys.readouterr().out
    forbid_preparing(monkeypatch)
    second = setup.run()
    assert second == first
    assert len(entries(setup.store, "tokenizer")) == len(entries(setup.store, "examples")) == 1
    # and `bertology pretrain` with the same flags trains on them, neither training nor tokenizing anything
    argv = ["--recipe", "bert-tiny", "--train_file", str(setup.corpus), "--vocab_size", "300"]
    argv += ["--prepared_data_dir", str(setup.store), "--output_dir", str(setup.tmp_path / "run"), "--max_steps", "1"]
    pretrain.main(argv)
    assert (setup.tmp_path / "run" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "change, new_tokenizer",
    [
        (("--max_seq_length", "48"), False),
        (("--seed", "7"), False),
        (("--preprocessing_num_workers", "2"), False),  # blocks never span two workers' shards
        (("--config_overrides", "short_seq_prob=0.3"), False),  # a recipe data field (data.DATA_FIELDS)
        (("--vocab_size", "320"), True),  # another tokenizer, so other examples
        (("--tokenizer_train_samples", "20"), True),
    ],
)
def test_a_change_to_what_makes_the_data_prepares_it_again(setup, change, new_tokenizer):
    first = setup.run()
    again = setup.run(*change)
    assert again["examples_dir"] != first["examples_dir"]
    assert (again["tokenizer_dir"] != first["tokenizer_dir"]) == new_tokenizer
    assert setup.run() == first  # the first entry is still there, still complete


def test_an_edited_or_touched_corpus_prepares_again(setup):
    first = setup.run()
    text = setup.corpus.read_text()
    setup.corpus.write_text(text + "\nOne more document of a few words.\n")  # other contents (and size)
    edited = setup.run()
    assert edited["tokenizer_dir"] != first["tokenizer_dir"] and edited["examples_dir"] != first["examples_dir"]
    stat = setup.corpus.stat()
    os.utime(setup.corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # same bytes, a newer time: as datasets
    assert setup.run()["examples_dir"] not in (first["examples_dir"], edited["examples_dir"])


def test_another_recipe_gets_its_own_examples(setup):
    bert = setup.run()
    albert = prepare.main(
        ["--recipe", "albert-tiny", "--train_file", str(setup.corpus), "--vocab_size", "300",
         "--prepared_data_dir", str(setup.store)]
    )  # fmt: skip
    assert albert["examples_dir"] != bert["examples_dir"] and albert["tokenizer_dir"] != bert["tokenizer_dir"]


def test_overwrite_cache_prepares_again_in_place(setup, monkeypatch):
    first = setup.run()
    calls = []
    make = corpora.make_examples
    monkeypatch.setattr(corpora, "make_examples", lambda *a, **k: calls.append(1) or make(*a, **k))
    again = setup.run("--overwrite_cache")
    # the tokenizer trained again, into its entry (`tokenizers` may break ties otherwise: then other examples)
    assert again["tokenizer_dir"] == first["tokenizer_dir"] and calls
    assert len(entries(setup.store, "tokenizer")) == 1
    assert setup.run() == again


def test_an_interrupted_entry_is_never_read(tmp_path):
    store = PreparedStore(tmp_path)

    def killed(folder):
        (folder / "train").mkdir()
        (folder / "train" / "data-00000-of-00001.arrow").write_bytes(b"half")
        raise KeyboardInterrupt  # Ctrl-C while writing

    with pytest.raises(KeyboardInterrupt):
        store.write("examples", "k", killed)
    assert store.find("examples", "k") is None
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    # a folder under the final name without its manifest (a copy cut short, a crash outside `write`) is no entry
    store.path("examples", "k").mkdir()
    assert store.find("examples", "k") is None
    folder = store.write("examples", "k", lambda f: (f / "train").mkdir())
    assert store.find("examples", "k") == folder and (folder / MANIFEST).is_file()


def test_a_half_written_run_entry_is_made_again(setup, monkeypatch):
    first = setup.run()
    (setup.store / os.path.basename(first["examples_dir"]) / MANIFEST).unlink()  # as if cut off before the rename
    calls = []
    make = corpora.make_examples
    monkeypatch.setattr(corpora, "make_examples", lambda *a, **k: calls.append(1) or make(*a, **k))
    assert setup.run() == first and calls


def test_a_key_holds_its_ingredients():
    assert prepared_key("examples", seed=1) != prepared_key("examples", seed=2)
    assert prepared_key("examples", seed=1) != prepared_key("tokenizer", seed=1)
    assert prepared_key("examples", a=1, b=2) == prepared_key("examples", b=2, a=1)


def test_a_rank_that_cannot_see_rank_zero_s_entry_says_so(tmp_path):
    rank1 = types.SimpleNamespace(process_index=1)
    with pytest.raises(BertologyError, match="process 1 cannot see the examples that process 0 prepared.*shared"):
        corpora.find_prepared(PreparedStore(tmp_path), "examples", "k", rank1, overwrite=False)


def test_prepare_is_a_bertology_command(setup, capsys):
    flags = ["--recipe", "bert-tiny", "--train_file", str(setup.corpus), "--vocab_size", "300"]
    assert cli_main(["prepare", *flags, "--prepared_data_dir", str(setup.store)]) in (0, None)
    assert "training examples in" in capsys.readouterr().out
    assert cli_main(["prepare", "--recipe", "bert-tiny", "--train_file", str(setup.tmp_path / "none.txt")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: training file not found")
