"""Fine-tune a checkpoint on GLUE and report its dev metrics.

Follows transformers' ``examples/pytorch/text-classification/run_glue.py`` (flags, sections of ``main``,
``all_results.json``, submission files), with three additions:

* a reader for the original GLUE TSV folders written by GLUE's ``download_glue_data.py`` (``--data_dir``), read with
  quoting disabled as GLUE's, BERT's and transformers' processors do (``csv.QUOTE_NONE``), and strict: a missing
  column, an unknown label or a row with too many tabs is one clear error naming the file and line;
* the papers' fine-tuning defaults where the user gives none (:data:`GLUE_DEFAULTS`, BERT's ``run_classifier.py``
  settings), and ELECTRA's layer-wise learning-rate decay (``--layerwise_lr_decay``, after ELECTRA's
  ``configure_finetuning.py`` / ``model/optimization.py``);
* ``--task_name all`` (or a comma-separated list) fine-tunes several tasks and prints a markdown table with the GLUE
  average (:func:`glue_table`).

Metrics come from the local ``evaluate`` module ``metrics/glue/glue.py`` (:data:`GLUE_METRIC_PATH`), so nothing needs
the network unless ``--dataset_name`` asks for the Hub.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..hub import push_from_training_args
from ..utils import BertologyError, logger, set_verbosity

GLUE_METRIC_PATH = str(Path(__file__).resolve().parent / "metrics" / "glue")
"""Absolute path of the local GLUE metric folder: ``evaluate.load(GLUE_METRIC_PATH, config_name=task)``."""

LABEL_COLUMN, INDEX_COLUMN = "label", "idx"  # the column names of the Hub's nyu-mll/glue, used for every source


# --------------------------------------------------------------------------------------------------------------------
# Task table
# --------------------------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------------------------
# Readers: GLUE TSV folder, Hub, CSV/JSON files -> datasets.Dataset with the Hub's columns
# --------------------------------------------------------------------------------------------------------------------
def _features(task: GlueTask) -> datasets.Features:
    feats = {key: datasets.Value("string") for key in task.sentence_keys if key}
    feats[LABEL_COLUMN] = (
        datasets.Value("float32") if task.is_regression else datasets.ClassLabel(names=list(task.label_names))
    )
    feats[INDEX_COLUMN] = datasets.Value("int32")
    return datasets.Features(feats)


def read_glue_tsv(task: GlueTask | str, path: str | os.PathLike, split: str | None = None) -> datasets.Dataset:
    """Read one GLUE TSV file into a ``Dataset`` with the Hub's columns (sentence keys, ``label``, ``idx``).

    Quoting is disabled (``csv.QUOTE_NONE``), as in GLUE's and transformers' processors: many fields start with
    ``"``. Test files (no label column) get ``label = -1``, as on the Hub; files without an index column get the row
    number. The split name (``train``, ``validation``, ``test``…) only chooses whether the file is headerless
    (CoLA train/dev); by default it is guessed from the file name.
    """
    task = get_task(task) if isinstance(task, str) else task
    path = Path(path)
    if not path.is_file():
        raise BertologyError(f"GLUE file not found: {path}")
    if split is None:
        split = "test" if path.name.startswith("test") else "train"
    headerless = task.headerless is not None and not split.startswith("test")
    # utf-8-sig: MRPC's files start with a byte-order mark, which would otherwise glue itself to "Quality".
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(task.headerless) if headerless else next(rows, None)
        if header is None:
            raise BertologyError(f"{path}: empty file")
        is_test = split.startswith("test")
        wanted = {key: task.columns[key] for key in task.sentence_keys if key}
        if not is_test:
            wanted[LABEL_COLUMN] = task.columns["label"]
        positions = {}
        for key, column in wanted.items():
            if column not in header:
                raise BertologyError(
                    f"{path}: no column {column!r} for GLUE task {task.name} (header: {', '.join(header)})"
                )
            positions[key] = header.index(column)
        index_pos = header.index(task.columns["idx"]) if task.columns["idx"] in header else None

        data: dict[str, list] = {key: [] for key in wanted}
        data.setdefault(LABEL_COLUMN, [])
        data[INDEX_COLUMN] = []
        raw_to_id = None if task.is_regression else {raw: i for i, raw in enumerate(task.raw_labels)}
        for row in rows:
            if not row:  # a blank line (none in the GLUE files, but harmless)
                continue
            where = f"{path}:{rows.line_num}"
            if len(row) != len(header):
                raise BertologyError(
                    f"{where}: expected {len(header)} tab-separated fields, found {len(row)} "
                    f"(a stray tab inside a text field?)"
                )
            for key, pos in positions.items():
                if key != LABEL_COLUMN:
                    data[key].append(row[pos])
            if is_test:
                data[LABEL_COLUMN].append(-1.0 if task.is_regression else -1)
            else:
                raw = row[positions[LABEL_COLUMN]].strip()
                if raw_to_id is None:
                    try:
                        data[LABEL_COLUMN].append(float(raw))
                    except ValueError:
                        raise BertologyError(f"{where}: score {raw!r} is not a number") from None
                elif raw in raw_to_id:
                    data[LABEL_COLUMN].append(raw_to_id[raw])
                else:
                    raise BertologyError(
                        f"{where}: unknown label {raw!r} for GLUE task {task.name} "
                        f"(expected one of {', '.join(task.raw_labels)})"
                    )
            if index_pos is not None:
                try:
                    data[INDEX_COLUMN].append(int(row[index_pos]))
                except ValueError:
                    raise BertologyError(f"{where}: index {row[index_pos]!r} is not an integer") from None
            else:
                data[INDEX_COLUMN].append(len(data[INDEX_COLUMN]))
    return datasets.Dataset.from_dict(data, features=_features(task))


def load_glue_folder(task: GlueTask | str, data_dir: str | os.PathLike) -> datasets.DatasetDict:
    """Read every split of ``task`` present in a GLUE task folder (``glue_data/SST-2``), or in a GLUE root folder
    that holds the task's folder (``glue_data``). Split names are the Hub's (``validation_matched``…)."""
    task = get_task(task) if isinstance(task, str) else task
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise BertologyError(f"GLUE data folder not found: {data_dir}")
    if not any((data_dir / name).is_file() for name in task.splits.values()) and (data_dir / task.folder).is_dir():
        data_dir = data_dir / task.folder
    found = {split: data_dir / name for split, name in task.splits.items() if (data_dir / name).is_file()}
    if not found:
        raise BertologyError(
            f"{data_dir} holds none of the {task.name} files ({', '.join(task.splits.values())}); "
            f"--data_dir should be the task's GLUE folder, e.g. glue_data/{task.folder}"
        )
    return datasets.DatasetDict({split: read_glue_tsv(task, path, split) for split, path in found.items()})


def load_glue_hub(
    task: GlueTask | str, dataset_name: str = "nyu-mll/glue", cache_dir: str | None = None
) -> datasets.DatasetDict:
    """``datasets.load_dataset(dataset_name, task)``, with a one-line error when it cannot be reached (offline)."""
    task = get_task(task) if isinstance(task, str) else task
    try:
        return datasets.load_dataset(dataset_name, task.name, cache_dir=cache_dir)
    except Exception as err:  # the Hub raises many types (ConnectionError, OfflineModeIsEnabled, ValueError…)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BertologyError(
            f"could not load {dataset_name}/{task.name} from the Hub ({first}); offline, use --data_dir with the "
            f"GLUE TSV folder or --train_file/--validation_file"
        ) from None


def load_glue_files(
    task: GlueTask | str | None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    cache_dir: str | None = None,
) -> datasets.DatasetDict:
    """CSV or JSON (lines) files, as in run_glue.py. With a task, the files hold its sentence columns (the Hub's
    names, e.g. ``premise``/``hypothesis`` for MNLI) and ``label`` (a class id, a label name or the GLUE raw label);
    without one, the columns are taken as run_glue.py does (see :func:`infer_task_from_columns`)."""
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: f for split, f in files.items() if f}
    if not files:
        raise BertologyError("give --train_file, --validation_file or --test_file")
    extensions = set()
    for f in files.values():
        if not Path(f).is_file():
            raise BertologyError(f"data file not found: {f}")
        ext = Path(f).suffix.lstrip(".").lower()
        extensions.add({"jsonl": "json", "tsv": "csv"}.get(ext, ext))
    if len(extensions) != 1 or not extensions <= {"csv", "json"}:
        raise BertologyError(f"data files must all be .csv or all .json/.jsonl, got {', '.join(files.values())}")
    builder = extensions.pop()
    kwargs = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if all(f.endswith(".tsv") for f in files.values()) else {}
    raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **kwargs)
    if task is None:
        task = infer_task_from_columns(raw)
    task = get_task(task) if isinstance(task, str) else task
    return datasets.DatasetDict({split: _conform(task, ds, files[split]) for split, ds in raw.items()})


def infer_task_from_columns(raw: datasets.DatasetDict) -> GlueTask:
    """A :class:`GlueTask` for files of an unknown task, as run_glue.py does: ``sentence1``/``sentence2`` if present,
    else the first one or two non-label columns; a float ``label`` means regression, else the sorted label values."""
    split = "train" if "train" in raw else next(iter(raw))
    columns = [c for c in raw[split].column_names if c not in (LABEL_COLUMN, INDEX_COLUMN)]
    if "sentence1" in columns and "sentence2" in columns:
        keys = ("sentence1", "sentence2")
    elif len(columns) >= 2:
        keys = (columns[0], columns[1])
    elif columns:
        keys = (columns[0], None)
    else:
        raise BertologyError(f"the {split} file has no text column")
    if LABEL_COLUMN not in raw[split].column_names:
        raise BertologyError(f"the {split} file has no 'label' column")
    dtype = raw[split].features[LABEL_COLUMN].dtype
    if dtype.startswith("float"):
        names = raw_labels = None
        metrics = ("pearson", "spearmanr")
    else:
        values = sorted({str(v) for s in raw.values() if LABEL_COLUMN in s.column_names for v in s[LABEL_COLUMN]})
        names = raw_labels = tuple(values)
        metrics = ("accuracy",)
    columns_map = {k: k for k in keys if k} | {"label": LABEL_COLUMN, "idx": INDEX_COLUMN}
    return GlueTask("custom", "", keys, columns_map, names, raw_labels, metrics, {}, {})


def _conform(task: GlueTask, ds: datasets.Dataset, source: str) -> datasets.Dataset:
    """Rename/encode a CSV/JSON split to the Hub's columns and label ids."""
    for key in task.sentence_keys:
        if key and key not in ds.column_names:
            raise BertologyError(
                f"{source}: no column {key!r} for task {task.name} (columns: {', '.join(ds.column_names)})"
            )
    has_label = LABEL_COLUMN in ds.column_names
    lookup: dict[str, int] = {}
    if not task.is_regression:
        lookup = {str(i): i for i in range(task.num_labels)}
        lookup |= {name: i for i, name in enumerate(task.label_names)}
        lookup |= {raw: i for i, raw in enumerate(task.raw_labels)}

    def encode(example: dict[str, Any], i: int) -> dict[str, Any]:
        value = example[LABEL_COLUMN] if has_label else None
        if value is None or (not task.is_regression and str(value) == "-1"):
            label = -1.0 if task.is_regression else -1  # unlabeled (test) row
        elif task.is_regression:
            label = float(value)
        elif str(value).strip() in lookup:
            label = lookup[str(value).strip()]
        else:
            raise BertologyError(f"{source}: row {i + 1}: unknown label {value!r} for task {task.name}")
        idx = example.get(INDEX_COLUMN, i)
        return {LABEL_COLUMN: label, INDEX_COLUMN: i if idx is None else int(idx)}

    keep = [k for k in task.sentence_keys if k]
    ds = ds.map(encode, with_indices=True, remove_columns=[c for c in ds.column_names if c not in keep])
    return ds.cast(_features(task))


