"""Collator throughput per DataLoader worker: real tokens per second each recipe's collator makes at its default
length, as `bertology pretrain` wraps it (padding-free / target positions), against transformers'
`DataCollatorForLanguageModeling` on the same examples, in one process (one worker = one core), and the workers a
GPU needs to never wait for data.

    python benchmarks/collator_throughput.py [--recipes bert-base,...] [--batch_size 32] [--batches 20]

Corpus: WikiText-2 (shared/data), a family tokenizer of 8,000 tokens trained on it. Each collator gets the same
`--batches` batches of `--batch_size` examples (features as the Trainer hands them, with `example_id`). Time per
batch is the fastest of `--passes` passes, ours and the reference alternating, so that other jobs on the machine
move the ratio as little as possible.

The GPU rate a recipe must feed: the tokens/s of its model at `--gpu_mfu` (default 0.45, issue 28's BERT-base
target) of a `--gpu_peak` FLOP/s device (default an H100's dense bf16 989e12), from its training FLOPs per real
token (`hf_bertology.training.budget.FlopCounter` on a padded batch of the corpus at the default length; the
8,000-token vocabulary makes the MLM head a little cheaper than the official ones), or the issue's own target
(`TARGETS`: ELECTRA-small 1M tokens/s). Workers needed:
`ceil(HEADROOM * rate / per_worker_rate)`. docs/speed.md holds the arithmetic and the numbers.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import datasets
import torch
from transformers import DataCollatorForLanguageModeling

from hf_bertology.collators.base import EXAMPLE_ID
from hf_bertology.data import build_pretraining_dataset, tokenize_corpus
from hf_bertology.recipes import get_recipe
from hf_bertology.training.batches import configure_attention

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
DEFAULT = "bert-base,roberta-base,spanbert-base,albert-base,electra-small,xlnet-base,deberta-v3-base,modernbert-base"


def documents(path: Path, limit: int) -> list[str]:
    """WikiText articles (split at their ` = Title = ` lines) or blank-line separated documents."""
    text = path.read_text(encoding="utf-8")
    docs = [d.replace("\n", " ").strip() for d in re.split(r"\n = |\n\s*\n", text) if len(d.strip()) > 200]
    return docs[:limit]


HEADROOM = 1.5  # workers make 1.5x what the GPU eats: jitter, a slow batch, the host's other work
# Issue 28's own targets where the MFU rate does not apply: ELECTRA-small is launch-bound (1M tokens/s is ~7% MFU).
TARGETS = {"electra-small": 1e6}


def time_pass(collate, batches) -> float:
    """Seconds per batch of one pass over `batches`."""
    start = time.perf_counter()
    for features in batches:
        collate(features)
    return (time.perf_counter() - start) / len(batches)


def flops_per_token(recipe, collator, rows) -> float:
    """Training FLOPs per real token of the recipe's model on a padded batch of `rows` (forward counted, x3)."""
    from hf_bertology.training.budget import FlopCounter

    model = recipe.build_model().eval()
    counter = FlopCounter(model)
    with counter, torch.no_grad():
        model(**{k: v for k, v in collator(rows).items() if k != "target_positions"})
    return counter.training_flops / counter.tokens


def measure(name: str, docs: list[str], batch_size: int, count: int, passes: int = 5) -> dict:
    recipe = get_recipe(name)
    length = recipe.max_seq_length
    corpus = datasets.Dataset.from_dict({"text": docs})
    tokenizer = recipe.train_tokenizer(docs, 8000)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, length, 0)
    needed = batch_size * count
    rows = [{EXAMPLE_ID: i, **examples[i % len(examples)]} for i in range(needed)]
    batches = [rows[i : i + batch_size] for i in range(0, needed, batch_size)]
    tokens = sum(len(r["input_ids"]) for r in rows) / count
    collator = recipe.build_collator(tokenizer)
    if hasattr(collator, "set_run_seed"):
        collator.set_run_seed(0)
    _, ours = configure_attention(torch.nn.Module(), collator, None, None, recipe.padding_free)
    reference = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    plain = [[{"input_ids": r["input_ids"]} for r in batch] for batch in batches]
    ours_s, ref_s = [], []
    for _ in range(passes):
        ours_s.append(time_pass(ours, batches))
        ref_s.append(time_pass(reference, plain))
    return {
        "recipe": name,
        "length": length,
        "collator": type(collator).__name__,
        "tokens_per_s": tokens / min(ours_s),
        "reference_tokens_per_s": tokens / min(ref_s),
        "flops_per_token": flops_per_token(recipe, collator, rows[:2]),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=DEFAULT)
    parser.add_argument("--text", type=Path, default=DATA)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--gpu_mfu", type=float, default=0.45)
    parser.add_argument("--gpu_peak", type=float, default=989e12)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one DataLoader worker: one core
    docs = documents(args.text, args.documents)
    rows = []
    print(f"| recipe | length | collator | tokens/s per worker | / DataCollatorForLanguageModeling | FLOPs/token | "
          f"GPU tokens/s at {args.gpu_mfu:.0%} MFU (or target) | workers |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name in args.recipes.split(","):
        row = measure(name, docs, args.batch_size, args.batches, args.passes)
        row["gpu_tokens_per_s"] = TARGETS.get(name, args.gpu_mfu * args.gpu_peak / row["flops_per_token"])
        row["workers"] = math.ceil(HEADROOM * row["gpu_tokens_per_s"] / row["tokens_per_s"])
        rows.append(row)
        print(
            f"| {name} | {row['length']} | {row['collator']} | {row['tokens_per_s']:,.0f} | "
            f"{row['tokens_per_s'] / row['reference_tokens_per_s']:.2f}x | {row['flops_per_token'] / 1e6:,.0f}M | "
            f"{row['gpu_tokens_per_s']:,.0f} | {row['workers']} |"
        )
    return rows


if __name__ == "__main__":
    main()
