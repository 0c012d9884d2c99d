"""`bertology pretrain`: pretrain a recipe on a corpus with the `transformers` Trainer.

    bertology pretrain --recipe roberta-mini --train_file wiki_00 --output_dir runs/roberta-mini --max_steps 2000

Flags follow transformers' `run_mlm.py` (`--model_name_or_path`, `--config_name`, `--tokenizer_name`,
`--dataset_name`, `--train_file`, `--max_seq_length`, ...) plus every `TrainingArguments` flag; a single JSON or
YAML file holding the same keys works too. The recipe's training settings (lr, betas, warmup, ...) apply wherever a
flag does not set them. The output folder is Hub format (see `hf_bertology.hub`).

Steps, in order, each a function that `run_pretraining` (and so `main`, the command line and `bertology compare`)
calls, all importable from this module (`use_fixed_shape`: from `training.fixed_shape`); each takes what the steps
before it returned:

    model_args, data_args, training_args, explicit = parse_args(argv)
    recipe = build_recipe(model_args)                                   # the preset, or the checkpoint's own
    training_args = training_arguments(training_args, recipe, explicit)  # the user's, then the recipe's defaults
    set_seed(training_args.seed)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, resume_from=None)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)     # the run's values, settled once
    collator = recipe.build_collator(tokenizer)
    model = build_model(recipe, model_args)
    model, collator = configure_batches(recipe, model, collator, model_args, data_args)
    train_dataset, eval_dataset = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    trainer, push_args = build_trainer(recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args)
    if data_args.fixed_shape_batches:  # token-budget steps of one shape (training.fixed_shape.use_fixed_shape)
        use_fixed_shape(trainer, recipe.max_seq_length)
    if recipe.phase_config is not None and model_args.model_name_or_path:  # a later phase (training.phases)
        continue_phase(trainer, model_args.model_name_or_path)
    use_batch_size_warmup(trainer, recipe, data_args)  # the batch grows (training.batch_warmup)
    metrics = train_and_evaluate(trainer)
    write_outputs(trainer, recipe, data_args, metrics, push_args)  # Hub-format folder, card, all_results.json, push

Run values are settled once: `settle_recipe` returns a new `Recipe` (the one given is not changed) whose vocabulary
and special ids are the tokenizer's and whose `max_seq_length` (`--max_seq_length`, else the recipe's) is also in its
config, with the prediction caps and XLNet's memory sized by it; the steps after it read the length from that
recipe (`recipe.max_seq_length`) and write none of these values again (the model built from it shares its config,
on which `configure_batches` sets only the attention kernel). No other step changes a recipe: `build_recipe` makes
one, and `training_arguments` returns new TrainingArguments.

The steps live by concern: `arguments` (dataclasses, command line, defaults, size checks), `run_recipe` (recipe,
tokenizer, settled values, model), `corpora` (corpus -> examples), `batches` (padding-free or padded, attention
kernel), `run_trainer` (the Trainer, training, evaluation), `resume` (the output folder: resume, refuse, finished)
and `outputs` (the Hub-format folder); this module runs them in order.
"""

from __future__ import annotations

import sys

import datasets
import transformers
from transformers import TrainingArguments, set_seed

from ..recipes import Recipe, parse_overrides
from ..utils import run_command, set_verbosity
from .arguments import (
    PRETRAIN_DEFAULTS,
    DataArguments,
    ModelArguments,
    apply_defaults,
    check_sizes,
    check_world_size,
    device_defaults,
    explicit_keys,
    fit_warmup,
    has_accelerator,
    launched_world_size,
    launcher_defaults,
    parse_args,
    training_arguments,
)
from .batch_warmup import use_batch_size_warmup
from .batches import configure_batches
from .checkpoints import run_lock
from .corpora import build_datasets, describe_corpus, load_corpora
from .outputs import write_outputs
from .phases import continue_phase
from .resume import RESUME_LAST, already_finished, check_output_dir, check_resume, resolve_resume
from .run_recipe import (
    NO_POSITION_TABLE,
    TOKENIZER_FILES,
    build_model,
    build_recipe,
    build_tokenizer,
    check_family,
    check_lengths,
    checkpoint_backbone,
    checkpoint_variant,
    load_tokenizer,
    max_positions,
    settle_recipe,
)
from .run_trainer import (
    build_trainer,
    evaluation_at_start,
    log_learning,
    train_and_evaluate,
    trainer_class,
    warn_if_fsdp_ignored,
)
from .scale_out import stream_per_process

