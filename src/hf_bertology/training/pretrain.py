"""`bertology pretrain`: pretrain a recipe on a corpus with the `transformers` Trainer.

    bertology pretrain --recipe roberta-mini --train_file wiki_00 --output_dir runs/roberta-mini --max_steps 2000

This module is the run's flow and nothing else. `main` parses the arguments (`arguments.parse_args`);
`run_pretraining` takes them once through the steps, top to bottom: the recipe and the run's TrainingArguments, the
output folder (resume, refuse, finished), the corpus, tokenizer, settled recipe and examples, the model, batches and
Trainer, training, and the Hub-format folder. Each step is a function of the module of its concern (`arguments`,
`run_recipe`, `resume`, `corpora`, `batches`, `run_trainer`, `outputs`), imported from there; docs/pretraining.md
calls them one by one and docs/ARCHITECTURE.md ("Data flow") describes them.
"""

from __future__ import annotations

import sys

import datasets
import transformers
from transformers import TrainingArguments, set_seed

from ..utils import run_command, set_verbosity
from .arguments import (
    DataArguments,
    ModelArguments,
    check_sizes,
    chooses_micro_batch,
    fast_path,
    parse_args,
    training_arguments,
)
from .batch_warmup import use_batch_size_warmup
from .batches import configure_batches
from .checkpoints import run_lock
from .corpora import build_datasets, load_corpora
from .global_batch import check_process_count, probe_micro_batch, will_probe
from .low_precision import use_low_precision_layernorm
from .outputs import write_outputs
from .phases import continue_phase
from .resume import already_finished, check_output_dir, check_resume, resolve_resume
from .run_recipe import build_model, build_recipe, build_tokenizer, settle_recipe
from .run_trainer import build_trainer, log_learning, train_and_evaluate
from .scale_out import stream_per_process


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict:
    """`bertology pretrain ARGS`: parse the flags (or one JSON/YAML file) and run; returns the final metrics (also
    written to `output_dir/all_results.json`). `callbacks`: extra `TrainerCallback`s for the Trainer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, explicit = parse_args(argv)
    return run_pretraining(model_args, data_args, training_args, explicit, callbacks)


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
    probing = chooses_micro_batch(training_args, explicit)  # on CUDA, once the model is built
    training_args = training_arguments(training_args, recipe, explicit, data_args.streaming)
    check_sizes(model_args, data_args, training_args)
    fast_path(recipe, model_args, data_args, training_args, explicit)
    callbacks = [*(callbacks or []), *stream_per_process(training_args, data_args.streaming, explicit)]
    with run_lock(training_args.output_dir, training_args.process_index == 0):  # one run per folder
        # another process count is judged by what it would change (`check_process_count`), not refused outright
        resume_from = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
        check_output_dir(data_args, training_args, resume_from)
        if resume_from is not None:
            check_resume(resume_from, recipe)
            check_process_count(resume_from, training_args, recipe, data_args)
            if (finished := already_finished(resume_from, training_args)) is not None:
                return finished
        set_seed(training_args.seed)
        corpus, eval_corpus = load_corpora(data_args, training_args)
        tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, resume_from, data_args)
        recipe = settle_recipe(recipe, tokenizer, data_args, model_args)  # the run's values: later steps read them
        collator = recipe.build_collator(tokenizer)  # fails early on a tokenizer without a mask token
        model = build_model(recipe, model_args)
        if model_args.low_precision_layernorm:
            use_low_precision_layernorm(model)
        model, collator = configure_batches(recipe, model, collator, model_args, data_args, training_args.device)
        train_dataset, eval_dataset = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
        if probing and will_probe(training_args):  # the largest micro-batch that fits, before the Trainer reads it
            probe_micro_batch(model, collator, train_dataset, training_args)
        trainer, push_args = build_trainer(
            recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args, callbacks
        )
        if data_args.fixed_shape_batches:
            from .fixed_shape import use_fixed_shape

            use_fixed_shape(trainer, recipe.max_seq_length, packable=recipe.padding_free)
        if recipe.phase_config is not None and model_args.model_name_or_path:  # a later phase: the optimizer goes on
            continue_phase(trainer, model_args.model_name_or_path)
        use_batch_size_warmup(trainer, recipe, data_args)  # where the recipe or the flags ask for one
        metrics = train_and_evaluate(trainer, resume_from)
        write_outputs(trainer, recipe, data_args, metrics, push_args)
    if "eval_at_start" in metrics:  # the run's last lines: did it learn (held-out, untrained -> trained)
        log_learning(metrics["eval_at_start"], metrics)
    return metrics


if __name__ == "__main__":
    sys.exit(run_command(main))
