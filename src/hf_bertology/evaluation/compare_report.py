"""`bertology compare`'s report: `report.md` (recipe x task table, GLUE average, FLOPs, tokens, wall time, final
pretraining losses) and the two plots, from the comparison's `results.json` record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BASELINE = "random-init"  # the name of the random-init baseline's row
# plot file -> (x label, y label, title)
PLOT_LABELS = {
    "loss_vs_flops.png": (
        "training FLOPs (real tokens)",
        "pretraining loss (each objective's own)",
        "Pretraining loss vs compute",
    ),
    "glue_vs_flops.png": (
        "pretraining FLOPs",
        "GLUE average (dev, ×100)",
        "Downstream quality vs pretraining compute",
    ),
}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def _pct_se(value: float | None, se: float | None) -> str:
    """A score ×100, with its standard error over fine-tuning seeds when there is one."""
    return _pct(value) + ("" if se is None or value is None else f" ± {100 * se:.2f}")


def _seeds_text(seeds: list[int]) -> str:
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return (
        f"seeds {', '.join(map(str, seeds))} (one fine-tuning run a seed, all from the same pretrained model; a "
        "score is the mean over seeds ± its standard error, sample standard deviation / √seeds)"
    )


def _flops(value: float | None) -> str:
    return "—" if not value else f"{value:.3g}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def report_markdown(results: dict[str, Any]) -> str:
    settings, models, tasks = results["settings"], results["models"], results["settings"]["glue_tasks"]
    budget = (
        f"{settings['budget_flops']:.3g} training FLOPs"
        if settings["budget_flops"]
        else f"{settings['budget_minutes']:g} wall minutes of training"
    )
    lines = [
        "# Recipe comparison at equal compute",
        "",
        f"Corpus: {settings['corpus']}. Budget per recipe: **{budget}**. Tokenizer: each family's own, vocabulary "
        f"{settings['vocab_size']}, sequence length {settings['max_seq_length']}, seed {settings['seed']}. "
        + (
            f"Learning rate: warmup over the first {100 * settings['warmup_fraction']:g}% of the budget, then linear "
            "decay to 0 at the budget."
            if settings["budget_schedule"]
            else "Learning rate: each recipe's own step schedule (stopped at the budget)."
        ),
        "",
        f"Fine-tuning: {settings['glue_epochs']:g} epochs, lr {settings['glue_learning_rate']:g}, batch "
        f"{settings['glue_batch_size']}, max length {settings['glue_max_seq_length']}, "
        + _seeds_text(settings.get("glue_seeds") or [settings["seed"]])
        + (
            f", first {settings['glue_max_train_samples']} training examples"
            if settings["glue_max_train_samples"]
            else ""
        )
        + (f", first {settings['glue_max_eval_samples']} dev examples" if settings["glue_max_eval_samples"] else "")
        + ". Scores are dev-set metrics × 100 (a task's score is the mean of its GLUE metrics: MCC for CoLA, "
        "Pearson/Spearman for STS-B, accuracy for SST-2).",
        "",
    ]
    header = [
        "model",
        *tasks,
        "GLUE avg",
        "train FLOPs",
        "FLOPs/token",
        "tokens",
        "steps",
        "train time",
        "final losses",
    ]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 2) + "---|"]
    for name, entry in models.items():
        pre = entry.get("pretrain") or {}
        losses = ", ".join(f"{k} {v:.3f}" for k, v in (pre.get("final_losses") or {}).items())
        row = [
            f"**{name}**" if name != BASELINE else f"{name} ({settings['baseline']} arch)",
            *(_pct_se(entry["glue_scores"].get(t), entry.get("glue_scores_se", {}).get(t)) for t in tasks),
            f"**{_pct_se(entry['glue_average'], entry.get('glue_average_se'))}**",
            _flops(pre.get("flops")),
            _flops(pre.get("flops_per_token")),
            f"{pre['tokens']:,}" if pre else "0",
            str(pre.get("steps", 0)),
            _duration(pre["seconds"]) if pre else "—",
            losses or "—",
        ]
        lines.append("| " + " | ".join(row) + " |")
    if tasks:
        lines += ["", "Each fine-tuning started from: " + "; ".join(
            f"{name}, `{entry.get('finetuned_from', entry['model_dir'])}`" for name, entry in models.items()
        ) + "."]  # fmt: skip
    ranked = sorted(
        ((n, e["glue_average"]) for n, e in models.items() if e["glue_average"] is not None), key=lambda x: -x[1]
    )
    if ranked:
        lines += ["", "Ranking by GLUE average: " + " > ".join(f"{n} ({100 * s:.2f})" for n, s in ranked) + "."]
    lines += [
        "",
        "Training FLOPs = 3 × forward FLOPs of every matmul the model runs, counted on real (non-pad) tokens only: "
        "encoder stacks (ELECTRA: generator and discriminator) per real token, sparse prediction heads per predicted "
        "position, poolers per sequence, plus attention 4·d_attn·Σ n_i² per layer forward (QKᵀ and A·V over the "
        "n_i real tokens of each sequence); see `hf_bertology/training/budget.py`. Wall time is the training loop "
        "only (tokenization excluded). The final losses are each objective's own (e.g. ELECTRA's is MLM + 50·RTD) "
        "and are not comparable across recipes; compare the GLUE columns.",
        "",
        "![pretraining loss vs FLOPs](loss_vs_flops.png)",
        "",
    ]
    if has_glue_scores(results):  # the plot is drawn only then (`make_plots`)
        lines += ["![GLUE average vs pretraining FLOPs](glue_vs_flops.png)", ""]
    return "\n".join(lines)


def has_glue_scores(results: dict[str, Any]) -> bool:
    """Whether any model has a GLUE average (with `--glue_tasks ""` none has, and there is nothing to plot)."""
    return any(entry["glue_average"] is not None for entry in results["models"].values())


def make_plots(results: dict[str, Any], output_dir: Path) -> list[Path]:
    """loss_vs_flops.png, and glue_vs_flops.png when a model has GLUE scores (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = results["models"]
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, entry in models.items():
        curve = (entry.get("pretrain") or {}).get("curve") or []
        if curve:
            ax.plot([p["flops"] for p in curve], [p["loss"] for p in curve], marker=".", label=name)
    paths.append(_save_plot(fig, ax, output_dir, "loss_vs_flops.png"))

    if not has_glue_scores(results):
        return paths
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, entry in models.items():
        average = entry["glue_average"]
        if average is None:
            continue
        if name == BASELINE:
            ax.axhline(100 * average, color="gray", linestyle="--", label=f"{name} (no pretraining)")
            continue
        flops = entry["pretrain"]["flops"]
        se = entry.get("glue_average_se")
        ax.errorbar([flops], [100 * average], yerr=None if se is None else [100 * se], fmt="o", capsize=3, zorder=3)
        ax.annotate(name, (flops, 100 * average), textcoords="offset points", xytext=(5, 4), fontsize=9)
    ax.set_xlim(left=0)
    paths.append(_save_plot(fig, ax, output_dir, "glue_vs_flops.png"))
    return paths


def _save_plot(fig, ax, output_dir: Path, name: str) -> Path:
    """Label `ax` as `PLOT_LABELS[name]` says, give it a legend if anything is labelled and a light grid, write `fig`
    to `output_dir / name` and close it: the two plots share one look."""
    import matplotlib.pyplot as plt

    xlabel, ylabel, title = PLOT_LABELS[name]
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = output_dir / name
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
