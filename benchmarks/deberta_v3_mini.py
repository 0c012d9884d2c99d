"""`deberta-v3-mini` before and after issue 26 (EMD, windowed masks, λ, parts clipped apart), and λ = 10 vs 50, on CPU.

    python benchmarks/deberta_v3_mini.py OUT_DIR --old_src /tmp/old/src [--steps 50] [--batch 8] [--text FILE]
    python benchmarks/deberta_v3_mini.py OUT_DIR --plot_only

Every run is `bertology pretrain --recipe deberta-v3-mini` (L4/H256, generator L2, 128 tokens, lr 5e-4; batch
`--batch`, 8 by default: on a 2-core machine shared by others a batch of 32 takes ~40 s a step) with seed 0, the
same text, the same tokenizer (trained once by the first run, then passed as `--tokenizer_name`) and the same
number of steps, logged every 2 steps:

- `new λ=10`: the recipe as it is now (the official training script's λ, EMD, one mask per 6-token window, the
  generator and the discriminator clipped apart);
- `new λ=50`: the same with `--config_overrides discriminator_weight=50` (the paper's λ);
- `old`: the code at `--old_src` (e.g. `git archive <commit> src | tar -x -C /tmp/old`), its own defaults.

The linear schedule decays to zero at `--steps` (`--max_steps`). Writes `OUT_DIR/<run>.json` (the logged steps),
`OUT_DIR/deberta_v3_mini.png` (generator MLM loss, discriminator RTD loss and accuracy against the step) and
`OUT_DIR/deberta_v3_mini.md` (the means over the last 10 steps). Losses of different λ are compared per component
(`mlm_loss`, `rtd_loss`), never as the weighted sum. Run it under `nice` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00"
RUNS = {  # name -> (source tree: "new" or "old", extra flags)
    "new λ=10": ("new", []),
    "new λ=50": ("new", ["--config_overrides", "discriminator_weight=50"]),
    "old": ("old", []),
}
KEYS = ("mlm_loss", "rtd_loss", "rtd_accuracy", "mlm_accuracy", "grad_norm")


def slug(name: str) -> str:
    return name.replace(" ", "_").replace("λ=", "lambda")


def run(name: str, src: Path, extra: list[str], args, tokenizer: Path | None) -> list[dict]:
    out = args.out_dir / slug(name)
    argv = [sys.executable, "-m", "hf_bertology", "pretrain", "--recipe", "deberta-v3-mini"]
    argv += ["--train_file", str(args.text), "--output_dir", str(out), "--overwrite_output_dir", "true"]
    argv += ["--max_steps", str(args.steps), "--logging_steps", "2", "--save_steps", str(args.steps)]
    argv += ["--per_device_train_batch_size", str(args.batch)]
    argv += ["--seed", "0", "--disable_tqdm", "true", "--use_cpu", "true", "--dataloader_num_workers", "0"]
    argv += ["--tokenizer_name", str(tokenizer)] if tokenizer else ["--vocab_size", "8000"]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(args.threads)}
    start = time.perf_counter()
    subprocess.run(argv + extra, env=env, check=True, cwd=ROOT)
    state = json.loads((out / f"checkpoint-{args.steps}" / "trainer_state.json").read_text())
    logs = [{k: log[k] for k in ("step", *KEYS) if k in log} for log in state["log_history"] if "rtd_loss" in log]
    (args.out_dir / f"{slug(name)}.json").write_text(json.dumps(logs, indent=1))
    print(f"{name}: {args.steps} steps in {time.perf_counter() - start:.0f} s", flush=True)
    return logs


def summarise(results: dict[str, list[dict]], out_dir: Path, last: int = 10) -> str:
    lines = [
        f"| run | mlm_loss | rtd_loss | rtd_accuracy | mlm_accuracy | (means over the last {last} steps) |",
        "|---|---|---|---|---|---|",
    ]
    for name, logs in results.items():
        tail = [log for log in logs if log["step"] > logs[-1]["step"] - last]
        means = [sum(log[k] for log in tail) / len(tail) for k in KEYS[:4]]
        lines.append(f"| {name} | " + " | ".join(f"{m:.3f}" for m in means) + " | |")
    table = "\n".join(lines) + "\n"
    (out_dir / "deberta_v3_mini.md").write_text(table)
    return table


def plot(results: dict[str, list[dict]], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for (name, logs), style in zip(results.items(), ("-", "--", ":")):
        steps = [log["step"] for log in logs]
        for ax, key in zip(axes, ("mlm_loss", "rtd_loss", "rtd_accuracy")):
            ax.plot(steps, [log[key] for log in logs], style, label=name)  # dashed: λ=50 may lie on λ=10
            ax.set_title(f"deberta-v3-mini: {key}")
            ax.set_xlabel("optimizer step")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "deberta_v3_mini.png", dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--old_src", type=Path, help="the old code's src/ folder (without it: no `old` run)")
    parser.add_argument("--text", type=Path, default=TEXT)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plot_only", action="store_true", help="re-plot the runs already in OUT_DIR")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    first = args.out_dir / slug(next(iter(RUNS)))
    tokenizer = first if (first / "tokenizer_config.json").is_file() else None
    for name, (tree, extra) in RUNS.items():
        saved = args.out_dir / f"{slug(name)}.json"
        if args.plot_only or saved.is_file():
            if saved.is_file():
                results[name] = json.loads(saved.read_text())
            continue
        if tree == "old" and args.old_src is None:
            continue
        src = ROOT / "src" if tree == "new" else args.old_src
        results[name] = run(name, src, extra, args, tokenizer)
        tokenizer = tokenizer or args.out_dir / slug(name)  # the first run's tokenizer, for every later run
    if not results:
        raise SystemExit("no runs")
    plot(results, args.out_dir)
    print(summarise(results, args.out_dir))


if __name__ == "__main__":
    main()
