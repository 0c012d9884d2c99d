"""A mini sweep's rows (`benchmarks/mini_sweep.py --output`) as the Markdown table of a family's page (issue 52).

    python benchmarks/sweep_table.py docs/recipes/sweeps/bert-mini.jsonl

One row a candidate: its learning rate and warmup, the judged figure at every evaluation (the held-out loss of the
recipe's own objective; for replaced-token detection the discriminator's AUC, with the RTD accuracy beside the
constant guess), the objective's parts at the last evaluation, and the chosen candidate in bold: the best (lowest
loss, highest AUC) where it beats the shared mini settings' candidate (`SMALL_TRAINING`) by `MARGIN`, else that one
(a margin we set: the seed-to-seed spread of these short runs is not measured, and a difference below it is not
taken for a better setting).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from hf_bertology.recipes.base import SMALL_TRAINING

# How much better than the shared settings a candidate must end to replace them: nats of held-out loss, or AUC.
MARGIN = {"loss": 0.02, "auc": 0.01}

# The parts of an objective's held-out loss, as `bertology pretrain` names them in its evaluations.
PARTS = ("mlm_loss", "nsp_loss", "sop_loss", "sbo_loss", "plm_loss", "generator_loss", "rtd_loss")


def judged(evaluation: dict) -> float:
    """The figure a candidate is chosen on: the discriminator's AUC where there is one, else the held-out loss."""
    return evaluation.get("eval_disc_auc", evaluation["eval_loss"])


def is_rtd(rows: list[dict]) -> bool:
    return "eval_disc_auc" in rows[0]["evaluations"][-1]


def settings(candidate: str) -> tuple[str, str, str]:
    """The learning rate, the warmup and the other changes (config overrides, flags) a candidate made."""
    words = dict(word.split("=", 1) for word in shlex.split(candidate))
    changes = " ".join(filter(None, [words.get("overrides", ""), words.get("args", "")]))
    return words.get("lr", "preset"), words.get("warmup", "preset"), changes.replace("|", "\\|")


def chosen(rows: list[dict]) -> dict:
    """The candidate a family's preset takes: the best, unless it beats the shared settings by less than `MARGIN`."""
    sign = -1 if is_rtd(rows) else 1
    best = min(rows, key=lambda row: sign * judged(row["evaluations"][-1]))
    shared = float(SMALL_TRAINING["mini"]["learning_rate"])
    baseline = [row for row in rows if settings(row["candidate"])[1:] == ("preset", "") and _lr(row) == shared]
    if not baseline:
        return best
    gain = sign * (judged(baseline[0]["evaluations"][-1]) - judged(best["evaluations"][-1]))
    return best if gain >= MARGIN["auc" if is_rtd(rows) else "loss"] else baseline[0]


def _lr(row: dict) -> float | None:
    lr = settings(row["candidate"])[0]
    return None if lr == "preset" else float(lr)


def table(rows: list[dict]) -> str:
    rtd = is_rtd(rows)
    steps = sorted({e["step"] for row in rows for e in row["evaluations"]})
    parts = [p for p in PARTS if any(f"eval_{p}" in row["evaluations"][-1] for row in rows)]
    best = chosen(rows)
    name = "AUC" if rtd else "loss"
    extra = ["RTD acc / guess"] if rtd else []
    head = ["lr", "warmup", "other changes", *(f"{name} @{s}" for s in steps), *parts, *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for row in rows:
        by_step = {e["step"]: e for e in row["evaluations"]}
        last = row["evaluations"][-1]
        cells = [*settings(row["candidate"])]
        cells += [f"{judged(by_step[s]):.4f}" if s in by_step else "—" for s in steps]
        cells += [f"{last[f'eval_{p}']:.4f}" if f"eval_{p}" in last else "—" for p in parts]
        if rtd:
            cells.append(f"{last['eval_rtd_accuracy']:.4f} / {1 - last['eval_replaced_fraction']:.4f}")
        if row is best:
            cells = [f"**{cell}**" if cell else cell for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, help="a mini_sweep.py --output file")
    args = parser.parse_args(argv)
    print(table([json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]))


if __name__ == "__main__":
    main()
