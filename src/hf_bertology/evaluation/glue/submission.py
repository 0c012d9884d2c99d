"""GLUE submission files: ``index<TAB>prediction`` for each test split, with the labels as the GLUE server expects
them (run_glue.py's ``--do_predict``, with GLUE's file names: ``SST-2.tsv``, ``MNLI-m.tsv``…).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ...utils import logger
from .tasks import INDEX_COLUMN, LABEL_COLUMN, GlueTask, get_task


def write_submission(
    path: str | os.PathLike, indices: Iterable[int], predictions: Iterable[Any], task: GlueTask | str
) -> None:
    """A GLUE submission file: a header ``index<TAB>prediction`` and one row a test example, with the labels as GLUE
    expects them (0/1 for CoLA, SST-2, MRPC, QQP, WNLI; label names for MNLI, QNLI, RTE; scores for STS-B)."""
    task = get_task(task) if isinstance(task, str) else task
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for index, pred in zip(indices, np.atleast_1d(np.asarray(predictions))):
            value = f"{float(pred):.3f}" if task.is_regression else task.raw_labels[int(pred)]
            f.write(f"{index}\t{value}\n")


def predict_submissions(trainer, test_datasets: dict[str, datasets.Dataset], task: GlueTask, output_dir: str) -> None:
    """Predict each test split with ``trainer`` and write its submission file into ``output_dir`` (the main process
    writes; every process predicts, as ``Trainer.predict`` needs)."""
    for split, ds in test_datasets.items():
        indices = ds[INDEX_COLUMN]
        predictions = trainer.predict(ds.remove_columns(LABEL_COLUMN), metric_key_prefix="predict").predictions
        predictions = predictions[0] if isinstance(predictions, tuple) else predictions
        predictions = np.squeeze(predictions) if task.is_regression else np.argmax(predictions, axis=1)
        stem = task.submissions.get(split, f"{task.name}_{split}")
        path = Path(output_dir) / f"{stem}.tsv"
        if trainer.is_world_process_zero():
            write_submission(path, indices, predictions, task)
            logger.info(f"wrote {path}")
