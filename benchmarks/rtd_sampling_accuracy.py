"""How far RTD's sampler is from the softmax it samples: the total-variation distance between the distribution
`sample_tokens` draws from (models/replaced_token_detection.py) and the exact softmax, at BERT's 30,522 and
DeBERTa-v3's 128,100 tokens, for the sampler of the tree and for the one before (transcribed below: a float32
softmax and running sum, inverted at a 24-bit float32 uniform).

    python benchmarks/rtd_sampling_accuracy.py [--rows 4] [--scale 3] [--vocab 30522 128100]

The reference is the float64 softmax of the same float32 logits (`randn * scale`). The one before is measured
exactly: all 2**24 uniforms go through its arithmetic (the product rounded to float32 included). The tree's is the
float64 CDF's steps over its last entry; its 53-bit uniforms add at most V * 2**-53 (under 2e-11) to the distance.
Also printed: the probability mass of the tokens a sampler can never draw.
"""

from __future__ import annotations

import argparse

import torch

from hf_bertology.models.replaced_token_detection import softmax_cdf


def before(logits: torch.Tensor) -> torch.Tensor:
    """The distribution the float32 sampler drew from (sample_tokens before issue 53), counted over every uniform."""
    cdf = logits.float().softmax(-1).cumsum(-1)
    grid = torch.arange(2**24, dtype=torch.float32) * 2.0**-24  # every 24-bit uniform, exact in float32
    drawn = torch.searchsorted(cdf, grid * cdf[-1], right=True)
    return torch.bincount(drawn, minlength=len(logits)).double() / 2**24


def now(logits: torch.Tensor) -> torch.Tensor:
    cdf = softmax_cdf(logits[None])[0]
    return torch.diff(cdf, prepend=cdf.new_zeros(1)) / cdf[-1]


def main(argv: list[str] | None = None) -> dict[tuple[int, str], tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--scale", type=float, default=3.0)
    parser.add_argument("--vocab", type=int, nargs="+", default=[30522, 128100])
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    results = {}
    print(f"| vocabulary | sampler | total variation (max of {args.rows} rows) | mass never drawn (max) |")
    print("|---:|---|---:|---:|")
    for vocab in args.vocab:
        logits = torch.randn(args.rows, vocab, generator=generator) * args.scale
        for name, sampler in (("float32 (before)", before), ("float64 (now)", now)):
            tv, lost = 0.0, 0.0
            for row in logits:
                exact = row.double().softmax(-1)
                drawn = sampler(row)
                tv = max(tv, 0.5 * (drawn - exact).abs().sum().item())
                lost = max(lost, exact[drawn == 0].sum().item())
            results[vocab, name] = (tv, lost)
            print(f"| {vocab:,} | {name} | {tv:.2e} | {lost:.2e} |")
    return results


if __name__ == "__main__":
    main()
