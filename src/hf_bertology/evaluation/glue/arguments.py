"""The command's arguments: run_glue.py's ``ModelArguments`` and ``DataTrainingArguments`` with ``TrainingArguments``,
parsed by ``HfArgumentParser`` (flags, or one JSON/YAML file), and the papers' defaults (:data:`GLUE_DEFAULTS`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...hub.push import keep_token_out_of_files
from ...training.input_checks import check_counts, check_range, check_training_arguments
from ...utils import BertologyError, accelerator_defaults, argument_parser, parse_arguments
from .tasks import GLUE_TASKS, GlueTask, get_task, task_names

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
    from transformers import TrainingArguments

    # argparse defaults: any flag the user gives wins
    types = (ModelArguments, DataTrainingArguments, TrainingArguments)
    return argument_parser(types, "bertology glue", **GLUE_DEFAULTS, **accelerator_defaults())


def parse_args(argv: Sequence[str] | None = None):
    """``(model_args, data_args, training_args)`` from flags, or from one ``.json``/``.yaml`` file (run_glue.py),
    with :data:`GLUE_DEFAULTS` for every TrainingArguments value the user leaves out. With none of ``--do_train``,
    ``--do_eval``, ``--do_predict``, trains and evaluates."""
    argv = list(sys.argv[1:] if argv is None else argv)
    file_defaults = {**GLUE_DEFAULTS, **accelerator_defaults()}
    model_args, data_args, training_args = parse_arguments(_parser(), argv, file_defaults)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        training_args.do_train = training_args.do_eval = True
    check_arguments(model_args, data_args, training_args)
    return model_args, data_args, keep_token_out_of_files(training_args)


def check_arguments(model_args: ModelArguments, data_args: DataTrainingArguments, training_args) -> None:
    """Every number in range before any work (docs/bad_input.md): one BertologyError line."""
    check_training_arguments(training_args)
    check_counts(
        {
            "--max_train_samples": data_args.max_train_samples,
            "--max_eval_samples": data_args.max_eval_samples,
            "--max_predict_samples": data_args.max_predict_samples,
        }
    )
    check_range("--max_seq_length", data_args.max_seq_length, 4, hint=" ([CLS], [SEP] and a token of each sentence)")
    check_range("--preprocessing_num_workers", data_args.preprocessing_num_workers, 0)
    check_range("--layerwise_lr_decay", model_args.layerwise_lr_decay, 0, 1, hint=" (0 trains the head only)")
    for name in task_names(data_args.task_name) or ():
        check_task_arguments(get_task(name), training_args)


def check_task_arguments(task: GlueTask, training_args) -> None:
    """What a task's head refuses: label smoothing on a regression task (transformers' `LabelSmoother` would gather
    the float score as a class index: a traceback at the first step)."""
    if task.is_regression and training_args.label_smoothing_factor > 0:
        raise BertologyError(
            f"--label_smoothing_factor {training_args.label_smoothing_factor} smooths class labels, and {task.name} "
            "is a regression task (a score): fine-tune it without"
        )
