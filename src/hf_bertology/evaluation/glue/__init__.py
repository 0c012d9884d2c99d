"""Fine-tune a checkpoint on GLUE and report its dev metrics (``bertology glue``, ``examples/run_glue.py``).

Follows transformers' ``examples/pytorch/text-classification/run_glue.py`` (flags, sections of ``main``,
``all_results.json``, submission files), with three additions:

* a reader for the original GLUE TSV folders written by GLUE's ``download_glue_data.py`` (``--data_dir``), read with
  quoting disabled as GLUE's, BERT's and transformers' processors do (``csv.QUOTE_NONE``), and strict: a missing
  column, an unknown label or a row with too many tabs is one clear error naming the file and line;
* the papers' fine-tuning defaults where the user gives none (:data:`GLUE_DEFAULTS`, BERT's ``run_classifier.py``
  settings), and ELECTRA's layer-wise learning-rate decay (``--layerwise_lr_decay``, after ELECTRA's
  ``configure_finetuning.py`` / ``model/optimization.py``; it lives in ``training/layerwise_lr.py``);
* ``--task_name all`` (or a comma-separated list) fine-tunes several tasks and prints a markdown table with the GLUE
  average (:func:`glue_table`).

One concern a file: ``tasks`` (the registry), ``readers`` (TSV folders, Hub, CSV/JSON), ``arguments``, ``run`` (the
fine-tuning run and ``main``), ``submission`` (GLUE submission files), ``results`` (the GLUE table).
"""

from .arguments import GLUE_DEFAULTS, DataTrainingArguments, ModelArguments, parse_args
from .readers import infer_task_from_columns, load_glue_files, load_glue_folder, load_glue_hub, read_glue_tsv
from .results import collect_results, glue_table, task_score
from .run import main, run_task
from .submission import write_submission
from .tasks import GLUE_METRIC_PATH, GLUE_TASKS, INDEX_COLUMN, LABEL_COLUMN, GlueTask, get_task

__all__ = [
    "GLUE_DEFAULTS",
    "GLUE_METRIC_PATH",
    "GLUE_TASKS",
    "INDEX_COLUMN",
    "LABEL_COLUMN",
    "DataTrainingArguments",
    "GlueTask",
    "ModelArguments",
    "collect_results",
    "get_task",
    "glue_table",
    "infer_task_from_columns",
    "load_glue_files",
    "load_glue_folder",
    "load_glue_hub",
    "main",
    "parse_args",
    "read_glue_tsv",
    "run_task",
    "task_score",
    "write_submission",
]