# --------------------------------------------------------------------------------------------------------------------
# Arguments (run_glue.py's, with the papers' defaults)
# --------------------------------------------------------------------------------------------------------------------
GLUE_DEFAULTS: dict[str, Any] = {
    # BERT's run_classifier.py / paper §4.1 and SpanBERT's README: lr 2e-5, batch 32, 3 epochs, max_len 128,
    # warmup 10% of the steps (a float in [0, 1) is a ratio in transformers 5), weight decay 0.01.
    "learning_rate": 2e-5,
    "num_train_epochs": 3.0,
    "per_device_train_batch_size": 32,
    "warmup_steps": 0.1,
    "weight_decay": 0.01,
}
"""TrainingArguments defaults used when the user gives none (``--max_seq_length`` defaults to 128)."""


@dataclass
class DataTrainingArguments:
    """What data to fine-tune and evaluate on (run_glue.py's ``DataTrainingArguments`` plus ``data_dir``)."""

    task_name: str | None = field(
        default=None,
        metadata={"help": f"GLUE task: {', '.join(GLUE_TASKS)}; 'all' or a comma-separated list runs several."},
    )
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A GLUE task folder in the original TSV format (glue_data/SST-2); with several tasks, the GLUE "
            "root folder that holds the task folders (glue_data)."
        },
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "A Hub dataset with GLUE's configs, e.g. nyu-mll/glue (needs the network)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "A csv or json file with the training data."})
    validation_file: str | None = field(default=None, metadata={"help": "A csv or json file with the dev data."})
    test_file: str | None = field(default=None, metadata={"help": "A csv or json file with the test data."})
    max_seq_length: int = field(
        default=128,
        metadata={"help": "Maximum total input length after tokenization; longer inputs are truncated."},
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={"help": "Pad every sample to max_seq_length; if False, pad each batch to its longest sample."},
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training examples (quick runs)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N evaluation examples (quick runs)."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N test examples (quick runs)."}
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes for tokenization (datasets.map num_proc)."}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Re-tokenize instead of using the cache."})


