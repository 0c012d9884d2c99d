"""`bertology pretrain`'s arguments: the dataclasses, the command line (flags or one JSON/YAML file), the defaults
under the user's values (the recipe's, ours, the device's and a launcher's) and the checks of every size, all
before any work."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from ..hub.push import keep_token_out_of_files
from ..recipes.recipe import Recipe
from ..recipes.registry import list_recipes
from ..utils import (
    BertologyError,
    accelerator_defaults,
    argument_file,
    argument_parser,
    logger,
    parse_arguments,
    read_argument_file,
)
from .attention import PACKED_IMPLEMENTATIONS
from .global_batch import BATCH_FLAGS, DEFAULT_MICRO_BATCH, BatchPlan, plan_batch, will_probe
from .input_checks import MIN_SEQ_LENGTH, check_counts, check_range, check_training_arguments
from .optimizers import parse_optim_args


@dataclass
class ModelArguments:
    recipe: str | None = field(
        default=None, metadata={"help": f"Preset to train (sizes, objective, defaults): {', '.join(list_recipes())}"}
    )
    backbone: str | None = field(
        default=None,
        metadata={
            "help": "Run the recipe's objective on another encoder: bert, roberta, albert, electra, deberta, "
            "modernbert (same as --recipe NAME@BACKBONE). Default: the recipe's own."
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Continue pretraining from this checkpoint (a folder we wrote, or a vanilla one)."},
    )
    generator_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Two-network recipes (ELECTRA, DeBERTa-v3, an RTD objective on another encoder): the released "
            "generator, with --model_name_or_path the released discriminator; the joint model starts from both."
        },
    )
    config_name: str | None = field(default=None, metadata={"help": "Config (folder or json) to start from scratch."})
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "Tokenizer to use; by default the family's tokenizer is trained on the corpus."},
    )
    vocab_size: int | None = field(default=None, metadata={"help": "Size of the tokenizer trained on the corpus."})
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Comma-separated config overrides, e.g. `num_hidden_layers=6,mlm_probability=0.2`."},
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "Attention kernel: `flash_attention_2` (installed, CUDA), `sdpa_packed` (SDPA that also takes "
            "padding-free batches), `sdpa`, `eager` (these two: padded batches). Default: padding-free runs use "
            "flash_attention_2 when installed, else sdpa_packed; padded runs keep the model's own (sdpa where "
            "transformers has it)."
        },
    )
    tokenizer_train_samples: int | None = field(
        default=None, metadata={"help": "Train the tokenizer on at most this many documents (default: all)."}
    )
    low_precision_layernorm: bool = field(
        default=False,
        metadata={
            "help": "Under --bf16 / --fp16, LayerNorm runs in that dtype, so the residual stream stays in it "
            "(MosaicBERT's low-precision LayerNorm); off until measured faster on a GPU (docs/speed.md)."
        },
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset, e.g. `wikitext`. Without it and --train_file: the embedded WikiText-2 (raw), "
            "offline (its test split for training, its validation split for --do_eval)."
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "e.g. `wikitext-2-raw-v1`."})
    train_file: list[str] | None = field(
        default=None,
        metadata={"help": "Text, WikiExtractor or .jsonl files; globs and directories work.", "nargs": "+"},
    )
    validation_file: list[str] | None = field(
        default=None, metadata={"help": "Held-out files for --do_eval.", "nargs": "+"}
    )
    validation_split_percentage: int = field(
        default=5, metadata={"help": "Without --validation_file, hold out this share of examples for --do_eval."}
    )
    text_column: str = field(default="text", metadata={"help": "Text field of .jsonl files and Hub datasets."})
    doc_separator: str = field(
        default="blank_line",
        metadata={"help": "Plain text: a document ends at a `blank_line`, or each `line` is one."},
    )
    max_seq_length: int | None = field(default=None, metadata={"help": "Tokens per example (default: the recipe's)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only this many evaluation examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for `datasets.map`."})
    streaming: bool = field(
        default=False, metadata={"help": "Stream the corpus (larger than memory); needs --max_steps."}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Prepare the tokenizer and examples again."})
    prepared_data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the prepared data (a trained tokenizer, the examples), keyed by corpus, recipe and tokenizer, "
            "is kept for later runs and every process (default: HF_DATASETS_CACHE/hf_bertology/prepared; on several "
            "nodes, a folder they all see)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a new run in an --output_dir that holds one (its checkpoints are removed first; "
            "run_mlm.py's flag). Without it such a folder is refused, unless resuming it."
        },
    )
    padding_free: bool | None = field(
        default=None,
        metadata={
            "help": "Flatten every batch into one row of real tokens (no compute on padding; attention stays inside "
            "each example). Default: on for every recipe whose attention allows it (not XLNet, DeBERTa-v3), "
            "except with --streaming or an --attn_implementation that reads padded batches only."
        },
    )
    fixed_shape_batches: bool | None = field(
        default=None,
        metadata={
            "help": "Padding-free steps of one fixed shape: a token budget of about per_device_train_batch_size "
            "examples, filled by best-fit packing, so a compiled step never recompiles and can be a CUDA graph "
            "(docs/speed.md). Needs padding-free batches and a map-style dataset; DeBERTa-v3 and XLNet (not "
            "packable) get static padded steps instead (max_seq_length wide, fixed rows and target count). "
            "Default: on CUDA with "
            "compilation, on (with --torch_compile_mode reduce-overhead) for the recipes a GPU measured no slower "
            "that way (docs/speed.md, 'The CUDA defaults'); off elsewhere."
        },
    )
    batch_size_warmup_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Grow each step's batch from --batch_size_warmup_min_size examples to the full batch over this "
            "many tokens (all processes), as ModernBERT's official runs (50B base, 10B large). Default: the "
            "recipe's (modernbert-base, -large); 0: none. Needs a map-style training set (not --streaming)."
        },
    )
    batch_size_warmup_min_size: int | None = field(
        default=None,
        metadata={"help": "The warmup's first batch, in examples per micro-batch (default: the recipe's)."},
    )


@dataclass
class PretrainingArguments(TrainingArguments):
    """TrainingArguments with the recipe's batch as a global one (docs/pretraining.md, "Several processes")."""

    global_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Sequences per optimizer step over all processes, held as --per_device_train_batch_size "
            "(the micro-batch) x processes x --gradient_accumulation_steps (derived unless both are given). "
            "Default: the recipe's (the paper's batch); 0: no global batch, --per_device_train_batch_size (or the "
            "recipe's batch) on each process, as before."
        },
    )


