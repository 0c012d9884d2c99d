"""A recipe's batch is global (issue 51): per-device micro-batch x processes x accumulation = the paper's batch,
derived from the flags before any work, refused in one line where no product reaches it, recorded in the run
folder's arguments and card; the CUDA probe's halving on out-of-memory, with a fake step."""

from __future__ import annotations

import json

import pytest
import torch

from hf_bertology import cli
from hf_bertology.training import arguments
from hf_bertology.training.global_batch import BatchPlan, largest_micro_batch, plan_batch
from hf_bertology.training.run_recipe import build_recipe
from hf_bertology.utils import BertologyError
from platform_support import write_corpus


def derived(argv: list[str], world: int, monkeypatch) -> tuple[int, int, int]:
    """(micro-batch, accumulation, global batch) that `bertology pretrain ARGV` derives on `world` processes (the
    launcher's count; no process group is formed)."""
    monkeypatch.setattr(arguments, "launched_world_size", lambda: world)
    model_args, _, training_args, explicit = arguments.parse_args(
        [*argv, "--output_dir", "unused", "--use_cpu", "true"]
    )
    recipe = build_recipe(model_args)
    defaults = {**arguments.PRETRAIN_DEFAULTS, **arguments.recipe_training(recipe, explicit)}
    plan = arguments.global_batch_plan(training_args, defaults, explicit)
    return plan.micro, plan.accumulation, plan.global_batch


def test_roberta_base_holds_its_global_batch_on_one_and_two_processes(monkeypatch):
    argv = ["--recipe", "roberta-base", "--per_device_train_batch_size", "4"]
    assert derived(argv, 1, monkeypatch) == (4, 2048, 8192)
    assert derived(argv, 2, monkeypatch) == (4, 1024, 8192)
    assert derived(["--recipe", "roberta-base"], 4, monkeypatch) == (8, 256, 8192)  # the default micro-batch
    # the official ModernBERT run: 8 GPUs x 576 a device, micro-batches of 96 (device_train_microbatch_size)
    assert derived(["--recipe", "modernbert-base"], 8, monkeypatch) == (96, 6, 4608)
    # --global_batch_size 0: the recipe's batch on each process, as before
    assert derived(["--recipe", "roberta-base", "--global_batch_size", "0"], 2, monkeypatch) == (8192, 1, 16384)


def test_the_training_arguments_carry_the_split(tmp_path):
    argv = ["--recipe", "roberta-base", "--output_dir", str(tmp_path), "--per_device_train_batch_size", "4"]
    model_args, _, training_args, explicit = arguments.parse_args(argv)
    args = arguments.training_arguments(training_args, build_recipe(model_args), explicit)
    assert isinstance(args, arguments.PretrainingArguments)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.global_batch_size) == (
        4, 2048, 8192,
    )  # fmt: skip
    tiny = arguments.parse_args(["--recipe", "bert-tiny", "--output_dir", str(tmp_path)])
    args = arguments.training_arguments(tiny[2], build_recipe(tiny[0]), tiny[3])
    # a tiny preset's global batch is its former per-device batch on one process: the same steps as before
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.global_batch_size) == (8, 1, 8)


def test_plan_batch_derives_or_refuses_in_one_line():
    assert plan_batch(8, 2, None, 2) == BatchPlan(2, 2, 2)  # accumulation given: the micro-batch follows
    both = plan_batch(8, 1, 3, 2)  # both given: their product is the global batch, and the line says so
    assert (both.global_batch, both.held) == (6, False) and "not the recipe's 8" in both.line()
    assert plan_batch(0, 2, None, None, recipe_micro=16).line() == (
        "global batch 32 = 16 per device x 2 processes x 1 accumulation step (per device: no global batch held)"
    )
    assert BatchPlan(32, 8, 32).line() == "global batch 8192 = 32 per device x 8 processes x 32 accumulation steps"
    with pytest.raises(
        BertologyError, match=r"choose --per_device_train_batch_size 2 or 4, --global_batch_size 6 or 9"
    ):
        plan_batch(8, 1, 3, None)
    with pytest.raises(BertologyError, match=r"--gradient_accumulation_steps 2 or 4"):
        plan_batch(8, 1, None, 3)
    with pytest.raises(
        BertologyError, match=r"cannot be shared by 3 processes exactly: choose --global_batch_size 6 or 9"
    ):
        plan_batch(8, 3, None, None)
    with pytest.raises(BertologyError, match=r"--per_device_train_batch_size must be at least 1, got 0"):
        plan_batch(8, 1, 0, None)
    with pytest.raises(BertologyError, match=r"--global_batch_size must be at least 0"):
        plan_batch(-1, 1, None, None)


