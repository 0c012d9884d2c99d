"""Readers: a GLUE TSV folder, the Hub, or CSV/JSON files -> a ``datasets.DatasetDict`` with the Hub's columns.

Every reader returns the columns of the Hub's ``nyu-mll/glue`` (the task's sentence keys, ``label``, ``idx``) and its
label ids, so the fine-tuning run does not care where the data came from. The TSV reader follows GLUE's, BERT's and
transformers' processors (``csv.QUOTE_NONE``) and is strict: a missing column, an unknown label or a row with too
many tabs is one clear error naming the file and line. Every reader also refuses, naming file and row: a file that is
not UTF-8, a file with no rows (a header alone), a malformed JSON line, a train or dev row without a label, and a
label outside the task's label set (files of an unnamed task: outside the train file's). A very long line is read
(the tokenizer truncates it), however long.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import datasets

from ...utils import BertologyError
from .tasks import INDEX_COLUMN, LABEL_COLUMN, GlueTask, get_task


def read_text(path: Path) -> str:
    """The file's text (a byte-order mark dropped); a file that is not UTF-8 is one error naming its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")  # MRPC's files start with a byte-order mark
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise BertologyError(f"{path}:{line}: not valid UTF-8 (byte {err.start}); save the file as UTF-8") from None


def check_json_lines(path: Path) -> None:
    """A JSON Lines file whose every line is an object, else one error naming the line (datasets' own message is a
    traceback about pyarrow blocks); a file that is one JSON document (an array, or an object with a data field)
    is left to datasets."""
    text = read_text(path)
    lines = text.splitlines()
    if not text.strip():
        raise BertologyError(f"{path}: no rows")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            if number == 1 and not path.suffix == ".jsonl":
                try:
                    json.loads(text)
                    return  # one JSON document over several lines
                except ValueError:
                    pass
            raise BertologyError(f"{path}:{number}: not valid JSON ({err})") from None
        if not isinstance(row, dict):
            if number == 1 and len(lines) == 1 and path.suffix != ".jsonl":
                return  # a one-line JSON document
            raise BertologyError(f"{path}:{number}: a row must be a JSON object, found {type(row).__name__}")


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
    with io.StringIO(read_text(path), newline="") as f:
        csv.field_size_limit(sys.maxsize)  # a long text is read whole, and truncated by the tokenizer
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
    if not data[INDEX_COLUMN]:
        raise BertologyError(f"{path}: no rows{' after the header' if not headerless else ''}")
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
    for f in files.values():  # datasets' own errors here are tracebacks about pyarrow blocks or empty splits
        if builder == "json":
            check_json_lines(Path(f))
        elif sum(1 for line in read_text(Path(f)).splitlines() if line.strip()) < 2:
            raise BertologyError(f"{f}: no rows after the header")
    kwargs = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if all(f.endswith(".tsv") for f in files.values()) else {}
    raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **kwargs)
    if task is None:
        task = infer_task_from_columns(raw)
    task = get_task(task) if isinstance(task, str) else task
    return datasets.DatasetDict({split: _conform(task, ds, files[split], split) for split, ds in raw.items()})


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
        # the label set is the training file's: a label only the dev file has is refused, not a new class
        values = sorted({str(v) for v in raw[split][LABEL_COLUMN] if v is not None and str(v) != "-1"})
        names = raw_labels = tuple(values)
        metrics = ("accuracy",)
    columns_map = {k: k for k in keys if k} | {"label": LABEL_COLUMN, "idx": INDEX_COLUMN}
    return GlueTask("custom", "", keys, columns_map, names, raw_labels, metrics, {}, {})


def _conform(task: GlueTask, ds: datasets.Dataset, source: str, split: str = "train") -> datasets.Dataset:
    """Rename/encode a CSV/JSON split to the Hub's columns and label ids. A train or validation row needs a label (a
    test file's may have none: -1, as on the Hub)."""
    if len(ds) == 0:
        raise BertologyError(f"{source}: no rows")
    labelled = not split.startswith("test")
    for key in task.sentence_keys:
        if key and key not in ds.column_names:
            raise BertologyError(
                f"{source}: no column {key!r} for task {task.name} (columns: {', '.join(ds.column_names)})"
            )
    has_label = LABEL_COLUMN in ds.column_names
    if labelled and not has_label:
        raise BertologyError(
            f"{source}: no {LABEL_COLUMN!r} column, and a {split} file needs labels (unlabeled rows go in --test_file)"
        )
    lookup: dict[str, int] = {}
    if not task.is_regression:
        lookup = {str(i): i for i in range(task.num_labels)}
        lookup |= {name: i for i, name in enumerate(task.label_names)}
        lookup |= {raw: i for i, raw in enumerate(task.raw_labels)}

    def encode(example: dict[str, Any], i: int) -> dict[str, Any]:
        value = example[LABEL_COLUMN] if has_label else None
        if value is None or (not task.is_regression and str(value) == "-1"):
            if labelled:
                raise BertologyError(f"{source}: row {i + 1}: no label, and a {split} file needs one")
            label = -1.0 if task.is_regression else -1  # unlabeled (test) row
        elif task.is_regression:
            try:
                label = float(value)
            except ValueError:
                raise BertologyError(f"{source}: row {i + 1}: score {value!r} is not a number") from None
        elif str(value).strip() in lookup:
            label = lookup[str(value).strip()]
        else:
            known = ", ".join(task.raw_labels or ())
            raise BertologyError(
                f"{source}: row {i + 1}: unknown label {value!r} for task {task.name} (known: {known})"
            )
        idx = example.get(INDEX_COLUMN, i)
        return {LABEL_COLUMN: label, INDEX_COLUMN: i if idx is None else int(idx)}

    keep = [k for k in task.sentence_keys if k]
    ds = ds.map(encode, with_indices=True, remove_columns=[c for c in ds.column_names if c not in keep])
    return ds.cast(_features(task))
