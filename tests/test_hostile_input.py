"""Hostile input through `hf_bertology.cli.main([...])`: one `error:` line and exit status 2 (or the input is
handled), never a hang or a traceback wall; files already in the output folder survive. (Malformed GLUE TSVs are
covered next to the GLUE reader, tests/test_glue.py.)"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess

import pytest
from safetensors.torch import load_file, save_file
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


# -- issue 27: values out of range, export targets, GLUE files users have, the token, the one error place ----------


@pytest.mark.parametrize(
    "recipe, flags, needles",
    [
        ("bert-tiny", ["--config_overrides", "num_attention_heads=3"], ["hidden_size=32 is not a multiple of", "=3"]),
        (
            "xlnet-tiny",
            ["--config_overrides", "n_head=3"],
            ["xlnet-tiny", "'d_model % n_head' (2) should be equal to 0"],
        ),
        ("bert-tiny", ["--config_overrides", "num_hidden_layers=0"], ["num_hidden_layers", "at least 1, got 0"]),
        ("roberta-tiny", ["--config_overrides", "num_hidden_layers=-2"], ["num_hidden_layers", "got -2"]),
        ("bert-tiny", ["--config_overrides", "intermediate_size=0"], ["intermediate_size", "got 0"]),
        ("bert-tiny", ["--config_overrides", "hidden_dropout_prob=1.5"], ["hidden_dropout_prob", "[0, 1)"]),
        ("bert-tiny", ["--config_overrides", "vocab_size=50"], ["vocab_size=50 is smaller than the tokenizer's"]),
        ("bert-tiny", ["--max_steps", "0"], ["--max_steps must be at least 1"]),
        ("bert-tiny", ["--num_train_epochs", "0"], ["--num_train_epochs must be greater than 0"]),
        ("bert-tiny", ["--learning_rate", "-1"], ["--learning_rate must be at least 0"]),
        ("bert-tiny", ["--learning_rate", "nan"], ["--learning_rate must be a finite number"]),
        ("bert-tiny", ["--gradient_accumulation_steps", "0"], ["--gradient_accumulation_steps must be at least 1"]),
        ("bert-tiny", ["--seed", "-1"], ["--seed must be in [0, 4294967296)"]),
        ("bert-tiny", ["--save_total_limit", "0"], ["--save_total_limit must be at least 1"]),
        ("bert-tiny", ["--dataloader_num_workers", "-1"], ["--dataloader_num_workers must be at least 0"]),
        ("bert-tiny", ["--max_grad_norm", "-1"], ["--max_grad_norm must be at least 0", "turns clipping off"]),
        ("bert-tiny", ["--adam_beta2", "1"], ["--adam_beta2 must be in [0, 1)"]),
        ("bert-tiny", ["--tokenizer_train_samples", "0"], ["--tokenizer_train_samples must be at least 1"]),
        ("bert-tiny", ["--preprocessing_num_workers", "-1"], ["--preprocessing_num_workers must be at least 0"]),
        ("modernbert-tiny", ["--batch_size_warmup_tokens", "-1"], ["--batch_size_warmup_tokens must be at least 0"]),
        (
            "modernbert-tiny",
            ["--batch_size_warmup_min_size", "0"],
            ["--batch_size_warmup_min_size must be at least 1"],
        ),
    ],
)
def test_values_out_of_range_are_one_line_before_training(tmp_path, out, capsys, recipe, flags, needles):
    """Issue 27 item 7. Before: a matmul/ValueError traceback (heads, dropout, lr, seed, workers), a ZeroDivisionError
    (accumulation 0), or a model written with exit 0 (0 or -2 layers, FFN 0, vocab 50 silently replaced by the
    tokenizer's, --max_steps 0 trained the epochs, --save_total_limit 0 kept everything)."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    status, err = run(pretrain_argv(recipe, corpus, out, "--max_steps", "1", *flags), capsys)
    assert_one_error(status, err, *needles)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # refused before any work


def test_a_vocabulary_larger_than_the_tokenizer_is_kept(tmp_path, capsys):
    """A table padded to a round size is a real choice: kept, no longer replaced by the tokenizer's size."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    argv = pretrain_argv(
        "bert-tiny", corpus, tmp_path / "o", "--max_steps", "1", "--config_overrides", "vocab_size=320"
    )
    assert run(argv, capsys)[0] == 0
    assert json.loads((tmp_path / "o" / "config.json").read_text())["vocab_size"] == 320


@pytest.mark.parametrize(
    "command, flags, needles",
    [
        ("compare", ["--pretrain_max_steps", "0"], ["--pretrain_max_steps must be at least 1"]),
        ("compare", ["--glue_epochs", "0"], ["--glue_epochs must be greater than 0"]),
        ("compare", ["--glue_batch_size", "0"], ["--glue_batch_size must be at least 1"]),
        ("compare", ["--checkpoint_steps", "-1"], ["--checkpoint_steps must be at least 0"]),
        ("compare", ["--warmup_fraction", "1.5"], ["--warmup_fraction must be in [0, 1)"]),
        ("compare", ["--budget_flops", "inf"], ["--budget_flops must be a finite number"]),
        ("compare", ["--pretrain_args", "--hub_token hf_x"], ["holds a --hub_token", "HF_TOKEN"]),
        ("show-mask", ["--epoch", "-1"], ["--epoch must be at least 0, got -1"]),
        ("show-mask", ["--example", "-1"], ["--example must be at least 0, got -1"]),
        ("show-mask", ["--max_steps", "0"], ["--max_steps must be at least 1"]),
        ("glue", ["--max_seq_length", "0"], ["--max_seq_length must be at least 4"]),
        ("glue", ["--num_train_epochs", "-1"], ["--num_train_epochs must be greater than 0"]),
        ("glue", ["--layerwise_lr_decay", "1.5"], ["--layerwise_lr_decay must be in [0, 1]"]),
        ("glue", ["--max_eval_samples", "0"], ["--max_eval_samples must be at least 1"]),
    ],
)
def test_out_of_range_in_other_commands(tmp_path, out, capsys, command, flags, needles):
    """Before: compare ran its 0-step pretraining or 0-epoch fine-tuning (exit 0), kept --pretrain_args' token in
    results.json, and show-mask printed epoch -1's masks."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    required = {
        "compare": [
            "--recipes",
            "bert-tiny",
            "--train_file",
            str(corpus),
            "--budget_flops",
            "1e9",
            "--glue_tasks",
            "",
        ],
        "show-mask": ["--recipe", "bert-tiny", "--train_file", str(corpus), "--tokenizer_name", "unused"],
        "glue": ["--model_name_or_path", "m", "--task_name", "sst2", "--data_dir", str(tmp_path)],
    }
    status = cli.main([command, *required[command], "--output_dir", str(out), *flags])
    assert_one_error(status, capsys.readouterr().err, *needles)


