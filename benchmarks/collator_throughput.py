"""Collator throughput per DataLoader worker: real tokens per second each recipe's collator makes at its default
length, as `bertology pretrain` wraps it (padding-free / target positions), against transformers'
`DataCollatorForLanguageModeling` on the same examples, in one process (one worker = one core).

    python benchmarks/collator_throughput.py [--recipes bert-base,...] [--batch_size 32] [--batches 20]

Corpus: WikiText-2 (shared/data), a family tokenizer of 8,000 tokens trained on it. Each collator gets the same
`--batches` batches of `--batch_size` examples (features as the Trainer hands them, with `example_id`); time per
batch is the median over three passes. Prints tokens/s per worker, the ratio to the reference, and the workers a
GPU needs at a given rate (`--gpu_tokens_per_s`, default the issue's target for ELECTRA-small, 1M tokens/s):
`ceil(rate / per_worker_rate)`. docs/speed.md holds the arithmetic and the numbers.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
from pathlib import Path

import datasets
import torch
from transformers import DataCollatorForLanguageModeling

from hf_bertology.collators.base import EXAMPLE_ID
from hf_bertology.data import build_pretraining_dataset, tokenize_corpus
from hf_bertology.recipes import get_recipe
from hf_bertology.training.attention import configure_attention

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
DEFAULT = "bert-base,roberta-base,spanbert-base,albert-base,electra-small,xlnet-base,deberta-v3-base,modernbert-base"


def documents(path: Path, limit: int) -> list[str]:
    """WikiText articles (split at their ` = Title = ` lines) or blank-line separated documents."""
    text = path.read_text(encoding="utf-8")
    docs = [d.replace("\n", " ").strip() for d in re.split(r"\n = |\n\s*\n", text) if len(d.strip()) > 200]
    return docs[:limit]


def time_batches(collate, batches, passes: int = 3) -> float:
    """Median over `passes` of the seconds per batch."""
    results = []
    for _ in range(passes):
        start = time.perf_counter()
        for features in batches:
            collate(features)
        results.append((time.perf_counter() - start) / len(batches))
    return statistics.median(results)


def measure(name: str, docs: list[str], batch_size: int, count: int) -> dict:
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
    ours_s, ref_s = time_batches(ours, batches), time_batches(reference, plain)
    return {
        "recipe": name,
        "length": length,
        "collator": type(collator).__name__,
        "tokens_per_s": tokens / ours_s,
        "reference_tokens_per_s": tokens / ref_s,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=DEFAULT)
    parser.add_argument("--text", type=Path, default=DATA)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--gpu_tokens_per_s", type=float, default=1e6)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one DataLoader worker: one core
    docs = documents(args.text, args.documents)
    rows = []
    print(f"| recipe | length | collator | tokens/s per worker | / DataCollatorForLanguageModeling | workers for "
          f"{args.gpu_tokens_per_s:,.0f} tokens/s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name in args.recipes.split(","):
        row = measure(name, docs, args.batch_size, args.batches)
        rows.append(row)
        workers = math.ceil(args.gpu_tokens_per_s / row["tokens_per_s"])
        print(
            f"| {name} | {row['length']} | {row['collator']} | {row['tokens_per_s']:,.0f} | "
            f"{row['tokens_per_s'] / row['reference_tokens_per_s']:.2f}x | {workers} |"
        )
    return rows


if __name__ == "__main__":
    main()
