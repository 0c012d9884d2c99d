"""Collator time per batch: `DataCollatorForPermutationLM` vs transformers' `DataCollatorForPermutationLanguageModeling`.

    python benchmarks/permutation_collator.py [--batch 256] [--length 128] [--repeats 30]

Both collate the same 256 features of 128 tokens (XLNet layout, a Unigram tokenizer trained on WikiText-2 when
present, else on generated text). Ours also gets the features' `word_starts` (as our data pipeline provides) and
does more: whole-word spans with an exact count, the reuse split, left padding and `attention_mask`, and
`target_mapping` rows only for the targets (transformers' is `eye(L)`). Reports, over `--repeats` interleaved calls
in the same run, the median and minimum wall time and the median CPU time of the calling thread (on a shared
machine the wall median mostly measures the others' load), and the ratios ours / transformers'.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import DataCollatorForPermutationLanguageModeling

import hf_bertology as hb

WIKITEXT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"


def corpus() -> list[str]:
    if WIKITEXT.exists():
        return [line for line in WIKITEXT.read_text(encoding="utf-8").splitlines() if len(line) > 200]
    words = "the of and to in a is was that for on as with by he it at from his an were are which".split()
    return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(120)) for i in range(2000)]


def timed(collators: dict, repeats: int) -> dict[str, dict[str, float]]:
    """Per call of each `name: (collate, features)`: median and min wall time, and median CPU time of the calling
    thread (`time.thread_time`: what the call costs, without the time other processes on a shared machine take).
    Calls are interleaved so that all collators see the same background load."""
    wall: dict[str, list[float]] = {name: [] for name in collators}
    cpu: dict[str, list[float]] = {name: [] for name in collators}
    for collate, features in collators.values():
        collate(features)  # warm-up
    for _ in range(repeats):
        for name, (collate, features) in collators.items():
            start, start_cpu = time.perf_counter(), time.thread_time()
            collate(features)
            cpu[name].append(time.thread_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return {
        name: {"median": statistics.median(wall[name]), "min": min(wall[name]), "cpu": statistics.median(cpu[name])}
        for name in collators
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a DataLoader worker uses 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    texts = corpus()
    recipe = hb.get_recipe("xlnet-mini")
    tokenizer = recipe.train_tokenizer(texts[:3000], vocab_size=8000)
    encoded = tokenizer(texts[: args.batch], truncation=True, max_length=args.length)
    features = []
    for ids, encoding in zip(encoded["input_ids"], encoded.encodings):
        previous = [None, *encoding.word_ids[:-1]]
        starts = [int(w is None or w != p) for w, p in zip(encoding.word_ids, previous)]
        features.append({"input_ids": ids, "word_starts": starts})
    features = [f for f in features if len(f["input_ids"]) == args.length][: args.batch]
    while len(features) < args.batch:
        features += features[: args.batch - len(features)]
    plain = [{"input_ids": f["input_ids"]} for f in features]

    reference = DataCollatorForPermutationLanguageModeling(tokenizer, plm_probability=1 / 6, max_span_length=5)
    ours = hb.DataCollatorForPermutationLM.from_config(recipe.config, tokenizer, seed=0)
    torch.manual_seed(0)
    results = timed(
        {"reference": (reference, plain), "ours": (ours, features), "ours_no_starts": (ours, plain)}, args.repeats
    )
    rows = [
        ("transformers DataCollatorForPermutationLanguageModeling", results["reference"]),
        ("hf_bertology DataCollatorForPermutationLM", results["ours"]),
        ("  (without word_starts: vocabulary table)", results["ours_no_starts"]),
    ]
    print(f"batch {args.batch} x {args.length} tokens, {args.threads} torch thread(s), {args.repeats} calls each")
    for name, r in rows:
        print(
            f"{name:57s} wall median {r['median'] * 1e3:6.1f} ms  min {r['min'] * 1e3:6.1f} ms  CPU {r['cpu'] * 1e3:6.1f} ms"
        )
    ref, ours = results["reference"], results["ours"]
    ratios = {key: ours[key] / ref[key] for key in ("median", "min", "cpu")}
    print("ratio ours / transformers: " + "  ".join(f"{key} {value:.3f}" for key, value in ratios.items()))


if __name__ == "__main__":
    main()