def test_export_never_writes_over_a_model(tmp_path, capsys):
    """Issue 27 item 6. Before: an export into a folder holding a model replaced its weights (exit 0); into a path
    that is a file, a FileExistsError traceback."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    run_dir = tmp_path / "electra"
    assert run(pretrain_argv("electra-tiny", corpus, run_dir, "--max_steps", "1"), capsys)[0] == 0
    target = tmp_path / "exported"
    assert cli.main(["export", str(run_dir), str(target), "--part", "discriminator"]) == 0
    weights = (target / "model.safetensors").read_bytes()
    status = cli.main(["export", str(run_dir), str(target), "--part", "generator"])
    assert_one_error(status, capsys.readouterr().err, f"{target} already holds a model", "--overwrite")
    assert (target / "model.safetensors").read_bytes() == weights
    assert cli.main(["export", str(run_dir), str(target), "--part", "generator", "--overwrite"]) == 0
    assert (target / "model.safetensors").read_bytes() != weights
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    status = cli.main(["export", str(run_dir), str(a_file), "--part", "generator"])
    assert_one_error(status, capsys.readouterr().err, f"{a_file} is a file, not a folder")
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize(
    "name, content, task, needles",
    [
        ("train.tsv", b"sentence\tlabel\n", "sst2", ["train.tsv: no rows after the header"]),
        ("train.tsv", "sentence\tlabel\nun caf\xe9 fort\t1\n".encode("latin-1"), "sst2", ["train.tsv:2: not valid UTF-8"]),
        ("train.jsonl", b'{"sentence": "fine", "label": 1}\n{"sentence": "bad", "label": \n', "sst2", ["train.jsonl:2: not valid JSON"]),
        ("train.jsonl", b'{"sentence": "fine", "label": 1}\n[1, 2]\n', "sst2", ["train.jsonl:2: a row must be a JSON object"]),
        ("train.jsonl", b'{"sentence": "fine"}\n{"sentence": "bad"}\n', "sst2", ["train.jsonl: no 'label' column", "--test_file"]),
        ("train.jsonl", b'{"sentence": "fine", "label": 1}\n{"sentence": "bad", "label": null}\n', "sst2", ["train.jsonl: row 2: no label"]),
        ("train.jsonl", b'{"sentence1": "a", "sentence2": "b", "label": "high"}\n', "stsb", ["row 1: score 'high' is not a number"]),
        ("train.csv", b"sentence,label\n", "sst2", ["train.csv: no rows after the header"]),
        ("dev.jsonl", b"\n", "sst2", ["dev.jsonl: no rows"]),
    ],
)  # fmt: skip
def test_glue_files_users_have_are_one_line(tmp_path, name, content, task, needles):
    """Issue 27 item 8. Before: header-only files trained on nothing or crashed in the Trainer, a latin-1 file was a
    UnicodeDecodeError traceback, a malformed JSON line a DatasetGenerationError traceback, an unlabeled train/dev
    file trained and evaluated on label -1, a non-numeric score a ValueError traceback."""
    from hf_bertology.evaluation.glue import load_glue_files, read_glue_tsv
    from hf_bertology.utils import BertologyError

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BertologyError) as caught:
        if name.endswith(".tsv"):
            read_glue_tsv(task, path, "train")
        else:
            load_glue_files(task, train_file=str(path))
    for needle in needles:
        assert needle in str(caught.value), caught.value


def test_glue_stray_dev_label_and_long_lines(tmp_path):
    """A dev label the training file does not have was a new class of an unnamed task (files without --task_name);
    now refused, naming the file and row. A very long line (over csv's 128 KiB field limit: a traceback before) is
    read whole; the tokenizer truncates it."""
    from hf_bertology.evaluation.glue import load_glue_files, read_glue_tsv
    from hf_bertology.utils import BertologyError

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps({"text": f"t {i}", "label": i % 2}) + "\n" for i in range(4)))
    dev.write_text(json.dumps({"text": "a", "label": 1}) + "\n" + json.dumps({"text": "b", "label": 7}) + "\n")
    with pytest.raises(BertologyError, match=r"dev.jsonl: row 2: unknown label 7 for task custom \(known: 0, 1\)"):
        load_glue_files(None, train_file=str(train), validation_file=str(dev))
    long_text = "word " * 60_000
    tsv = tmp_path / "dev.tsv"
    tsv.write_text(f"sentence\tlabel\n{long_text}\t1\n")
    assert len(read_glue_tsv("sst2", tsv, "validation")[0]["sentence"]) == len(long_text)
    jsonl = tmp_path / "long.jsonl"
    jsonl.write_text(json.dumps({"sentence": long_text * 40, "label": 1}) + "\n")  # 12 MB: over pyarrow's block
    assert len(load_glue_files("sst2", validation_file=str(jsonl))["validation"][0]["sentence"]) == 40 * len(long_text)


def test_hub_token_is_never_saved(tmp_path, capsys, monkeypatch):
    """Issue 27 item 16. Before: `--hub_token` was pickled in plain text into every checkpoint's training_args.bin
    (pretraining and GLUE). No file under either output folder holds it now; the token is still the one used."""
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")  # restored after the test
    secret = "hf_SeCrEt0123456789abcdef"
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    run_dir = tmp_path / "run"
    argv = pretrain_argv("bert-tiny", corpus, run_dir, "--max_steps", "2", "--save_steps", "1", "--hub_token", secret)
    assert run(argv, capsys)[0] == 0
    glue_data = tmp_path / "SST-2"
    glue_data.mkdir()
    for split in ("train", "dev"):
        (glue_data / f"{split}.tsv").write_text("sentence\tlabel\n" + "a fine film\t1\na dull one\t0\n" * 4)
    glue_out = tmp_path / "glue"
    glue_argv = ["--model_name_or_path", str(run_dir), "--task_name", "sst2", "--data_dir", str(glue_data)]
    glue_argv += ["--output_dir", str(glue_out), "--max_steps", "2", "--save_steps", "1", "--hub_token", secret]
    glue_argv += ["--per_device_train_batch_size", "4", "--report_to", "none", "--use_cpu", "true"]
    assert cli.main(["glue", *glue_argv]) == 0, capsys.readouterr().err[-3000:]
    files = [p for folder in (run_dir, glue_out) for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in files)
    assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []
    assert secret not in capsys.readouterr().err
    assert os.environ["HF_TOKEN"] == secret  # the flag still wins over the environment, in memory

    from hf_bertology.hub import keep_token_out_of_files

    class Args:
        hub_token = "hf_other"

    assert keep_token_out_of_files(Args()).hub_token is None and os.environ["HF_TOKEN"] == "hf_other"


@pytest.mark.parametrize(
    "module, argv, needles",
    [
        ("hf_bertology.training.pretrain", ["--recipe", "bert-tiny", "--max_steps", "0"], ["--max_steps"]),
        ("hf_bertology.evaluation.compare", ["--recipes", "", "--output_dir", "o"], ["--recipes needs"]),
        ("hf_bertology.evaluation.glue", ["--model_name_or_path", "m", "--output_dir", "o"], ["give the data"]),
        ("hf_bertology.export", ["missing", "o", "--part", "generator"], ["missing is not a checkpoint folder"]),
        ("hf_bertology.training.show_mask", ["--recipe", "bert-tiny", "--output_dir", "o", "--epoch", "-1"], ["--epoch"]),
        ("hf_bertology.hub", ["missing", "me/repo"], ["missing"]),
    ],
)  # fmt: skip
def test_every_module_entry_point_is_one_error_line(tmp_path, module, argv, needles):
    """`python -m <command module>` (and examples/*.py) print our errors as `bertology` does: one line, exit 2.
    Before: pretrain, compare, export, show-mask and glue printed a traceback (exit 1); push did nothing (exit 0)."""
    from platform_support import PYTHON, subprocess_env

    done = subprocess.run(
        [PYTHON, "-m", module, *argv], env=subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert_one_error(done.returncode, done.stderr, *needles)


def test_an_xlnet_size_override_by_its_own_name_is_applied():
    """`--config_overrides n_head=8` on xlnet-tiny was silently dropped: the preset's `num_attention_heads=4` (BERT's
    name, mapped to XLNet's) replaced it, and a model of 4 heads trained."""
    from hf_bertology.recipes import get_recipe

    config = get_recipe("xlnet-tiny", n_head=8, d_inner=40).config
    assert (config.n_head, config.d_head, config.d_inner) == (8, 4, 40)
    assert get_recipe("xlnet-tiny").config.n_head == 4


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "case, needles",
    [
        ("truncated discriminator", ["disc/model.safetensors cannot be read", "truncated or damaged"]),
        ("truncated generator", ["gen/model.safetensors cannot be read", "truncated or damaged"]),
        ("generator without config", ["gen has no config.json"]),
        ("swapped parts", ["looks like a discriminator (hidden_size 64 > 32", "swapped"]),
        ("names of another layout", ["generator's file does not fill", "a layout this version cannot read"]),
    ],
)
def test_bad_released_parts_are_one_line_and_write_nothing(tmp_path, bert_tokenizer, capsys, case, needles):
    """Issue 45: a cut download (a SafetensorError traceback), a generator folder without config.json (refused for
    its vocabulary, None tokens), swapped parts (refused for a generator fraction of 2.0) and a file whose names
    this version cannot read (loaded as random weights): one line naming the cause, exit 2, and no output folder."""
    from test_continue_released import released_electra

    disc, gen = released_electra(tmp_path, bert_tokenizer)
    if case.startswith("truncated"):
        _truncate((disc if "discriminator" in case else gen) / "model.safetensors")
    if case == "generator without config":
        (gen / "config.json").unlink()
    if case == "names of another layout":  # e.g. a converter's own prefix: loaded, it would be random weights
        state = load_file(gen / "model.safetensors")
        save_file(
            {name.replace("electra.", "encoder."): value for name, value in state.items()}, gen / "model.safetensors"
        )
    parts = (gen, disc) if case == "swapped parts" else (disc, gen)
    corpus, out = write_corpus(tmp_path / "corpus.txt", n_docs=5), tmp_path / "out"
    argv = pretrain_argv("electra-tiny", corpus, out, "--max_steps", "1")
    status, err = run(
        [*argv, "--model_name_or_path", str(parts[0]), "--generator_name_or_path", str(parts[1])], capsys
    )
    assert_one_error(status, err, *needles)
    assert not out.exists()


def test_a_truncated_single_network_is_one_line_and_writes_nothing(tmp_path, bert_tokenizer, capsys):
    """A one-network continuation (`--model_name_or_path` of a BERT folder whose model.safetensors was cut) is
    refused by `check_weights` before the run starts, where transformers' own load would stop with a traceback."""
    import hf_bertology as hb

    folder = tmp_path / "released"
    hb.get_recipe("bert-tiny", vocab_size=len(bert_tokenizer)).build_model().save_pretrained(folder)
    bert_tokenizer.save_pretrained(folder)
    _truncate(folder / "model.safetensors")
    corpus, out = write_corpus(tmp_path / "corpus.txt", n_docs=5), tmp_path / "out"
    argv = pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1")
    status, err = run([*argv, "--model_name_or_path", str(folder)], capsys)
    assert_one_error(status, err, "released/model.safetensors cannot be read", "truncated or damaged")
    assert not out.exists()


def test_a_phase_from_a_damaged_checkpoint_is_one_line_and_writes_nothing(tmp_path, capsys):
    """Issue 45: a ModernBERT phase started from a checkpoint whose optimizer.pt was damaged stopped with a
    PytorchStreamReader traceback; the phase start now verifies the checkpoint's marker and digests as resuming
    does."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    argv = pretrain_argv("modernbert-tiny", corpus, tmp_path / "phase1", "--max_steps", "2", "--max_seq_length", "64")
    assert run(argv, capsys)[0] == 0
    checkpoint = tmp_path / "phase1" / "checkpoint-2"
    _truncate(checkpoint / "optimizer.pt")
    out = tmp_path / "phase2"
    flags = ("--max_steps", "1", "--max_seq_length", "64", "--model_name_or_path", str(checkpoint))
    status, err = run(pretrain_argv("modernbert-base-context-extension", corpus, out, *flags), capsys)
    assert_one_error(status, err, "checkpoint-2: optimizer.pt has", "(truncated or rewritten)", "a phase starts from")
    assert not out.exists()


# -- issue 53: flags transformers ignores (exit 0) or fails on with a traceback -------------------------------------

TAKES = "it takes bias_correction, layer_adaptation, exclude_from_weight_decay, include_in_weight_decay"


@pytest.mark.parametrize(
    "flags, needles",
    [
        (["--optim_args", "foo=1"], ["--optim_args 'foo': not read by --optim adamw_torch", TAKES]),
        (["--optim_args", "triton=maybe"], ["'triton': not read by", "triton is read by --optim stable_adamw"]),
        (["--optim_args", "lr=abc"], ["'lr': not read by", "lr is set by --learning_rate"]),
        (["--optim_args", "bias_corection=False"], [TAKES, "did you mean 'bias_correction'?"]),
        (["--optim_args", "bias_correction=no"], ["--optim_args bias_correction=no: expected True or False"]),
        (["--optim", "sgd", "--optim_args", "momentum=abc"], ["--optim_args momentum=abc: expected a finite number"]),
        (["--optim_args", "exclude_from_weight_decay=(bias"], ["exclude_from_weight_decay=(bias: expected a regular"]),
        (["--optim_args", "bias_correction=True,layer_adaptation=True"], ["takes bias_correction=False"]),
        (
            ["--lr_scheduler_kwargs", '{"decay_from_start": "no"}'],
            ["decay_from_start must be true or false, got 'no'"],
        ),
        (["--lr_scheduler_kwargs", '{"min_lr_ratio": "low"}'], ["min_lr_ratio must be a number, got 'low'"]),
        (["--lr_scheduler_kwargs", "[1, 2]"], ["--lr_scheduler_kwargs must be a JSON object", "'[1, 2]'"]),
        (
            ["--lr_scheduler_kwargs", '{"foo": 1}'],
            ["'foo': not read by --lr_scheduler_type linear (it takes decay_from_start, warmup_scales_decay"],
        ),
        (
            ["--lr_scheduler_type", "cosine", "--lr_scheduler_kwargs", '{"decay_from_start": true}'],
            ["(it takes num_cycles)", "decay_from_start is read by --lr_scheduler_type linear"],
        ),
        (["--lr_scheduler_type", "constant", "--lr_scheduler_kwargs", '{"num_cycles": 2}'], ["(it takes none)"]),
        (
            ["--torch_compile_backend", "nonexistent"],
            ["--torch_compile_backend 'nonexistent' is not a backend", "eager"],
        ),
        (["--torch_compile_mode", "nonsense"], ["--torch_compile_mode 'nonsense' is not a mode", "reduce-overhead"]),
    ],
    ids=[
        *(f"optim_args-{case}" for case in ("unknown", "triton", "lr", "typo", "switch", "number", "regex", "lamb")),
        *(f"lr_scheduler-{case}" for case in ("switch", "number", "list", "unknown", "another-schedule", "constant")),
        "compile-backend",
        "compile-mode",
    ],
)
def test_flags_transformers_ignores_are_one_line(tmp_path, out, capsys, flags, needles):
    """Before: unknown `--optim_args` keys and values were ignored (exit 0; a user's `--optim_args` replaced bert-tiny's
    `bias_correction=False`: torch's AdamW trained), `"no"` was a true `decay_from_start`; a list or an unknown key
    of `--lr_scheduler_kwargs`, an unknown compile backend or mode stopped with a traceback at the first step."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    status, err = run(pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", *flags), capsys)
    assert_one_error(status, err, *needles)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # refused before any work


@pytest.mark.parametrize(
    "optim, available, package",
    [
        ("adamw_bnb_8bit", "bitsandbytes", "pip install bitsandbytes"),
        ("galore_adamw", "galore_torch", "pip install galore-torch"),
        ("galore_adamw_8bit", "bitsandbytes", "bitsandbytes"),
        ("schedule_free_adamw", "schedulefree", "pip install schedulefree"),
        ("adamw_anyprecision", "torchdistx", "github.com/pytorch/torchdistx"),
        ("adamw_torch_xla", "torch_xla", "pip install torch_xla"),
        ("stable_adamw", "torch_optimi", "pip install torch-optimi"),
    ],
)
def test_an_optimizer_whose_package_is_missing_is_one_line(
    tmp_path, out, capsys, monkeypatch, optim, available, package
):
    """Before: transformers' ImportError or ValueError traceback as it built the optimizer, at the first step."""
    import transformers

    monkeypatch.setattr(transformers.utils, f"is_{available}_available", lambda *args: False)
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    status, err = run(pretrain_argv("bert-tiny", corpus, out, "--max_steps", "1", "--optim", optim), capsys)
    assert_one_error(status, err, f"--optim {optim} needs", "not installed", package)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    "flags, needles",
    [
        (["--task_name", "stsb", "--label_smoothing_factor", "0.1"], ["stsb is a regression task"]),
        (["--task_name", "all", "--label_smoothing_factor", "0.1"], ["stsb is a regression task"]),
        (["--task_name", "sst2", "--optim_args", "bias_corection=False"], ["did you mean 'bias_correction'?"]),
        (["--task_name", "sst2", "--lr_scheduler_kwargs", '{"warmup_scales_decay": "no"}'], ["must be true or false"]),
    ],
)
def test_glue_flags_are_one_line(tmp_path, out, capsys, flags, needles):
    """Before: label smoothing on STS-B's regression head was `gather(): Expected dtype int32/int64` (a traceback)."""
    argv = ["--model_name_or_path", "m", "--data_dir", str(tmp_path), "--output_dir", str(out), *flags]
    assert_one_error(cli.main(["glue", *argv]), capsys.readouterr().err, *needles)


def test_glue_label_smoothing_on_scores_of_an_unnamed_task_is_one_line(tmp_path, out, capsys):
    """Files without --task_name whose labels are floats are a regression task too, known once they are read."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"t {i}", "label": i / 4}) + "\n" for i in range(4)))
    argv = ["--model_name_or_path", "m", "--train_file", str(train), "--output_dir", str(out)]
    status = cli.main(["glue", *argv, "--label_smoothing_factor", "0.1"])
    assert_one_error(status, capsys.readouterr().err, "custom is a regression task")


def test_every_optimizer_of_transformers_is_in_the_table():
    """A transformers optimizer the table lacks would take any `--optim_args` unchecked: a new one fails here."""
    from transformers.training_args import OptimizerNames

    from hf_bertology.training.flag_checks import OUR_KEYS
    from hf_bertology.training.optim_choices import TRANSFORMERS_KEYS
    from hf_bertology.training.optimizers import OPTIM_KEYS

    assert sorted(o.value for o in OptimizerNames if o.value not in TRANSFORMERS_KEYS) == []
    assert sorted(OUR_KEYS) == sorted(OPTIM_KEYS)


def test_every_recipes_own_settings_pass_the_checks(tmp_path):
    from transformers import TrainingArguments

    from hf_bertology.recipes import get_recipe
    from hf_bertology.recipes.recipe import PRESETS
    from hf_bertology.training.arguments import training_arguments
    from hf_bertology.training.flag_checks import check_flags

    for name in PRESETS:
        given = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
        check_flags(training_arguments(given, get_recipe(name), {"use_cpu", "report_to"}))


def test_switches_transformers_reads_as_text_are_honoured(tmp_path):
    """transformers gives StableAdamW `bool("False")`, True: `decouple_lr=False` trained with decoupled decay."""
    from transformers import TrainingArguments

    from hf_bertology.training.optimizers import OfficialOptimizers

    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, optim="stable_adamw", optim_args="decouple_lr=False,kahan_sum=False"
    )
    _, kwargs = OfficialOptimizers.get_optimizer_cls_and_kwargs(args)
    assert (kwargs["decouple_lr"], kwargs["kahan_sum"]) == (False, False)
    args.optim_args = "decouple_lr=True"
    assert OfficialOptimizers.get_optimizer_cls_and_kwargs(args)[1]["decouple_lr"] is True