# TrainingArguments defaults that suit pretraining (a flag or the recipe still wins).
PRETRAIN_DEFAULTS = {
    "remove_unused_columns": False,  # collators read `word_starts` & co., which the model's forward does not take
    "prediction_loss_only": True,
    "include_num_input_tokens_seen": "non_padding",
    # The stock filter tests every micro-batch's loss for NaN/inf on the host (a device sync each); a NaN loss should
    # show in the logs anyway, as our component losses show it.
    "logging_nan_inf_filter": False,
    "logging_steps": 50,
    "save_total_limit": 2,
    "do_train": True,  # `--do_eval` adds evaluation to training (`--do_train false --do_eval` only evaluates)
}


def device_defaults(explicit: set[str], streaming: bool = False) -> dict:
    """On a CUDA device: the model compiled (`torch_compile`; a compilation that fails goes on eager in one line,
    `training.compilation`), bf16 mixed precision (where supported), TF32 matmuls and fused AdamW, the settings
    every fast BERT pretraining uses (NVIDIA, MosaicBERT, Cramming), batches copied to the device without blocking
    (from pinned memory, the Trainer's default: a blocking copy waits for every kernel queued before it), and
    collated in DataLoader workers (up to 4, half the cores; not when streaming, where the masks of examples
    without ids come from the workers' own RNGs, which no checkpoint saves), so that the host only launches
    kernels (docs/speed.md §4: one worker makes 3-15M tokens/s, a GPU at 45% MFU eats under 1M; 4 workers with
    torch's prefetch of 2 leave room for workers 10x slower on a busy host). A flag still wins (`--torch_compile
    false` trains eager), and `--use_cpu` keeps the CPU's, with no pinned memory (`accelerator_defaults`)."""
    import torch

    if "use_cpu" in explicit:
        return {"dataloader_pin_memory": False}
    if not torch.cuda.is_available():
        return accelerator_defaults()
    defaults = {"tf32": True, "optim": "adamw_torch_fused", "accelerator_config": {"non_blocking": True}}
    workers = min(4, (os.cpu_count() or 1) // 2)
    if workers and not streaming:
        defaults["dataloader_num_workers"] = workers
    if torch.cuda.is_bf16_supported() and "fp16" not in explicit:
        defaults["bf16"] = True
    defaults["torch_compile"] = True  # the slots' BERT-base: 1.61x the eager step (docs/speed.md)
    return defaults


# Variants whose fixed-shape steps with CUDA graphs a GPU measured no slower than the dynamic compiled step: there
# they are the CUDA default under compilation (docs/speed.md, "The CUDA defaults", says what the others need). A
# packable variant's are token-budget steps; an unpackable one's (DeBERTa-v3, XLNet) static padded steps.
CUDA_GRAPH_VARIANTS = frozenset({"bert"})


def fast_path(
    recipe: Recipe, model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
    explicit: set[str],
) -> None:  # fmt: skip
    """Fixed-shape steps and CUDA graphs (`--fixed_shape_batches`, `--torch_compile_mode reduce-overhead`) by default
    where they apply and were measured no slower: a compiled run on CUDA (not `--use_cpu`) of a recipe of
    `CUDA_GRAPH_VARIANTS` on its own encoder, not `--streaming`; for a packable recipe, padding-free batches (not
    `--padding_free false`, nor an attention that reads padded batches only), for an unpackable one static padded
    batches. A flag always wins. Sets `data_args.fixed_shape_batches` (False where it stays off) and the compile
    mode."""
    if data_args.fixed_shape_batches is not None:
        return
    attention = model_args.attn_implementation
    packs = data_args.padding_free is not False and (attention is None or attention in PACKED_IMPLEMENTATIONS)
    data_args.fixed_shape_batches = bool(
        torch.cuda.is_available()
        and not training_args.use_cpu
        and training_args.torch_compile
        and recipe.variant_name in CUDA_GRAPH_VARIANTS
        and recipe.backbone is None
        and not data_args.streaming
        and (packs or not recipe.padding_free)  # an unpackable recipe's static padded steps take any attention
    )
    if data_args.fixed_shape_batches and "torch_compile_mode" not in explicit:
        training_args.torch_compile_mode = "reduce-overhead"  # static shapes: the step replays as a CUDA graph


def explicit_keys(argv: list[str]) -> set[str]:
    """Argument names the user set (flags, or keys of a JSON/YAML file), so recipe defaults do not override them."""
    path = argument_file(argv)
    if path:
        return set(read_argument_file(path))
    return {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}


def parse_args(argv: list[str]) -> tuple[ModelArguments, DataArguments, TrainingArguments, set[str]]:
    """Flags (or one JSON/YAML file) -> the three argument dataclasses and the names the user set.

    Under a launcher on a CPU machine, `use_cpu`/`ddp_backend` default to one gloo job already here: the
    TrainingArguments set up the process group as they are built (see `launcher_defaults`).
    """
    explicit = explicit_keys(argv)
    launch = launcher_defaults(explicit)
    # our defaults in `--help` (the values are applied, under the recipe's, by `training_arguments`); not the
    # strings, which argparse would convert with the flag's type (`include_num_input_tokens_seen` parses bools)
    shown = {key: value for key, value in PRETRAIN_DEFAULTS.items() if not isinstance(value, str)}
    parser = argument_parser(
        (ModelArguments, DataArguments, PretrainingArguments), "bertology pretrain", **shown, **launch
    )
    model_args, data_args, training_args = parse_arguments(parser, argv, file_defaults=launch)
    return model_args, data_args, training_args, explicit


def apply_defaults(training_args: TrainingArguments, defaults: dict, explicit: set[str]) -> TrainingArguments:
    """TrainingArguments with `defaults` filled in wherever the user gave no value."""
    updates = {key: value for key, value in defaults.items() if key not in explicit}
    if not updates and isinstance(training_args, PretrainingArguments):
        return training_args
    values = {f: getattr(training_args, f) for f in training_args.__dataclass_fields__ if not f.startswith("_")}
    values = {key: value for key, value in values.items() if key in explicit or key == "output_dir"}
    rebuilt = PretrainingArguments(**{**values, **updates})
    return rebuilt


def launched_world_size() -> int:
    """The number of processes a launcher (`torchrun`, `accelerate launch`) started, from its `WORLD_SIZE`."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def has_accelerator() -> bool:
    """Whether torch sees a GPU or another accelerator (CUDA, XPU, MPS, ...) that the Trainer would run on."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def launcher_defaults(explicit: set[str]) -> dict:
    """Under a multi-process launcher on a machine without an accelerator: one CPU job over gloo.

    Without `use_cpu`, accelerate's `PartialState` looks for a GPU backend, finds none and reports
    `DistributedType.NO` on every rank, so each rank would train the whole corpus alone and write the same folder.
    A user who sets `--use_cpu` decides alone (`false` is then stopped by `check_world_size`).
    """
    if "use_cpu" in explicit or launched_world_size() <= 1 or has_accelerator():
        return {}
    return {key: value for key, value in {"use_cpu": True, "ddp_backend": "gloo"}.items() if key not in explicit}


def check_world_size(training_args: TrainingArguments) -> None:
    """A launcher's processes must form one job: stop before training if the Trainer sees only itself."""
    launched = launched_world_size()
    if launched > 1 and training_args.world_size != launched:
        raise BertologyError(
            f"the launcher started {launched} processes but each would train alone (world size "
            f"{training_args.world_size}, use_cpu={training_args.use_cpu}, ddp_backend={training_args.ddp_backend}); "
            "on CPUs pass --use_cpu true --ddp_backend gloo"
        )


def fit_warmup(training_args: TrainingArguments) -> TrainingArguments:
    """Keep warmup shorter than a short run: transformers' polynomial schedule divides by `max_steps - warmup`."""
    steps = training_args.max_steps
    if steps <= 0 or training_args.lr_scheduler_type != "polynomial":
        return training_args
    warmup = training_args.warmup_steps
    warmup_steps = math.ceil(warmup * steps) if 0 < warmup < 1 else int(warmup)
    if warmup_steps >= steps:
        logger.warning(
            "warmup (%d steps) reaches max_steps (%d): warming up for %d steps", warmup_steps, steps, steps - 1
        )
        training_args.warmup_steps = steps - 1
    return training_args


def check_sizes(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Sizes and counts as one line each, before any work: torch, datasets and the configs would refuse them deep
    inside with a traceback (a batch of 0), or read 0 as "the default" (`--vocab_size 0`)."""
    check_training_arguments(training_args)
    counts = {
        "--max_train_samples": data_args.max_train_samples,
        "--max_eval_samples": data_args.max_eval_samples,
        "--vocab_size": model_args.vocab_size,
        "--tokenizer_train_samples": model_args.tokenizer_train_samples,
        "--batch_size_warmup_min_size": data_args.batch_size_warmup_min_size,
    }
    check_counts(counts)
    check_range("--batch_size_warmup_tokens", data_args.batch_size_warmup_tokens, 0)  # 0: no warmup
    check_range("--preprocessing_num_workers", data_args.preprocessing_num_workers, 0)  # 0: the main process
    if data_args.max_seq_length is not None and data_args.max_seq_length < MIN_SEQ_LENGTH:
        raise BertologyError(f"--max_seq_length must be at least {MIN_SEQ_LENGTH}, got {data_args.max_seq_length}")
    holding_out = training_args.do_eval and not data_args.validation_file
    if holding_out and not 0 < data_args.validation_split_percentage < 100:
        percentage = data_args.validation_split_percentage
        raise BertologyError(f"--validation_split_percentage must be between 0 and 100 (exclusive), got {percentage}")


# A recipe's free-form settings belong to its choice: a user who picks another one does not get them.
SETTINGS_OF_CHOICE = {"optim": "optim_args", "lr_scheduler_type": "lr_scheduler_kwargs"}


def recipe_training(recipe: Recipe, explicit: set[str]) -> dict:
    """The recipe's TrainingArguments defaults, without its `optim_args` where the user chose the `--optim` and
    without its `lr_scheduler_kwargs` where the user chose the `--lr_scheduler_type` (unless set as well)."""
    dropped = {arguments for choice, arguments in SETTINGS_OF_CHOICE.items() if choice in explicit}
    return {key: value for key, value in recipe.training_defaults.items() if key not in dropped}


def merge_recipe_settings(training_args: TrainingArguments, defaults: dict, explicit: set[str]) -> None:
    """A user's `--optim_args` and `--lr_scheduler_kwargs` go over the recipe's key by key, where the recipe's
    choice stands (`recipe_training`): `--optim_args exclude_from_weight_decay=none` on bert-tiny keeps its
    `bias_correction=False` (replaced whole, any other key swapped the official optimizer for torch's AdamW)."""
    if "optim_args" in explicit and defaults.get("optim_args"):
        merged = {**parse_optim_args(defaults["optim_args"]), **parse_optim_args(training_args.optim_args)}
        training_args.optim_args = ",".join(f"{key}={value}" for key, value in merged.items())
    recipe_kwargs, kwargs = defaults.get("lr_scheduler_kwargs"), training_args.lr_scheduler_kwargs
    if "lr_scheduler_kwargs" in explicit and isinstance(recipe_kwargs, dict) and isinstance(kwargs, dict):
        training_args.lr_scheduler_kwargs = {**recipe_kwargs, **kwargs}  # not a list: refused by flag_checks


def training_arguments(
    training_args: TrainingArguments, recipe: Recipe, explicit: set[str], streaming: bool = False
) -> TrainingArguments:
    """The run's TrainingArguments: the user's values, then the recipe's and our pretraining defaults (and, under a
    launcher on CPUs, one gloo job; the user's `--optim_args`/`--lr_scheduler_kwargs` over the recipe's, key by key),
    with warmup fitted to short runs; stops if a launcher's ranks would not form one job. `streaming`: the corpus is
    streamed (`--streaming`)."""
    defaults = {
        **PRETRAIN_DEFAULTS,
        **device_defaults(explicit, streaming),
        **recipe_training(recipe, explicit),
        **launcher_defaults(explicit),
    }
    learning_rate = training_args.learning_rate if "learning_rate" in explicit else defaults.get("learning_rate")
    if learning_rate == 0:  # nothing moves whatever the schedule; polynomial decay (SpanBERT) and StableAdamW's
        # decoupled decay (ModernBERT) divide by the peak and refuse 0: the same no-op, constant and without decay
        defaults.update(lr_scheduler_type="constant", lr_scheduler_kwargs={}, weight_decay=0.0)
        explicit = explicit - {"lr_scheduler_type", "lr_scheduler_kwargs", "weight_decay"}
    plan = global_batch_plan(training_args, defaults, explicit)
    defaults.update(
        per_device_train_batch_size=plan.micro,
        gradient_accumulation_steps=plan.accumulation,
        global_batch_size=plan.global_batch,
    )
    probing = chooses_micro_batch(training_args, explicit)
    explicit = explicit - set(BATCH_FLAGS)  # the plan holds the user's values
    training_args = apply_defaults(training_args, defaults, explicit)
    merge_recipe_settings(training_args, defaults, explicit)
    training_args = keep_token_out_of_files(fit_warmup(training_args))
    check_world_size(training_args)
    if training_args.process_index == 0 and not (probing and will_probe(training_args)):
        logger.info("%s", plan.line())
    return training_args


def chooses_micro_batch(training_args: TrainingArguments, explicit: set[str]) -> bool:
    """The user's arguments (`explicit`: the names set) leave the micro-batch to the run: a global batch held (not
    --global_batch_size 0), neither --per_device_train_batch_size nor --gradient_accumulation_steps given. On CUDA
    the run then probes for the largest that fits (`global_batch.will_probe`)."""
    per_device = "global_batch_size" in explicit and not getattr(training_args, "global_batch_size", None)
    return not per_device and not {"per_device_train_batch_size", "gradient_accumulation_steps"} & explicit


def global_batch_plan(training_args: TrainingArguments, defaults: dict, explicit: set[str]) -> BatchPlan:
    """The run's split of its global batch (`global_batch.plan_batch`) over the processes the launcher started:
    the user's --global_batch_size or the recipe's, the user's micro-batch and accumulation where given."""
    recipe_batch = defaults.get("global_batch_size") or 0
    wanted = getattr(training_args, "global_batch_size", None) if "global_batch_size" in explicit else None
    wanted = recipe_batch if wanted is None else wanted
    recipe_micro = defaults.get("per_device_train_batch_size", DEFAULT_MICRO_BATCH)
    if wanted == 0 and recipe_batch:  # per device, as a recipe's batch meant before it was global
        recipe_micro = recipe_batch
    given = {key: getattr(training_args, key) if key in explicit else None for key in BATCH_FLAGS[:2]}
    return plan_batch(wanted, launched_world_size(), given["per_device_train_batch_size"],
                      given["gradient_accumulation_steps"], recipe_micro)  # fmt: skip
