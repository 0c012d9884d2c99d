"""One optimizer step of each official optimizer the recipes run (training/optimizers.py) against torch's fused
AdamW, on a BERT-base-sized parameter set (110M parameters, the Trainer's decay and no-decay groups).

    python benchmarks/optimizer_step.py [--recipe bert-base] [--steps 10] [--repeats 3] [--device cpu]

Every optimizer steps the same parameters with the same fixed gradients; each is built afresh, takes `--warmup`
untimed steps (its state allocated), then `--steps` timed ones, and the optimizers take turns `--repeats` times (so
machine load hits each alike; one optimizer's state in memory at a time). A step's time is the median of its process CPU time on a CPU (so that other jobs on a shared machine do not count;
the kernels' threads are summed), of its wall-clock time on CUDA (after a synchronize); the ratios are of
the medians over the repeats, to torch's fused AdamW (`optim="adamw_torch_fused"`, transformers' default). Also run:
torch's foreach AdamW (`adamw_torch`), and with `--loop` its one-tensor-at-a-time loop, for scale. Prints one row
per optimizer.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hf_bertology as hb
from hf_bertology.training.optimizers import AdamWNoBiasCorrection, Lamb

HYPER = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-6}
OPTIMIZERS = {
    "torch AdamW, fused (reference)": lambda groups: torch.optim.AdamW(groups, fused=True, **HYPER),
    "torch AdamW, foreach": lambda groups: torch.optim.AdamW(groups, foreach=True, **HYPER),
    "AdamWNoBiasCorrection (bert, electra, xlnet, deberta-v3)": lambda groups: AdamWNoBiasCorrection(groups, **HYPER),
    "Lamb (albert)": lambda groups: Lamb(groups, **HYPER),
}


def parameter_groups(recipe: str, device: str) -> list[dict]:
    """`recipe`'s model's parameters with gradients, as the Trainer's decay and no-decay groups (wd 0.01 and 0);
    a LAMB group without decay takes no layer adaptation, as the recipe's."""
    torch.manual_seed(0)
    model = hb.get_recipe(recipe).build_model().to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    decay, rest = [], []
    for name, param in model.named_parameters():
        param.grad = torch.randn(param.shape, generator=gen, device=device) * 1e-3
        (rest if "bias" in name or "LayerNorm" in name else decay).append(param)
    return [
        {"params": decay, "weight_decay": 0.01, "layer_adaptation": True},
        {"params": rest, "weight_decay": 0.0, "layer_adaptation": False},
    ]


def step_times(optimizer, steps: int, warmup: int, device: str) -> float:
    """The median time of one `optimizer.step()` after `warmup` steps (CPU time on a CPU, wall time on CUDA)."""
    cuda = device.startswith("cuda")
    sync, clock = (torch.cuda.synchronize, time.perf_counter) if cuda else (lambda: None, time.process_time)
    times = []
    for index in range(warmup + steps):
        sync()
        start = clock()
        optimizer.step()
        sync()
        if index >= warmup:
            times.append(clock() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="bert-base", help="whose model's parameters (default bert-base)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--loop", action="store_true", help="also torch's AdamW one tensor at a time")
    args = parser.parse_args(argv)
    optimizers = dict(OPTIMIZERS)
    if args.loop:
        optimizers["torch AdamW, for-loop"] = lambda groups: torch.optim.AdamW(groups, foreach=False, **HYPER)
    groups = parameter_groups(args.recipe, args.device)
    count = sum(p.numel() for g in groups for p in g["params"])
    measured: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(args.repeats):
        for name, build in optimizers.items():  # one optimizer's state at a time (0.9 GB each at BERT-base)
            optimizer = build([dict(g) for g in groups])
            measured[name].append(step_times(optimizer, args.steps, args.warmup, args.device))
            del optimizer
    medians = {name: statistics.median(times) for name, times in measured.items()}
    reference = medians[next(iter(OPTIMIZERS))]
    print(f"{args.recipe}: {count / 1e6:.1f}M parameters, {args.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; median of {args.repeats} x {args.steps} steps")  # fmt: skip
    print("| optimizer | ms / step | vs fused AdamW |\n|---|---:|---:|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e3:.1f} | {seconds / reference:.2f} |")
    return {name: seconds / reference for name, seconds in medians.items()}


if __name__ == "__main__":
    main()
