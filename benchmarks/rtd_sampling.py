"""RTD replacement sampling: `sample_tokens` (one keyed uniform a target, the inverse CDF of the generator's softmax;
models/replaced_token_detection.py) against torch's own `torch.multinomial` on the same softmax, the reference at its
best (one call, torch's RNG, not reproducible per example), in the same run.

    python benchmarks/rtd_sampling.py [--targets 2458] [--vocab 30522] [--repeats 5] [--threads 1]

Defaults: ELECTRA-small's shapes (128 sequences of 128 tokens, 15% chosen: 2,458 targets; BERT's 30,522 words).
Prints the median wall time of each over `--repeats` (taking turns, after one untimed call) and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hf_bertology.models.replaced_token_detection import sample_tokens


def timed(fn, repeats: int) -> list[float]:
    fn()  # untimed: allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=2458)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(args.targets, args.vocab, generator=generator) * 3
    keys = torch.randint(0, 2**62, (args.targets,), generator=generator)
    runs = {
        "torch.multinomial (reference)": lambda: torch.multinomial(logits.float().softmax(-1), 1).squeeze(1),
        "sample_tokens (keyed)": lambda: sample_tokens(logits, 1.0, keys),
    }
    medians = {name: statistics.median(timed(fn, args.repeats)) for name, fn in runs.items()}
    reference = medians["torch.multinomial (reference)"]
    print(f"| sampler | ms ({args.targets} x {args.vocab}, {args.threads} thread(s)) | vs torch.multinomial |")
    print("|---|---:|---:|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e3:,.1f} | {seconds / reference:.2f}x |")
    return medians


if __name__ == "__main__":
    main()
