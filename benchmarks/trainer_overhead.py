"""What a Trainer costs per step: a bare PyTorch loop, plain `transformers.Trainer` and our `BertologyTrainer` as
`bertology pretrain` builds it, on one model, one dataset and one collator, at shapes so small (2-layer hidden-64
BERT, batch 8 x 32, fused AdamW) that the model's compute is negligible and the host's bookkeeping shows.

    python benchmarks/trainer_overhead.py [--recipe bert-tiny] [--steps 60] [--repeats 3] [--text FILE]

All three run in this process, one after the other, `--repeats` times (interleaved, so machine load hits each
alike); each run's time per step is the median of its step intervals after `--warmup` steps (the Trainer's own
set-up is not counted; on a CPU the intervals are of process CPU time, `--clock`, so that the time other jobs on a
shared machine take from it does not count); the ratios are of the medians over the repeats. Every run does the
same work per step:
collate (the same collator, in the main process), forward, backward, clip the gradient norm to 1, fused AdamW, a
linear schedule. The plain Trainer gets the arguments a user of plain transformers would pass (`optim`,
`max_steps`, batch size; `logging_steps` 50 like ours). Prints the three ratios to the bare loop.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, get_linear_schedule_with_warmup

from hf_bertology.training.arguments import parse_args, training_arguments
from hf_bertology.training.batches import configure_batches
from hf_bertology.training.corpora import build_datasets, load_corpora
from hf_bertology.training.run_recipe import build_model, build_recipe, build_tokenizer, settle_recipe
from hf_bertology.training.run_trainer import build_trainer

TINY = "num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=256"
DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"


# The clock steps are timed with: `--clock cpu` (the default on a CPU) is the process's CPU time, which a process
# preempted by other jobs on a shared machine does not accumulate; `wall` for a GPU, where the host also waits.
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
CLOCK = [time.perf_counter]


class StepTimes(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(CLOCK[0]())


def per_step(times: list[float], warmup: int) -> float:
    """The median step interval after `warmup` steps: a step stalled by another process on a shared machine does
    not move it (a logging step, one in 50, does not either; at these shapes logging is cheap)."""
    times = times[warmup:]
    return statistics.median(b - a for a, b in zip(times, times[1:]))


def build(args, output_dir: str):
    """The Trainer `bertology pretrain` builds (the steps of `pretrain.run_pretraining` up to `train`)."""
    argv = [
        "--recipe", args.recipe, "--config_overrides", TINY, "--train_file", str(args.text),
        "--output_dir", output_dir, "--max_seq_length", str(args.length), "--vocab_size", "2000",
        "--per_device_train_batch_size", str(args.batch), "--max_steps", str(args.steps),
        "--optim", "adamw_torch_fused", "--save_strategy", "no", "--disable_tqdm", "true",
        "--max_train_samples", str(args.batch * (args.steps + 2)), "--overwrite_output_dir", "true",
        *args.extra,
    ]  # fmt: skip
    model_args, data_args, training_args, explicit = parse_args(argv)
    recipe = build_recipe(model_args)
    training_args = training_arguments(training_args, recipe, explicit, data_args.streaming)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, None)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)
    collator = recipe.build_collator(tokenizer)
    model = build_model(recipe, model_args)
    model, collator = configure_batches(recipe, model, collator, model_args, data_args)
    train, _ = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    trainer, _ = build_trainer(recipe, model, tokenizer, collator, train, None, training_args)
    if getattr(data_args, "fixed_shape_batches", False):  # (absent before issue 28: compare with older code)
        from hf_bertology.training.fixed_shape import use_fixed_shape

        use_fixed_shape(trainer, recipe.max_seq_length)
    return trainer


def run_ours(trainer, initial_state, warmup) -> float:
    trainer.model.load_state_dict(initial_state)
    trainer.optimizer = trainer.lr_scheduler = None
    timer = StepTimes()
    trainer.add_callback(timer)
    try:
        trainer.train()
    finally:
        trainer.remove_callback(timer)
    return per_step(timer.times, warmup)


def run_plain(trainer, initial_state, warmup, output_dir) -> float:
    model = copy.deepcopy(trainer.model)
    model.load_state_dict(initial_state)
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=trainer.args.per_device_train_batch_size,
        max_steps=trainer.args.max_steps,
        optim="adamw_torch_fused",
        logging_steps=50,
        save_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,  # the collator reads `word_starts`, as ours
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
    )
    timer = StepTimes()
    plain = Trainer(
        model=model,
        args=args,
        train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator,
        callbacks=[timer],
    )
    plain.train()
    return per_step(timer.times, warmup)


def run_bare(trainer, initial_state, warmup) -> float:
    model = copy.deepcopy(trainer.model).train()
    model.load_state_dict(initial_state)
    device = trainer.args.device
    model.to(device)
    args = trainer.args
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay, eps=args.adam_epsilon, fused=True
    )
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_steps), args.max_steps)
    loader = torch.utils.data.DataLoader(
        trainer.train_dataset, batch_size=args.per_device_train_batch_size, collate_fn=trainer.data_collator
    )
    times = []
    for _, batch in zip(range(args.max_steps), loader):
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(CLOCK[0]())
    return per_step(times, warmup)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="bert-tiny")
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=tuple(CLOCKS), default=None, help="default: cpu on a CPU, wall on CUDA")
    parser.add_argument("extra", nargs="*", help="more `bertology pretrain` flags, after --")
    args = parser.parse_args(argv)
    args.clock = args.clock or ("wall" if torch.cuda.is_available() else "cpu")
    CLOCK[0] = CLOCKS[args.clock]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build(args, str(Path(tmp) / "ours"))
        initial = copy.deepcopy(trainer.model.state_dict())
        runs: dict[str, list[float]] = {"bare loop": [], "plain Trainer": [], "ours": []}
        for _ in range(args.repeats):
            runs["bare loop"].append(run_bare(trainer, initial, args.warmup))
            runs["plain Trainer"].append(run_plain(trainer, initial, args.warmup, str(Path(tmp) / "plain")))
            runs["ours"].append(run_ours(trainer, initial, args.warmup))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    bare = medians["bare loop"]
    print(
        f"{args.recipe} ({TINY}), batch {args.batch}x{args.length}, {args.steps} steps, medians of {args.repeats} runs, "
        f"{torch.get_num_threads()} threads, {'cuda' if torch.cuda.is_available() else 'cpu'}, {args.clock} clock"
    )
    print("| run | time per step / bare loop |")
    print("|---|---|")
    ratios = {name: value / bare for name, value in medians.items()}
    for name, ratio in ratios.items():
        print(f"| {name} | {ratio:.2f}x |")
    print(f"ours / plain Trainer: {medians['ours'] / medians['plain Trainer']:.2f}x (target: ours <= 1.10x bare loop)")
    print(f"measured: {medians}", file=sys.stderr)
    return ratios


if __name__ == "__main__":
    main()
