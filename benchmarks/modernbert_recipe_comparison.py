"""ModernBERT-mini, the recipe before issue 26 against the recipe now (docs/recipes/modernbert.md), on CPU.

Both runs: the same Wikipedia text, the same tokenizer (trained on that text with the same settings), the same seed,
the same number of steps, batch and length; each recipe's own data layout, masking, optimizer and schedule. The
"old" recipe is registered here as a preset with the settings the project used before: torch AdamW (wd 1e-5, clip
1.0), warmup-stable-decay with a 1-sqrt decay over the last 10%, one token stream cut into blocks (attention across
documents), an exact masked count, RoPE θ 160,000 / 10,000, no dropout. Writes, next to the docs page,
`modernbert_mini_comparison.png` (training MLM loss) and `modernbert_mini_comparison.json` (the curves and the final
numbers: last training losses, held-out MLM loss of each at its own masking).

    nice python benchmarks/modernbert_recipe_comparison.py   # 120 steps of batch 8 each, ~2 CPU-minutes
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "data" / "corpus" / "enwiki-2015-wikiextractor" / "AA"
OUT = REPO / "docs" / "recipes"


def register_old_recipe() -> str:
    """The `modernbert-mini` preset as it was before issue 26 (git history: recipes.py, `_modernbert_preset`)."""
    from hf_bertology.recipes import PRESETS

    old = copy.deepcopy(PRESETS["modernbert-mini"])
    for key in ("attention_output_dropout", "rope_parameters"):
        old["config"].pop(key)
    # transformers' ModernBertConfig defaults: θ 160,000 global / 10,000 local, every dropout 0.0
    old["config"].update(input_format="token_stream", masking_draw="exact")
    training = old["training"]
    for key in ("optim", "optim_args"):
        training.pop(key)  # the Trainer's default AdamW
    training.update(
        max_grad_norm=1.0,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": 200, "decay_type": "1-sqrt"},  # set per run below
    )
    PRESETS["modernbert-mini-before-issue-26"] = old
    return "modernbert-mini-before-issue-26"


def run(recipe: str, steps: int, batch: int, train_files: list[str], validation: str, workdir: Path) -> dict:
    from hf_bertology.recipes import PRESETS
    from hf_bertology.training.pretrain import main

    if "num_decay_steps" in PRESETS[recipe]["training"].get("lr_scheduler_kwargs", {}):
        PRESETS[recipe]["training"]["lr_scheduler_kwargs"]["num_decay_steps"] = steps // 10
    out = workdir / recipe
    argv = ["--recipe", recipe, "--train_file", *train_files, "--validation_file", validation]
    argv += ["--output_dir", str(out), "--max_steps", str(steps), "--seed", "0", "--logging_steps", "5"]
    argv += ["--per_device_train_batch_size", str(batch), "--do_eval", "--eval_strategy", "no"]
    argv += ["--max_eval_samples", "128", "--save_strategy", "steps", "--save_steps", str(steps)]
    argv += ["--dataloader_num_workers", "0", "--disable_tqdm", "true", "--use_cpu", "true"]
    start = time.time()
    metrics = main(argv)
    history = json.loads((out / f"checkpoint-{steps}" / "trainer_state.json").read_text())["log_history"]
    curve = [(log["step"], log["mlm_loss"]) for log in history if "mlm_loss" in log and "eval_mlm_loss" not in log]
    return {
        "recipe": recipe,
        "seconds": round(time.time() - start, 1),
        "curve": curve,
        "final_train_mlm_loss_mean_last_20_steps": sum(v for s, v in curve if s > steps - 20)
        / max(1, sum(1 for s, _ in curve if s > steps - 20)),
        "eval_mlm_loss": metrics.get("eval_mlm_loss", metrics.get("eval_loss")),
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--train_files", type=int, default=1, help="wiki_00 … of the corpus for training")
    parser.add_argument("--plot_only", action="store_true", help="redraw the figure from the JSON, no training")
    args = parser.parse_args()
    if args.plot_only:
        report = json.loads((OUT / "modernbert_mini_comparison.json").read_text())
        return plot(report["runs"], report["batch_size"])
    train_files = [str(CORPUS / f"wiki_{i:02d}") for i in range(args.train_files)]
    validation = str(CORPUS / "wiki_99")
    old = register_old_recipe()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in (old, "modernbert-mini"):
            results.append(run(recipe, args.steps, args.batch_size, train_files, validation, Path(tmp)))
    OUT.mkdir(parents=True, exist_ok=True)
    report = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "train_files": [Path(f).name for f in train_files],
        "validation": "wiki_99",
    }
    report["runs"] = results
    (OUT / "modernbert_mini_comparison.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(results, args.batch_size)
    for result in results:
        print(result["recipe"], result["seconds"], "s", "eval", result["eval_mlm_loss"])


def plot(results: list[dict], batch_size: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for result, label in zip(results, ("before issue 26", "now (docs/recipes/modernbert.md)")):
        steps, losses = zip(*result["curve"])
        ax.plot(steps, losses, label=f"{label}: eval MLM loss {result['eval_mlm_loss']:.3f}")
    ax.set_xlabel(f"step (batch {batch_size} rows of ≤ 128 tokens)")
    ax.set_ylabel("training MLM loss")
    ax.set_title("modernbert-mini on Wikipedia (CPU, seed 0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "modernbert_mini_comparison.png", dpi=100)


if __name__ == "__main__":
    main()
