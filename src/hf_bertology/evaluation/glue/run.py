"""The fine-tuning run: one task (:func:`run_task`, run_glue.py's ``main``) or several with the GLUE table
(:func:`main`).

Follows transformers' ``examples/pytorch/text-classification/run_glue.py``: data, model and tokenizer, tokenization,
metric, Trainer, training, evaluation, prediction, ``all_results.json``. Metrics come from the local ``evaluate``
module (:data:`~.tasks.GLUE_METRIC_PATH`), so nothing needs the network unless ``--dataset_name`` asks for the Hub.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ...hub.push import push_from_training_args
from ...training.checkpoints import apply_umask
from ...training.layerwise_lr import electra_schedule, layerwise_lr_optimizer
from ...training.optimizers import OfficialOptimizers
from ...utils import BertologyError, logger, refuse_same_folder, set_verbosity
from .arguments import DataTrainingArguments, ModelArguments, check_task_arguments, parse_args
from .readers import infer_task_from_columns, load_glue_files, load_glue_folder, load_glue_hub
from .results import glue_table
from .submission import predict_submissions
from .tasks import GLUE_METRIC_PATH, GLUE_TASKS, GlueTask, get_task, task_names


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
        if not Path(name).exists():  # a misspelt folder, or a Hub id while offline
            raise BertologyError(f"{name}: no such folder, and nothing of that name on the Hub ({first})") from None
        raise BertologyError(f"no tokenizer could be loaded from {name} ({first}); pass --tokenizer_name") from None
    if len(tokenizer) <= len(tokenizer.all_special_tokens):
        raise BertologyError(f"the tokenizer of {name} has no vocabulary beyond its special tokens")
    return tokenizer


def discriminator_of_joint_run(model_args: ModelArguments) -> None:
    """A joint run's folder (ELECTRA, DeBERTa-v3, RTD on another encoder: `recipes.is_joint`; its `model_type` is our
    own, which transformers refuses) is fine-tuned through the vanilla `discriminator/` every joint run
    writes, as the papers fine-tune theirs; a joint folder without one (a Trainer `checkpoint-N`) is one error."""
    from ...recipes.networks import is_joint

    folder = model_args.model_name_or_path
    if not is_joint(folder):
        return
    part = Path(folder) / "discriminator"
    if not (part / "config.json").is_file():
        raise BertologyError(
            f"{folder} holds a joint run's two networks and no discriminator/ folder: write it with "
            f"`bertology export --part discriminator {folder} OUT` and fine-tune OUT"
        )
    logger.info(f"{folder} holds a joint run's two networks: fine-tuning its discriminator, {part}")
    for name in ("model_name_or_path", "config_name", "tokenizer_name"):
        if getattr(model_args, name) in (None, folder):
            setattr(model_args, name, None if name != "model_name_or_path" else str(part))


def run_task(model_args: ModelArguments, data_args: DataTrainingArguments, training_args) -> dict[str, float]:
    """Fine-tune and/or evaluate one task (run_glue.py's ``main``); returns the metrics written to
    ``all_results.json``."""
    import evaluate
    import transformers
    from transformers import AutoConfig, AutoModelForSequenceClassification, Trainer, set_seed

    task = get_task(data_args.task_name) if data_args.task_name else None
    if training_args.do_train:
        refuse_same_folder(model_args.model_name_or_path, training_args.output_dir, "bertology glue")
    discriminator_of_joint_run(model_args)
    if training_args.do_train:  # nor over the discriminator/ a joint run's folder led to
        refuse_same_folder(model_args.model_name_or_path, training_args.output_dir, "bertology glue")
    set_seed(training_args.seed)

    # Data ----------------------------------------------------------------------------------------------------------
    raw = _load_raw(task, data_args, model_args.cache_dir)
    if task is None:  # CSV/JSON files of a task we do not know: take its shape from the files
        task = infer_task_from_columns(raw)
        check_task_arguments(task, training_args)
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

    # Trainer (ELECTRA's layer-wise lr decay as a custom param-group builder, with its optimizer and schedule) -------
    optimizer_cls_and_kwargs = None
    if model_args.layerwise_lr_decay is not None:
        optimizer_cls_and_kwargs = layerwise_lr_optimizer(model, training_args, model_args.layerwise_lr_decay)
        electra_schedule(training_args)

    class GlueTrainer(OfficialOptimizers, Trainer):
        """The Trainer with `--optim_args` / `--lr_scheduler_kwargs` for the official optimizers (optimizers.py)."""

    # `--push_to_hub` pushes the fine-tuned folder once at the end (hub.push_from_training_args), not every checkpoint.
    push_args = copy.copy(training_args)
    training_args.push_to_hub = False
    trainer = GlueTrainer(
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
    predict_submissions(trainer, test_datasets, task, training_args.output_dir)
    if trainer.is_world_process_zero() and Path(training_args.output_dir).is_dir():
        apply_umask(training_args.output_dir)  # safetensors writes the weights 0600, whatever the umask
    if training_args.do_train and trainer.is_world_process_zero():
        push_from_training_args(training_args.output_dir, push_args)
    return all_metrics


def main(argv: list[str] | None = None) -> int:
    """``bertology glue …`` / ``examples/run_glue.py``: fine-tune, evaluate, predict; see :func:`parse_args`."""
    import transformers

    model_args, data_args, training_args = parse_args(argv)
    set_verbosity()  # our own info lines; transformers keeps its level (TrainingArguments --log_level)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    tasks = task_names(data_args.task_name)
    if tasks is None or len(tasks) == 1:
        if tasks:
            data_args.task_name = tasks[0]
        run_task(model_args, data_args, training_args)
        return 0

    # Several tasks: each in output_dir/<task>, then the GLUE table. With --data_dir (the GLUE root), tasks whose
    # folder is missing are skipped; with --dataset_name all are run. A task that fails on its data (a split
    # missing) does not stop the others: the table of those that ran is written, then the failures are reported.
    if not (data_args.data_dir or data_args.dataset_name):
        raise BertologyError("several tasks need --data_dir (the GLUE root folder) or --dataset_name")
    if data_args.data_dir and not Path(data_args.data_dir).is_dir():
        raise BertologyError(f"GLUE data folder not found: {data_args.data_dir}")
    from dataclasses import replace

    results: dict[str, dict[str, float]] = {}
    failed: dict[str, str] = {}
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
        try:
            results[name] = run_task(model_args, task_data, task_training)
        except BertologyError as error:
            failed[name] = str(error)
            logger.warning(f"{name} failed, going on with the other tasks: {error}")
    if not results and not failed:
        raise BertologyError(f"no GLUE task folder ({', '.join(t.folder for t in GLUE_TASKS.values())}) found")
    if results:
        table = glue_table(results)
        root_out.mkdir(parents=True, exist_ok=True)
        (root_out / "glue_results.md").write_text(table + "\n")
        (root_out / "glue_results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(table)
    if failed:
        done = f"; the table of {', '.join(results)} is in {root_out / 'glue_results.md'}" if results else ""
        raise BertologyError("; ".join(f"{name}: {message}" for name, message in failed.items()) + done)
    return 0