__all__ = [
    "NO_POSITION_TABLE",
    "PRETRAIN_DEFAULTS",
    "RESUME_LAST",
    "TOKENIZER_FILES",
    "DataArguments",
    "ModelArguments",
    "already_finished",
    "apply_defaults",
    "build_datasets",
    "build_model",
    "build_recipe",
    "build_tokenizer",
    "build_trainer",
    "check_family",
    "check_lengths",
    "check_output_dir",
    "check_resume",
    "check_sizes",
    "check_world_size",
    "checkpoint_backbone",
    "checkpoint_variant",
    "configure_batches",
    "continue_phase",
    "describe_corpus",
    "device_defaults",
    "evaluation_at_start",
    "explicit_keys",
    "fit_warmup",
    "has_accelerator",
    "launched_world_size",
    "launcher_defaults",
    "load_corpora",
    "load_tokenizer",
    "log_learning",
    "main",
    "max_positions",
    "parse_args",
    "parse_overrides",
    "resolve_resume",
    "run_pretraining",
    "set_seed",
    "settle_recipe",
    "train_and_evaluate",
    "train_in_folder",
    "trainer_class",
    "training_arguments",
    "use_batch_size_warmup",
    "warn_if_fsdp_ignored",
    "write_outputs",
]


def run_pretraining(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    explicit: set[str] = frozenset(),
    callbacks: list | None = None,
) -> dict:
    """Pretrain as `bertology pretrain` does, from the three argument dataclasses; returns the final metrics.

    `explicit`: the TrainingArguments the user set (those the recipe's defaults must not replace); `callbacks`:
    extra `TrainerCallback`s (e.g. `bertology compare`'s compute-budget stop).
    """
    set_verbosity()
    transformers.utils.logging.set_verbosity_warning()
    datasets.utils.logging.set_verbosity_warning()

    recipe = build_recipe(model_args)
    training_args = training_arguments(training_args, recipe, explicit, data_args.streaming)
    check_sizes(model_args, data_args, training_args)
    callbacks = [*(callbacks or []), *stream_per_process(training_args, data_args.streaming, explicit)]
    with run_lock(training_args.output_dir, training_args.process_index == 0):  # one run per folder
        return train_in_folder(model_args, data_args, training_args, recipe, callbacks)


def train_in_folder(model_args, data_args, training_args, recipe: Recipe, callbacks: list | None = None) -> dict:
    """`run_pretraining` once the output folder is this run's (locked): resume or start, train, write."""
    resume_from = resolve_resume(
        training_args.resume_from_checkpoint, training_args.output_dir, training_args.world_size
    )
    check_output_dir(data_args, training_args, resume_from)
    if resume_from is not None:
        check_resume(resume_from, recipe)
        if (finished := already_finished(resume_from, training_args)) is not None:
            return finished
    set_seed(training_args.seed)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, resume_from)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)  # the run's values: later steps read them
    collator = recipe.build_collator(tokenizer)  # fails early on a tokenizer without a mask token
    model = build_model(recipe, model_args)
    model, collator = configure_batches(recipe, model, collator, model_args, data_args)
    train_dataset, eval_dataset = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    trainer, push_args = build_trainer(
        recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args, callbacks
    )
    if data_args.fixed_shape_batches:
        from .fixed_shape import use_fixed_shape

        use_fixed_shape(trainer, recipe.max_seq_length)
    if recipe.phase_config is not None and model_args.model_name_or_path:  # a later phase: the optimizer goes on
        continue_phase(trainer, model_args.model_name_or_path)
    use_batch_size_warmup(trainer, recipe, data_args)  # where the recipe or the flags ask for one
    metrics = train_and_evaluate(trainer, resume_from)
    write_outputs(trainer, recipe, data_args, metrics, push_args)
    return metrics


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict:
    """`bertology pretrain ARGS`: parse the flags (or one JSON/YAML file) and run; returns the final metrics (also
    written to `output_dir/all_results.json`). `callbacks`: extra `TrainerCallback`s for the Trainer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, explicit = parse_args(argv)
    return run_pretraining(model_args, data_args, training_args, explicit, callbacks)


if __name__ == "__main__":
    sys.exit(run_command(main))