def test_an_unreachable_global_batch_is_one_error_line_and_nothing_written(tmp_path, capsys):
    corpus, out = write_corpus(tmp_path / "corpus.txt", n_docs=5), tmp_path / "out"
    argv = ["pretrain", "--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(out),
            "--per_device_train_batch_size", "3", "--use_cpu", "true"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: global batch 8 cannot be made of micro-batches of 3 on 1 process"), err
    assert "--per_device_train_batch_size 2 or 4" in err[-1] and "--gradient_accumulation_steps" in err[-1]
    assert not out.exists()


def test_a_tiny_run_folder_records_its_global_batch(tmp_path, capsys):
    corpus, out = write_corpus(tmp_path / "corpus.txt", n_docs=20), tmp_path / "out"
    argv = ["pretrain", "--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(out),
            "--vocab_size", "300", "--per_device_train_batch_size", "4", "--max_steps", "2", "--use_cpu", "true",
            "--report_to", "none", "--disable_tqdm", "true", "--dataloader_num_workers", "0"]  # fmt: skip
    assert cli.main(argv) == 0
    line = "global batch 8 = 4 per device x 1 process x 2 accumulation steps"
    assert capsys.readouterr().err.count(line) == 1
    saved = json.loads((out / "training_args.json").read_text())
    assert (saved["global_batch_size"], saved["per_device_train_batch_size"], saved["gradient_accumulation_steps"]) == (
        8, 4, 2,
    )  # fmt: skip
    assert f"| batch | {line} |" in (out / "README.md").read_text()
    checkpoint = torch.load(out / "checkpoint-2" / "training_args.bin", weights_only=False)
    assert (checkpoint.global_batch_size, checkpoint.gradient_accumulation_steps) == (8, 2)
    assert json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["train_batch_size"] == 4


def test_the_probe_halves_on_out_of_memory_to_a_divisor():
    def fake(limit: int, tried: list[int]):
        def step(size: int) -> None:
            tried.append(size)
            if size > limit:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")

        return step

    tried = []
    assert largest_micro_batch(fake(24, tried), 576) == 18
    assert tried == [576, 288, 144, 72, 36, 18]
    tried = []  # 100 = 2^2 x 5^2: after 25, the largest divisor at or below 12 is 10
    assert largest_micro_batch(fake(7, tried), 100) == 5
    assert tried == [100, 50, 25, 10, 5]
    tried = []
    assert largest_micro_batch(fake(64, tried), 256, start=32) == 32 and tried == [32]
    with pytest.raises(BertologyError, match="one example of the recipe's length does not fit"):
        largest_micro_batch(fake(0, []), 8)


def test_the_probe_step_trains_nothing_and_draws_nothing(tmp_path):
    """The probe's step on a real model (here on the CPU, where no run probes): one forward and backward of the
    recipe's examples, then no gradient kept, the RNG as it was, and the split set to hold the batch."""
    from transformers import TrainingArguments

    import hf_bertology as hb
    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
    from hf_bertology.training.global_batch import probe_micro_batch

    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=20)
    recipe = hb.get_recipe("bert-tiny")
    tokenizer = recipe.train_tokenizer([corpus.read_text()], vocab_size=300)
    recipe.adapt_to_tokenizer(tokenizer)
    dataset = build_pretraining_dataset(
        tokenize_corpus(load_corpus(str(corpus)), tokenizer), tokenizer, recipe.config, recipe.max_seq_length, seed=0
    )
    model = recipe.build_model()
    args = TrainingArguments(
        str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=2, gradient_accumulation_steps=4
    )
    state = torch.get_rng_state()
    plan = probe_micro_batch(model, recipe.build_collator(tokenizer, seed=0), dataset, args)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(p.grad is None for p in model.parameters())
    assert (plan.micro, args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 8, 1)
