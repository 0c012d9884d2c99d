"""The GLUE results table: a task's score (:func:`task_score`), the markdown table with the GLUE average
(:func:`glue_table`), and the table of a finished ``--task_name all`` run (:func:`collect_results`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...utils import BertologyError
from .tasks import GLUE_TASKS, GlueTask, get_task


def task_score(task: GlueTask | str, results: dict[str, float]) -> float | None:
    """The task's GLUE score from ``all_results.json`` values: the mean of its metrics (MRPC/QQP: accuracy and F1,
    STS-B: Pearson and Spearman, MNLI: matched and mismatched accuracy), as the GLUE leaderboard does."""
    task = get_task(task) if isinstance(task, str) else task
    keys = [f"eval_{m}" for m in task.metrics]
    if task.name == "mnli":
        keys += [f"eval_{m}_mm" for m in task.metrics]
    values = [results[k] for k in keys if k in results]
    return float(np.mean(values)) if values and len(values) == len(keys) else None


def glue_table(results: dict[str, dict[str, float]]) -> str:
    """A markdown table of per-task dev metrics (×100) and the GLUE average.

    ``results`` maps task name to its ``all_results.json``. Each task's score is the mean of its metrics; the average
    is over the tasks given, excluding WNLI (as BERT and later papers do: its dev set is adversarial to train)."""
    lines = ["| task | metric | score |", "|---|---|---:|"]
    scores = {}
    for name, res in results.items():
        task = get_task(name)
        keys = [f"eval_{m}" for m in task.metrics] + ([f"eval_{m}_mm" for m in task.metrics] if name == "mnli" else [])
        shown = " / ".join(f"{k.removeprefix('eval_')} {100 * res[k]:.2f}" for k in keys if k in res)
        score = task_score(task, res)
        if score is not None:
            scores[name] = score
        lines.append(f"| {name} | {shown or 'n/a'} | {'n/a' if score is None else f'{100 * score:.2f}'} |")
    counted = [s for n, s in scores.items() if n != "wnli"]
    average = f"{100 * float(np.mean(counted)):.2f}" if counted else "n/a"
    lines.append(f"| **GLUE avg** (excl. WNLI; mean of a task's metrics) | {len(counted)} tasks | **{average}** |")
    return "\n".join(lines)


def collect_results(output_dir: str | os.PathLike) -> str:
    """The GLUE table of an ``output_dir`` holding one ``<task>/all_results.json`` a task (``--task_name all``)."""
    found = {}
    for name in GLUE_TASKS:
        path = Path(output_dir) / name / "all_results.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    if not found:
        raise BertologyError(f"no <task>/all_results.json under {output_dir}")
    return glue_table(found)
