"""Fine-tune a checkpoint on GLUE and report its dev metrics (``bertology glue``, ``examples/run_glue.py``).

Follows transformers' ``examples/pytorch/text-classification/run_glue.py`` (flags, sections of ``main``,
``all_results.json``, submission files), adding a strict reader for the original GLUE TSV folders, the papers'
fine-tuning defaults (:data:`GLUE_DEFAULTS`), ELECTRA's layer-wise learning-rate decay (``training/layerwise_lr.py``)
and several tasks at once with the GLUE table (docs/glue.md).

One concern a file: ``tasks`` (the registry), ``readers`` (TSV folders, Hub, CSV/JSON), ``arguments``, ``run`` (the
fine-tuning run and ``main``), ``submission`` (GLUE submission files), ``results`` (the GLUE table). This module is
their public face for users (``from hf_bertology.evaluation.glue import main``); the package itself imports them
from where they are defined.
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
