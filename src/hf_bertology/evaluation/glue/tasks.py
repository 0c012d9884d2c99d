"""The GLUE task registry: the nine tasks' files, columns, labels and metrics (:class:`GlueTask`, :func:`get_task`).

Column and label names follow the Hub's ``nyu-mll/glue``; the TSV names are those written by GLUE's
``download_glue_data.py``. Nothing here reads data or runs a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...utils import BertologyError

GLUE_METRIC_PATH = str(Path(__file__).resolve().parents[1] / "metrics" / "glue")
"""Absolute path of the local GLUE metric folder: ``evaluate.load(GLUE_METRIC_PATH, config_name=task)``."""

LABEL_COLUMN, INDEX_COLUMN = "label", "idx"  # the column names of the Hub's nyu-mll/glue, used for every source


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: where its TSV files are, what their columns are called, and how it is scored.

    ``label_names`` follow the Hub's ``nyu-mll/glue`` ClassLabel order, so a model fine-tuned from either source has
    the same ``id2label``; ``raw_labels`` are the same labels as written in the GLUE TSV files and expected in the
    submission files (same order). ``columns`` maps our column names (the Hub's) to the TSV header names;
    ``headerless`` gives the column names of files that have no header row (CoLA train/dev).
    """

    name: str
    folder: str
    sentence_keys: tuple[str, str | None]
    columns: dict[str, str]
    label_names: tuple[str, ...] | None  # None: regression (STS-B)
    raw_labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    splits: dict[str, str]  # split -> file name in the task folder
    submissions: dict[str, str]  # test split -> GLUE submission file stem
    headerless: tuple[str, ...] | None = None

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.splits if s.startswith("validation"))

    @property
    def test_splits(self) -> tuple[str, ...]:
        return tuple(s for s in self.splits if s.startswith("test"))


_ONE_DEV = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")

GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in [
        GlueTask(
            "cola",
            "CoLA",
            ("sentence", None),
            {"sentence": "sentence", "label": "label", "idx": "index"},
            ("unacceptable", "acceptable"),
            _BINARY,
            ("matthews_correlation",),
            _ONE_DEV,
            {"test": "CoLA"},
            # CoLA train/dev: source code, label, original author's mark, sentence (data README; GLUE's CoLA).
            headerless=("source", "label", "author_label", "sentence"),
        ),
        GlueTask(
            "sst2",
            "SST-2",
            ("sentence", None),
            {"sentence": "sentence", "label": "label", "idx": "index"},
            ("negative", "positive"),
            _BINARY,
            ("accuracy",),
            _ONE_DEV,
            {"test": "SST-2"},
        ),
        GlueTask(
            "mrpc",
            "MRPC",
            ("sentence1", "sentence2"),
            {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality", "idx": "index"},
            ("not_equivalent", "equivalent"),
            _BINARY,
            ("accuracy", "f1"),
            _ONE_DEV,
            {"test": "MRPC"},
        ),
        GlueTask(
            "stsb",
            "STS-B",
            ("sentence1", "sentence2"),
            {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score", "idx": "index"},
            None,
            None,
            ("pearson", "spearmanr"),
            _ONE_DEV,
            {"test": "STS-B"},
        ),
        GlueTask(
            "qqp",
            "QQP",
            ("question1", "question2"),
            {"question1": "question1", "question2": "question2", "label": "is_duplicate", "idx": "id"},
            ("not_duplicate", "duplicate"),
            _BINARY,
            ("accuracy", "f1"),
            _ONE_DEV,
            {"test": "QQP"},
        ),
        GlueTask(
            "mnli",
            "MNLI",
            ("premise", "hypothesis"),
            # train has label1 then gold_label, dev has label1..label5 then gold_label: read by name, not position.
            {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label", "idx": "index"},
            ("entailment", "neutral", "contradiction"),
            ("entailment", "neutral", "contradiction"),
            ("accuracy",),
            {
                "train": "train.tsv",
                "validation_matched": "dev_matched.tsv",
                "validation_mismatched": "dev_mismatched.tsv",
                "test_matched": "test_matched.tsv",
                "test_mismatched": "test_mismatched.tsv",
            },
            {"test_matched": "MNLI-m", "test_mismatched": "MNLI-mm"},
        ),
        GlueTask(
            "qnli",
            "QNLI",
            ("question", "sentence"),
            {"question": "question", "sentence": "sentence", "label": "label", "idx": "index"},
            ("entailment", "not_entailment"),
            ("entailment", "not_entailment"),
            ("accuracy",),
            _ONE_DEV,
            {"test": "QNLI"},
        ),
        GlueTask(
            "rte",
            "RTE",
            ("sentence1", "sentence2"),
            {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label", "idx": "index"},
            ("entailment", "not_entailment"),
            ("entailment", "not_entailment"),
            ("accuracy",),
            _ONE_DEV,
            {"test": "RTE"},
        ),
        GlueTask(
            "wnli",
            "WNLI",
            ("sentence1", "sentence2"),
            {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label", "idx": "index"},
            ("not_entailment", "entailment"),
            _BINARY,
            ("accuracy",),
            _ONE_DEV,
            {"test": "WNLI"},
        ),
    ]
}


def get_task(name: str) -> GlueTask:
    """The :class:`GlueTask` called ``name`` (case-insensitive; ``sst-2``/``sts-b`` spellings accepted)."""
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise BertologyError(f"unknown GLUE task {name!r}: use one of {', '.join(GLUE_TASKS)} (or 'all')")
    return GLUE_TASKS[key]


def task_names(task_name: str | None) -> list[str] | None:
    """The task names that ``--task_name`` asks for: one, a comma-separated list, or ``all`` (None stays None)."""
    if task_name is None:
        return None
    if task_name.lower() == "all":
        return list(GLUE_TASKS)
    return [get_task(name.strip()).name for name in task_name.split(",") if name.strip()]
