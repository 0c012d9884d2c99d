"""Hostile input through `hf_bertology.cli.main([...])`: one `error:` line and exit status 2 (or the input is
handled), never a hang or a traceback wall; files already in the output folder survive. (Malformed GLUE TSVs are
covered next to the GLUE reader, tests/test_glue.py.)"""

from __future__ import annotations

import json
import logging
import os
import random

import pytest
from transformers import GPT2Config

from hf_bertology import cli
from hf_bertology.data import corpus as corpus_module
from platform_support import WORDS, pretrain_argv, write_corpus


@pytest.fixture(autouse=True)
def fresh_log_handler():
    """`set_verbosity` binds its handler to the sys.stderr of the first call: under capsys, a closed stream."""
    logger = logging.getLogger("hf_bertology")
    saved = logger.handlers[:]
    logger.handlers.clear()
    yield
    logger.handlers[:] = saved


def run(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(["pretrain", *argv])
    return status, capsys.readouterr().err


def assert_one_error(status: int, err: str, *needles: str) -> None:
    assert status == 2, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: "), last
    for needle in needles:
        assert needle in last, last


@pytest.fixture
def out(tmp_path):
    """An output folder that already holds a user's file: no failure may remove it."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    yield folder
    assert (folder / "notes.txt").read_text() == "keep me"


def test_mixed_encodings_name_the_file_and_byte(tmp_path, out, capsys):
    data = tmp_path / "data"
    data.mkdir()
    write_corpus(data / "a.txt", n_docs=5)
    good = "Ein schöner Satz über Käse.\n".encode()
    (data / "b.txt").write_bytes(good * 3 + "Un café très français.\n".encode("latin-1"))
    status, err = run(pretrain_argv("bert-tiny", data, out, "--max_steps", "1"), capsys)
    assert_one_error(status, err, "b.txt", "not valid UTF-8", f"byte {len(good) * 3 + 6}")


def test_nul_bytes_are_refused_as_binary(tmp_path, out, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"Some text.\n\x00\x00\x01binary junk\n")
    status, err = run(pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1"), capsys)
    assert_one_error(status, err, "binary", "NUL")


def test_unreadable_file_in_a_directory(tmp_path, out, capsys, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    write_corpus(data / "a.txt", n_docs=5)
    locked = write_corpus(data / "locked.txt", n_docs=5)
    locked.chmod(0)
    if os.access(locked, os.R_OK):  # root reads anything: simulate the permission check failing for this file
        real_access = os.access
        monkeypatch.setattr(
            corpus_module.os, "access", lambda p, mode: False if str(p) == str(locked) else real_access(p, mode)
        )
    status, err = run(pretrain_argv("bert-tiny", data, out, "--max_steps", "1"), capsys)
    locked.chmod(0o644)
    assert_one_error(status, err, "locked.txt", "permission denied")


def test_empty_corpus_of_100k_empty_documents(tmp_path, out, capsys):
    corpus = tmp_path / "empty.txt"
    corpus.write_text("\n \n\t\n" * 100_000)
    status, err = run(pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1"), capsys)
    assert_one_error(status, err, "empty")


def test_100k_empty_documents_among_real_ones_are_skipped(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    with open(corpus, "a") as handle:
        handle.write("\n\n" * 100_000)
    write_corpus(tmp_path / "more.txt", n_docs=20)
    with open(corpus, "a") as handle:
        handle.write((tmp_path / "more.txt").read_text())
    status, err = run(pretrain_argv("bert-tiny", corpus, tmp_path / "out", "--max_steps", "1"), capsys)
    assert status == 0, err[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


def long_line(n_chars: int) -> str:
    rng = random.Random(0)
    words = []
    total = 0
    while total < n_chars:
        word = rng.choice(WORDS)
        words.append(word)
        total += len(word) + 1
    return " ".join(words)


@pytest.mark.parametrize("megabytes", [pytest.param(2, id="2MB"), pytest.param(50, id="50MB", marks=pytest.mark.slow)])
def test_a_huge_line_is_cut_into_pieces(tmp_path, megabytes, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=10)
    with open(corpus, "a") as handle:
        handle.write("\n" + long_line(megabytes * 1_000_000) + "\n")
    argv = pretrain_argv(
        "roberta-tiny", corpus, tmp_path / "out", "--max_steps", "1", "--tokenizer_train_samples", "10"
    )
    status, err = run(argv, capsys)
    assert status == 0, err[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_config_of_another_family(tmp_path, out, capsys):
    gpt2 = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=300).save_pretrained(gpt2)
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    argv = pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", "--model_name_or_path", str(gpt2))
    status, err = run(argv, capsys)
    assert_one_error(status, err, "'gpt2'", "bert-tiny", "'bert'")


def test_checkpoint_without_tokenizer(tmp_path, out, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    first = tmp_path / "first"
    assert run(pretrain_argv("bert-tiny", corpus, first, "--max_steps", "1"), capsys)[0] == 0
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (first / name).unlink(missing_ok=True)
    argv = pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", "--model_name_or_path", str(first))
    status, err = run(argv, capsys)
    assert_one_error(status, err, "holds no tokenizer", "--tokenizer_name")


@pytest.mark.parametrize(
    "recipe, flags, needles",
    [
        ("xlnet-tiny", ["--padding_free", "true"], ["cannot take padding-free batches", "--padding_free false"]),
        ("bert-tiny", ["--padding_free", "true", "--attn_implementation", "eager"], ["padding-free", "'eager'"]),
    ],
)
def test_padding_free_refusals_are_one_line(tmp_path, out, capsys, recipe, flags, needles):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    status, err = run(pretrain_argv(recipe, corpus, out, "--max_steps", "1", *flags), capsys)
    assert_one_error(status, err, *needles)


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_a_padded_only_kernel_trains_padded(tmp_path, capsys, kernel):
    """`--attn_implementation eager` (a choice the help names) on a recipe padding-free by default: padded batches
    with that kernel, not a refusal."""
    from hf_bertology.training import pretrain

    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    box = {}
    train_and_evaluate = pretrain.train_and_evaluate
    pretrain.train_and_evaluate = lambda trainer, resume_from=None: box.setdefault("t", trainer) and {}
    try:
        status, err = run(
            pretrain_argv("bert-tiny", corpus, tmp_path / "out", "--attn_implementation", kernel), capsys
        )
    finally:
        pretrain.train_and_evaluate = train_and_evaluate
    trainer = box["t"]
    assert status == 0, err[-2000:]
    assert trainer.model.config._attn_implementation == kernel
    assert type(trainer.data_collator).__name__ == "TargetPositionsCollator"  # padded, with target positions


def test_an_abbreviated_flag_is_refused_not_dropped(tmp_path, out, capsys):
    """argparse would take `--max_step` for `--max_steps`, but the recipe's defaults replace what the user did not set
    by name: 10 steps instead of 2. Refused, naming the flag."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    status, err = run(pretrain_argv("bert-tiny", corpus, out, "--max_step", "2"), capsys)
    assert_one_error(status, err, "--max_step")
    required = {
        "glue": ["--model_name_or_path", "m", "--task_name", "rte", "--output_dir", str(out)],
        "compare": ["--recipes", "bert-tiny", "--output_dir", str(out)],
        "show-mask": ["--recipe", "bert-tiny", "--output_dir", str(out)],
    }
    for command, argv in required.items():
        abbreviated = "--budget_flop" if command == "compare" else "--max_step"
        status = cli.main([command, *argv, abbreviated, "2"])
        assert_one_error(status, capsys.readouterr().err, abbreviated)


@pytest.mark.parametrize(
    "recipe, override, needles",
    [
        ("bert-tiny", "num_hidden_layer=1", ["'num_hidden_layer' is not a field", "did you mean 'num_hidden_layers'"]),
        ("electra-tiny@roberta", "generator_hidden_fractio=0.5", ["not a field", "'generator_hidden_fraction'"]),
        ("bert-tiny", "num_hidden_layers=abc", ["num_hidden_layers", "expected int"]),
        ("electra-tiny@roberta", "num_hidden_layers=abc", ["num_hidden_layers", "expected int"]),
        ("spanbert-tiny", "mlm_probability=1.5", ["mlm_probability must be in (0, 1)"]),
    ],
)
def test_a_bad_config_override_is_one_line(tmp_path, out, capsys, recipe, override, needles):
    """`PretrainedConfig` keeps an unknown keyword as an attribute: a misspelt key would train the default silently."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    status, err = run(pretrain_argv(recipe, corpus, out, "--max_steps", "1", "--config_overrides", override), capsys)
    assert_one_error(status, err, *needles)


def test_a_misspelt_override_in_a_recipe_name_is_refused():
    from hf_bertology.recipes import get_recipe
    from hf_bertology.utils import BertologyError

    with pytest.raises(BertologyError, match="did you mean 'embedding_sharing'"):
        get_recipe("deberta-v3-mini+embeding_sharing=es")
    assert get_recipe("deberta-v3-mini+embedding_sharing=es").config.embedding_sharing == "es"


@pytest.mark.parametrize("command", ["pretrain", "glue", "compare"])
@pytest.mark.parametrize(
    "name, text, needles",
    [
        ("missing.json", None, ["arguments file not found"]),
        ("broken.yaml", "a: [\n", ["broken.yaml", "not valid YAML"]),
        ("broken.json", "{", ["broken.json", "not valid JSON"]),
        ("list.json", "[1, 2]", ["a mapping", "list"]),
        (
            "typo.yaml",
            "{model_name_or_path: m, task_name: rte, recipes: bert-tiny, output_dir: o, max_step: 2}",
            ["typo.yaml", "max_step"],
        ),
    ],
)
def test_a_bad_argument_file_is_one_line(tmp_path, capsys, command, name, text, needles):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    assert_one_error(cli.main([command, str(path)]), capsys.readouterr().err, *needles)


def test_a_directory_trains_on_its_text_files_only(tmp_path, out, capsys):
    """A corpus folder as published (the shared Wikipedia dump has a README.md and a SHA256SUMS beside its files):
    the checksums and the readme are not training text."""
    from hf_bertology.data.corpus import expand_paths

    data = tmp_path / "data"
    (data / "AA").mkdir(parents=True)
    write_corpus(data / "AA" / "wiki_00", n_docs=5)
    write_corpus(data / "extra.jsonl.txt", n_docs=5)
    (data / "README.md").write_text("# A corpus\n")
    (data / "SHA256SUMS").write_text("0" * 64 + "  AA/wiki_00\n")
    (data / "LICENSE").write_text("CC BY-SA\n")
    (data / "table.csv").write_text("a,b\n")
    assert [p.relative_to(data).as_posix() for p in expand_paths(data)] == ["AA/wiki_00", "extra.jsonl.txt"]
    assert [p.name for p in expand_paths(str(data / "README.md"))] == ["README.md"]  # named: read as given
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "README.md").write_text("# nothing else\n")
    status, err = run(pretrain_argv("bert-tiny", docs, out, "--max_steps", "1"), capsys)
    assert_one_error(status, err, "holds no text or JSON Lines files", "README.md")


def test_no_command_writes_over_the_model_it_reads(tmp_path, capsys):
    """`bertology glue --output_dir` or `bertology export OUT` naming the pretrained folder itself would replace its
    weights (the generator of an ELECTRA checkpoint lost to an exported discriminator)."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    run_dir = tmp_path / "electra"
    assert run(pretrain_argv("electra-tiny", corpus, run_dir, "--max_steps", "1"), capsys)[0] == 0
    weights = (run_dir / "model.safetensors").read_bytes()
    argv = ["--model_name_or_path", str(run_dir), "--task_name", "sst2", "--data_dir", str(tmp_path)]
    status = cli.main(["glue", *argv, "--output_dir", str(run_dir / "." / "")])
    assert_one_error(status, capsys.readouterr().err, "--output_dir is the model it reads")
    status = cli.main(["export", str(run_dir), str(run_dir), "--part", "discriminator"])
    assert_one_error(status, capsys.readouterr().err, "--output_dir is the model it reads")
    assert (run_dir / "model.safetensors").read_bytes() == weights


def test_a_misspelt_model_folder_is_one_line(tmp_path, out, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    missing = str(tmp_path / "runs" / "bert-mni")
    for recipe in (["--recipe", "bert-tiny"], []):
        argv = pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", "--model_name_or_path", missing)
        argv = argv[2:] + recipe  # without --recipe: the checkpoint would have said what to train
        status, err = run(argv, capsys)
        assert_one_error(status, err, missing, "no such folder")
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("sentence\tlabel\na fine film\t1\na dull one\t0\n")
    argv = ["--model_name_or_path", missing, "--task_name", "sst2", "--data_dir", str(tmp_path)]
    assert_one_error(
        cli.main(["glue", *argv, "--output_dir", str(out)]), capsys.readouterr().err, missing, "no such folder"
    )


@pytest.mark.parametrize(
    "recipe, flags, needles",
    [
        ("bert-tiny", ["--per_device_train_batch_size", "0"], ["--per_device_train_batch_size must be at least 1"]),
        ("bert-tiny", ["--max_train_samples", "0"], ["--max_train_samples must be at least 1"]),
        ("bert-tiny", ["--vocab_size", "0"], ["--vocab_size must be at least 1"]),  # not "the recipe's default"
        ("electra-tiny", ["--max_seq_length", "3"], ["--max_seq_length must be at least 8"]),
        ("bert-tiny", ["--do_eval", "--validation_split_percentage", "100"], ["--validation_split_percentage"]),
        ("deberta-v3-tiny", ["--vocab_size", "20"], ["could not train a 20-token tokenizer", "not large enough"]),
    ],
)
def test_bad_sizes_are_one_line(tmp_path, out, capsys, recipe, flags, needles):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    status, err = run(pretrain_argv(recipe, corpus, out, "--max_steps", "1", *flags), capsys)
    assert_one_error(status, err, *needles)


def test_do_eval_on_a_one_example_corpus_is_one_line(tmp_path, out, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("One short sentence here. And another one.\n")
    status, err = run(pretrain_argv("roberta-tiny", corpus, out, "--max_steps", "1", "--do_eval"), capsys)
    assert_one_error(status, err, "--do_eval holds out examples", "--validation_file")


def test_continuing_a_checkpoint_with_another_objective_is_refused(tmp_path, out, capsys):
    """A SpanBERT checkpoint is a `bert` model too, but its config carries SpanBERT's fields and `auto_map`: read into
    BERT's config it wrote a folder naming modeling code it did not hold. Its own recipe continues it."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    spanbert = tmp_path / "spanbert"
    assert run(pretrain_argv("spanbert-tiny", corpus, spanbert, "--max_steps", "1"), capsys)[0] == 0
    argv = pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", "--model_name_or_path", str(spanbert))
    status, err = run(argv, capsys)
    assert_one_error(status, err, "pretrained by the spanbert objective", "--recipe bert-tiny trains another")
    again = tmp_path / "again"
    argv = pretrain_argv("spanbert-tiny", corpus, again, "--max_steps", "1", "--model_name_or_path", str(spanbert))
    assert run(argv[2:], capsys)[0] == 0  # without --recipe: its own objective
    status, err = run([*argv[2:], "--config_overrides", "mlm_probabilty=0.2"], capsys)  # overrides on its config
    assert_one_error(status, err, "'mlm_probabilty' is not a field", "did you mean 'mlm_probability'")
    argv = pretrain_argv("spanbert-tiny", corpus, tmp_path / "third", "--max_steps", "1")
    argv += ["--model_name_or_path", str(spanbert), "--config_overrides", "mlm_probability=0.2"]
    assert run(argv[2:], capsys)[0] == 0
    assert json.loads((tmp_path / "third" / "config.json").read_text())["mlm_probability"] == 0.2


def test_a_new_run_in_a_finished_runs_folder_is_refused(tmp_path, capsys):
    """Started again without resuming, a run used to write its checkpoint-1 beside the old run's checkpoint-3, and
    `--resume_from_checkpoint last` then resumed the old run. Refused, as run_mlm.py refuses; `--overwrite_output_dir`
    starts over without the old checkpoints; resuming the folder is still the way to go on."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    run_dir = tmp_path / "run"
    argv = pretrain_argv("bert-tiny", corpus, run_dir, "--save_steps", "3")
    assert run([*argv, "--max_steps", "3"], capsys)[0] == 0
    status, err = run([*argv, "--max_steps", "1"], capsys)
    assert_one_error(status, err, "already holds a run (checkpoint-3", "--overwrite_output_dir")
    resume = ["--max_steps", "4", "--resume_from_checkpoint", "last"]
    status, err = run([*argv, *resume, "--config_overrides", "num_hidden_layers=1"], capsys)
    assert_one_error(status, err, "holds another model (num_hidden_layers=2", "has 1")
    other = pretrain_argv("roberta-tiny", corpus, run_dir, "--save_steps", "3")
    assert_one_error(*run([*other, *resume], capsys), "is a 'bert' model but --recipe roberta-tiny")
    assert run([*argv, *resume], capsys)[0] == 0
    assert run([*argv, "--max_steps", "1", "--overwrite_output_dir"], capsys)[0] == 0
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-1"]
