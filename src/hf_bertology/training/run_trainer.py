"""The Trainer of a run: the variant's class with its callbacks (`build_trainer`), then training and evaluation
(`train_and_evaluate`)."""

from __future__ import annotations

import copy
import importlib
import math
import os

from transformers import TrainingArguments

from ..recipes.recipe import Recipe
from ..utils import logger
from .attention import layout_keys_read
from .callbacks import SaveOnInterrupt, callbacks_for


def trainer_class(name: str) -> type:
    """The Trainer class a variant names (`module.Class` under `hf_bertology.training`)."""
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), attribute)


def warn_if_fsdp_ignored(trainer) -> None:
    """FSDP asked for (`--fsdp`, or accelerate's FSDP config) but not in use: say so instead of running DDP silently.

    torch's FSDP2 runs on CPUs over gloo (tests/test_multiprocess.py), but accelerate switches to FSDP only on
    GPU-type process groups (CUDA, XPU, NPU, ...), never on a CPU one, so there the Trainer wraps the model in DDP.
    """
    asked = bool(trainer.args.fsdp) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if asked and not trainer.is_fsdp_enabled:
        logger.warning(
            "FSDP was asked for, but accelerate shards models only on GPUs: training with DDP (every process holds "
            "the whole model)"
        )


def build_trainer(
    recipe: Recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args: TrainingArguments,
    callbacks: list | None = None,
) -> tuple:  # fmt: skip
    """The variant's Trainer with its callbacks (component losses, ...) and `callbacks`; returns it with the
    TrainingArguments for the final push: `--push_to_hub` pushes the finished Hub-format folder once
    (`write_outputs`), so the Trainer's own pushes (every checkpoint, its generic model card) are turned off."""
    push_args, training_args.push_to_hub = copy.copy(training_args), False
    trainer = trainer_class(recipe.variant.trainer_class)(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=[*callbacks_for(model, recipe.networks), SaveOnInterrupt(), *(callbacks or [])],
    )
    warn_if_fsdp_ignored(trainer)
    send_only_what_attention_reads(trainer)
    return trainer, push_args


def send_only_what_attention_reads(trainer) -> None:
    """A padding-free collator makes (and the Trainer copies to the device) only the re-padded layout's keys that the
    run's attention reads (`attention.layout_keys_read`): none on CUDA's varlen kernels, where they would be made
    and copied every step for nothing."""
    collator, args = trainer.data_collator, trainer.args
    if "layout_keys" in getattr(collator, "__dict__", {}):
        collator.layout_keys = layout_keys_read(trainer.model, args.device.type, bool(args.bf16 or args.fp16))


def train_and_evaluate(trainer, resume_from: str | None = None) -> dict:
    """Train (unless `--do_train false`), then evaluate with `--do_eval` (perplexity from the MLM loss); the metrics.

    Training stopped by Ctrl-C or SIGTERM (`SaveOnInterrupt`) has saved a checkpoint; it raises KeyboardInterrupt
    then, before any evaluation or output folder, so that a stopped run is never taken for a finished one."""
    args = trainer.args
    metrics: dict = {}
    if args.do_train or not args.do_eval:
        stop = next((c for c in trainer.callback_handler.callbacks if isinstance(c, SaveOnInterrupt)), None)
        try:
            result = trainer.train(resume_from_checkpoint=resume_from)
        finally:
            if stop is not None:  # a training that raised never reached on_train_end
                stop.restore()
        if stop is not None and stop.interrupted is not None:
            logger.warning(
                "%s: stopped after step %d with a checkpoint in %s; go on with --resume_from_checkpoint last",
                stop.signal_name,
                stop.interrupted,
                args.output_dir,
            )
            raise KeyboardInterrupt
        metrics.update(result.metrics)
    if args.do_eval and trainer.eval_dataset is not None:
        eval_metrics = trainer.evaluate()
        loss = eval_metrics.get("eval_mlm_loss", eval_metrics.get("eval_loss"))
        if loss is not None:
            eval_metrics["perplexity"] = math.exp(min(loss, 50))
        metrics.update(eval_metrics)
        before = evaluation_at_start(trainer.state.log_history)
        if before:
            metrics["eval_at_start"] = before  # `log_learning` prints it beside the trained values
    metrics["tokens_seen"] = int(trainer.state.num_input_tokens_seen or 0)
    metrics["global_step"] = trainer.state.global_step  # whose final folder this is (`resume.already_finished`)
    return metrics


def evaluation_at_start(log_history: list[dict]) -> dict:
    """The metrics of the evaluation before the first step (`--eval_on_start`), else {}."""
    return next((log for log in log_history if log.get("step") == 0 and "eval_loss" in log), {})


# An accuracy beside what a constant guess scores: replaced-token detection's "always original" is right on every
# token the generator left as it was, 0.85 and more once the generator learns, so 0.86 alone says little.
BASE_RATES = {"rtd_accuracy": ("replaced_fraction", "always 'original'")}


def log_learning(before: dict, after: dict) -> None:
    """One line per held-out loss, accuracy and AUC, untrained against trained: whether the run learned, at a glance;
    an accuracy that a constant guess nearly matches has that guess's score beside it (`BASE_RATES`). The losses
    come first and the AUC and the accuracy beside its guess last, so those are a run's last lines (`bertology pretrain`
    prints this block last of all)."""
    keys = [k for k in after if k.startswith("eval_") and k.endswith(("accuracy", "_auc", "_loss")) and k in before]
    last = [f"eval_{name}" for name in BASE_RATES]  # after the AUC: the accuracy beside its guess ends the block
    for key in sorted(keys, key=lambda k: (not k.endswith("_loss"), k.endswith("_auc") or k in last, k in last, k)):
        name = key[len("eval_") :]
        line = f"held-out {name:<24s} untrained {before[key]:8.4f} -> trained {after[key]:8.4f}"
        fraction, guess = BASE_RATES.get(name, (None, None))
        if f"eval_{fraction}" in before and f"eval_{fraction}" in after:
            rates = (1 - before[f"eval_{fraction}"], 1 - after[f"eval_{fraction}"])
            line += f"  (a constant guess, {guess}: {rates[0]:.4f} -> {rates[1]:.4f})"
        logger.info(line)