@dataclass
class ModelArguments:
    """Which checkpoint to fine-tune (run_glue.py's ``ModelArguments`` plus ELECTRA's layer-wise lr decay)."""

    model_name_or_path: str = field(
        metadata={"help": "Any checkpoint AutoModelForSequenceClassification loads: a local folder or a Hub id."}
    )
    config_name: str | None = field(default=None, metadata={"help": "Config name or path, if not the model's."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer name or path, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache downloads."})
    model_revision: str = field(default="main", metadata={"help": "Model version (branch, tag or commit)."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow modeling code shipped with the checkpoint (auto_map)."}
    )
    ignore_mismatched_sizes: bool = field(
        default=False, metadata={"help": "Re-initialise a classification head whose size differs from the task's."}
    )
    layerwise_lr_decay: float | None = field(
        default=None,
        metadata={
            "help": "ELECTRA's layer-wise learning-rate decay (e.g. 0.8): lr * decay**(L + 2 - depth), embeddings "
            "at depth 0, layer i at depth i + 1, the task head at depth L + 2."
        },
    )


def _parser():
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    parser.set_defaults(**GLUE_DEFAULTS)  # argparse defaults: any flag the user gives wins
    return parser


def parse_args(argv: Sequence[str] | None = None):
    """``(model_args, data_args, training_args)`` from flags, or from one ``.json``/``.yaml`` file (run_glue.py),
    with :data:`GLUE_DEFAULTS` for every TrainingArguments value the user leaves out. With none of ``--do_train``,
    ``--do_eval``, ``--do_predict``, trains and evaluates."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")):
        path = Path(argv[0])
        if not path.is_file():
            raise BertologyError(f"arguments file not found: {path}")
        if path.suffix == ".json":
            values = json.loads(path.read_text())
        else:
            import yaml

            values = yaml.safe_load(path.read_text())
        try:
            model_args, data_args, training_args = parser.parse_dict({**GLUE_DEFAULTS, **values})
        except (ValueError, TypeError) as err:  # unknown keys, wrong types, TrainingArguments' own checks
            raise BertologyError(f"{path}: {str(err).strip().splitlines()[0]}") from None
    else:
        try:
            model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
        except ValueError as err:  # TrainingArguments.__post_init__ checks (argparse itself exits with usage)
            raise BertologyError(str(err).strip().splitlines()[0]) from None
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        training_args.do_train = training_args.do_eval = True
    return model_args, data_args, training_args


# --------------------------------------------------------------------------------------------------------------------
# ELECTRA's layer-wise learning-rate decay
# --------------------------------------------------------------------------------------------------------------------
_LAYER_INDEX = re.compile(r"\.layers?\.(\d+)\.")
_NO_DECAY = re.compile(r"bias|layernorm|layer_norm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)", re.IGNORECASE)


def parameter_depth(name: str, num_layers: int) -> int:
    """ELECTRA's depth of a parameter (``_get_layer_lrs`` in ``model/optimization.py``): embeddings (and their
    projection) 0, encoder layer i at i + 1, anything else (pooler, task head) L + 2. A layer shared by all depths
    (ALBERT) is put at the top layer, L."""
    if "embedding" in name or "mask_emb" in name:  # BERT/ELECTRA "embeddings.*", XLNet "word_embedding", "mask_emb"
        return 0
    match = _LAYER_INDEX.search(name)
    if match:
        return int(match.group(1)) + 1
    if "encoder" in name:  # ALBERT's shared albert_layer_groups
        return num_layers
    return num_layers + 2


def layerwise_lr_param_groups(
    model, learning_rate: float, layerwise_lr_decay: float, weight_decay: float
) -> list[dict[str, Any]]:
    """Optimizer param groups with ``lr * decay**(L + 2 - depth)`` (ELECTRA ``configure_finetuning.py``,
    ``layerwise_lr_decay=0.8``), split into weight-decay / no-decay groups as the Trainer does (no decay on biases
    and norms). Passed to the Trainer as ``optimizer_cls_and_kwargs=(AdamW, {"params": groups, ...})`` so the Trainer
    still builds its warmup/decay schedule on top of each group's own lr."""
    config = model.config
    num_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    if not num_layers:
        raise BertologyError(f"cannot apply --layerwise_lr_decay: {type(config).__name__} has no number of layers")
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = parameter_depth(name, num_layers)
        decay = _NO_DECAY.search(name) is None
        group = groups.setdefault(
            (depth, decay),
            {
                "params": [],
                "names": [],
                "lr": learning_rate * layerwise_lr_decay ** (num_layers + 2 - depth),
                "weight_decay": weight_decay if decay else 0.0,
            },
        )
        group["params"].append(param)
        group["names"].append(name)
    return [groups[key] for key in sorted(groups)]


# --------------------------------------------------------------------------------------------------------------------
# GLUE table
# --------------------------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------------
def _load_raw(task: GlueTask | None, data_args: DataTrainingArguments, cache_dir: str | None) -> datasets.DatasetDict:
    if data_args.data_dir:
        if task is None:
            raise BertologyError("--data_dir needs --task_name")
        return load_glue_folder(task, data_args.data_dir)
    if data_args.dataset_name:
        if task is None:
            raise BertologyError("--dataset_name needs --task_name")
        return load_glue_hub(task, data_args.dataset_name, cache_dir)
    if data_args.train_file or data_args.validation_file or data_args.test_file:
        return load_glue_files(
            task, data_args.train_file, data_args.validation_file, data_args.test_file, cache_dir=cache_dir
        )
    raise BertologyError("give the data: --data_dir GLUE_TASK_DIR, --dataset_name nyu-mll/glue or --train_file/...")


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)


def _load_tokenizer(model_args: ModelArguments):
    from transformers import AutoTokenizer

    name = model_args.tokenizer_name or model_args.model_name_or_path
    # transformers 5 does not fail on a folder without tokenizer files: it builds an empty tokenizer (only the
    # special tokens) from config.json, and every word becomes [UNK]. Refuse that instead of training on it.
    if Path(name).is_dir() and not any((Path(name) / f).is_file() for f in _TOKENIZER_FILES):
        raise BertologyError(
            f"{name} has no tokenizer ({', '.join(_TOKENIZER_FILES[:3])}…); save one there or pass --tokenizer_name"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            trust_remote_code=model_args.trust_remote_code,
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BertologyError(f"no tokenizer could be loaded from {name} ({first}); pass --tokenizer_name") from None
    if len(tokenizer) <= len(tokenizer.all_special_tokens):
        raise BertologyError(f"the tokenizer of {name} has no vocabulary beyond its special tokens")
    return tokenizer


def run_task(model_args: ModelArguments, data_args: DataTrainingArguments, training_args) -> dict[str, float]:
    """Fine-tune and/or evaluate one task (run_glue.py's ``main``); returns the metrics written to
    ``all_results.json``."""
    import evaluate
    import transformers
    from transformers import AutoConfig, AutoModelForSequenceClassification, Trainer, set_seed

    task = get_task(data_args.task_name) if data_args.task_name else None
    set_seed(training_args.seed)

    # Data ----------------------------------------------------------------------------------------------------------
    raw = _load_raw(task, data_args, model_args.cache_dir)
    if task is None:  # CSV/JSON files of a task we do not know: take its shape from the files
        task = infer_task_from_columns(raw)
    needed = {"do_train": ["train"], "do_eval": list(task.eval_splits) or ["validation"]}
    needed["do_predict"] = list(task.test_splits) or ["test"]
    for flag, splits in needed.items():
        if getattr(training_args, flag) and not any(s in raw for s in splits):
            raise BertologyError(f"--{flag} needs the {' / '.join(splits)} split, which the data does not have")
    eval_splits = [s for s in (task.eval_splits or ("validation",)) if s in raw]
    test_splits = [s for s in (task.test_splits or ("test",)) if s in raw]

    # Model and tokenizer -------------------------------------------------------------------------------------------
    tokenizer = _load_tokenizer(model_args)
    label_kwargs: dict[str, Any] = {"num_labels": task.num_labels, "finetuning_task": task.name}
    if not task.is_regression:
        label_kwargs["id2label"] = dict(enumerate(task.label_names))
        label_kwargs["label2id"] = {name: i for i, name in enumerate(task.label_names)}
    try:
        config = AutoConfig.from_pretrained(
            model_args.config_name or model_args.model_name_or_path,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            trust_remote_code=model_args.trust_remote_code,
            **label_kwargs,
        )
        model = AutoModelForSequenceClassification.from_pretrained(
            model_args.model_name_or_path,
            config=config,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            trust_remote_code=model_args.trust_remote_code,
            ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
        )
    except RuntimeError as err:
        if "ignore_mismatched_sizes" not in str(err):
            raise
        # e.g. a checkpoint already fine-tuned on a task with another number of labels
        raise BertologyError(
            f"{model_args.model_name_or_path} has a classification head of another size than {task.name}'s "
            f"{task.num_labels} label(s); pass --ignore_mismatched_sizes to re-initialise it"
        ) from None
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BertologyError(f"could not load {model_args.model_name_or_path} for classification: {first}") from None

    # Tokenization (batched datasets.map) ---------------------------------------------------------------------------
    max_seq_length = data_args.max_seq_length
    if max_seq_length > tokenizer.model_max_length:
        logger.warning(
            f"--max_seq_length {max_seq_length} > the tokenizer's {tokenizer.model_max_length}; using the latter"
        )
        max_seq_length = tokenizer.model_max_length
    key1, key2 = task.sentence_keys
    padding = "max_length" if data_args.pad_to_max_length else False

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        texts = (batch[key1],) if key2 is None else (batch[key1], batch[key2])
        return tokenizer(*texts, padding=padding, max_length=max_seq_length, truncation=True)

    def prepare(split: str, limit: int | None) -> datasets.Dataset:
        ds = raw[split]
        if limit is not None:
            ds = ds.select(range(min(limit, len(ds))))
        with training_args.main_process_first(desc=f"tokenizing {split}"):
            return ds.map(
                tokenize,
                batched=True,
                num_proc=data_args.preprocessing_num_workers,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Tokenizing {task.name} {split}",
            )

    train_dataset = prepare("train", data_args.max_train_samples) if training_args.do_train else None
    eval_datasets = {s: prepare(s, data_args.max_eval_samples) for s in eval_splits} if training_args.do_eval else {}
    test_datasets = (
        {s: prepare(s, data_args.max_predict_samples) for s in test_splits} if training_args.do_predict else {}
    )

    # Metric --------------------------------------------------------------------------------------------------------
    metric_config = "stsb" if task.is_regression else (task.name if task.name in GLUE_TASKS else "sst2")
    metric = evaluate.load(GLUE_METRIC_PATH, config_name=metric_config, cache_dir=model_args.cache_dir)

    def compute_metrics(p: transformers.EvalPrediction) -> dict[str, float]:
        logits = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.squeeze(logits) if task.is_regression else np.argmax(logits, axis=1)
        result = metric.compute(predictions=preds, references=p.label_ids)
        if len(result) > 1:  # run_glue.py's combined_score: the mean of the task's metrics
            result["combined_score"] = float(np.mean(list(result.values())))
        return result

    # Trainer (ELECTRA's layer-wise lr decay as a custom param-group builder) -----------------------------------------
    optimizer_cls_and_kwargs = None
    if model_args.layerwise_lr_decay is not None:
        import torch

        groups = layerwise_lr_param_groups(
            model, training_args.learning_rate, model_args.layerwise_lr_decay, training_args.weight_decay
        )
        for group in groups:
            group.pop("names")
        optimizer_cls_and_kwargs = (
            torch.optim.AdamW,
            {
                "params": groups,
                "lr": training_args.learning_rate,
                "betas": (training_args.adam_beta1, training_args.adam_beta2),
                "eps": training_args.adam_epsilon,
            },
        )
    # `--push_to_hub` pushes the fine-tuned folder once at the end (hub.push_from_training_args), not every checkpoint.
    push_args = copy.copy(training_args)
    training_args.push_to_hub = False
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=next(iter(eval_datasets.values()), None),
        processing_class=tokenizer,  # also gives DataCollatorWithPadding (or the default collator when pre-padded)
        compute_metrics=compute_metrics,
        optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
    )

    all_metrics: dict[str, float] = {}
    # Training ------------------------------------------------------------------------------------------------------
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        metrics = dict(train_result.metrics)
        metrics["train_samples"] = len(train_dataset)
        trainer.save_model()  # also saves the tokenizer
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        all_metrics |= metrics

    # Evaluation (MNLI: matched, then mismatched with an "_mm" suffix, as run_glue.py) ------------------------------
    eval_metrics: dict[str, float] = {}
    for split, ds in eval_datasets.items():
        metrics = trainer.evaluate(eval_dataset=ds)
        metrics["eval_samples"] = len(ds)
        if split == "validation_mismatched":
            metrics = {f"{k}_mm": v for k, v in metrics.items()}
        trainer.log_metrics("eval", metrics)
        eval_metrics |= metrics
    if eval_metrics:
        trainer.save_metrics("eval", eval_metrics)  # one eval_results.json (MNLI: matched and mismatched)
        all_metrics |= eval_metrics

    # Prediction: GLUE submission files (index<TAB>prediction) ------------------------------------------------------
    for split, ds in test_datasets.items():
        indices = ds[INDEX_COLUMN]
        predictions = trainer.predict(ds.remove_columns(LABEL_COLUMN), metric_key_prefix="predict").predictions
        predictions = predictions[0] if isinstance(predictions, tuple) else predictions
        predictions = np.squeeze(predictions) if task.is_regression else np.argmax(predictions, axis=1)
        stem = task.submissions.get(split, f"{task.name}_{split}")
        path = Path(training_args.output_dir) / f"{stem}.tsv"
        if trainer.is_world_process_zero():
            write_submission(path, indices, predictions, task)
            logger.info(f"wrote {path}")
    if training_args.do_train and trainer.is_world_process_zero():
        push_from_training_args(training_args.output_dir, push_args)
    return all_metrics


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


def _tasks_of(task_name: str | None) -> list[str] | None:
    if task_name is None:
        return None
    if task_name.lower() == "all":
        return list(GLUE_TASKS)
    return [get_task(name.strip()).name for name in task_name.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> int:
    """``bertology glue …`` / ``examples/run_glue.py``: fine-tune, evaluate, predict; see :func:`parse_args`."""
    import transformers

    model_args, data_args, training_args = parse_args(argv)
    set_verbosity()  # our own info lines; transformers keeps its level (TrainingArguments --log_level)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    tasks = _tasks_of(data_args.task_name)
    if tasks is None or len(tasks) == 1:
        if tasks:
            data_args.task_name = tasks[0]
        run_task(model_args, data_args, training_args)
        return 0

    # Several tasks: each in output_dir/<task>, then the GLUE table. With --data_dir (the GLUE root), tasks whose
    # folder is missing are skipped; with --dataset_name all are run.
    if not (data_args.data_dir or data_args.dataset_name):
        raise BertologyError("several tasks need --data_dir (the GLUE root folder) or --dataset_name")
    if data_args.data_dir and not Path(data_args.data_dir).is_dir():
        raise BertologyError(f"GLUE data folder not found: {data_args.data_dir}")
    from dataclasses import replace

    results: dict[str, dict[str, float]] = {}
    root_out = Path(training_args.output_dir)
    for name in tasks:
        task = GLUE_TASKS[name]
        task_data = replace(data_args, task_name=name)
        if data_args.data_dir:
            folder = Path(data_args.data_dir) / task.folder
            if not folder.is_dir():
                logger.warning(f"skipping {name}: no folder {folder}")
                continue
            task_data.data_dir = str(folder)
        task_training = replace(training_args, output_dir=str(root_out / name))
        results[name] = run_task(model_args, task_data, task_training)
    if not results:
        raise BertologyError(f"no GLUE task folder ({', '.join(t.folder for t in GLUE_TASKS.values())}) found")
    table = glue_table(results)
    root_out.mkdir(parents=True, exist_ok=True)
    (root_out / "glue_results.md").write_text(table + "\n")
    (root_out / "glue_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
