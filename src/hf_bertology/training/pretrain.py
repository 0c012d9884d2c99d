"""`bertology pretrain`: pretrain a recipe on a corpus with the `transformers` Trainer.

    bertology pretrain --recipe roberta-mini --train_file wiki_00 --output_dir runs/roberta-mini --max_steps 2000

Flags follow transformers' `run_mlm.py` (`--model_name_or_path`, `--config_name`, `--tokenizer_name`,
`--dataset_name`, `--train_file`, `--max_seq_length`, ...) plus every `TrainingArguments` flag; a single JSON or
YAML file holding the same keys works too. The recipe's training settings (lr, betas, warmup, ...) apply wherever a
flag does not set them. The output folder is Hub format (see `hf_bertology.hub`).

Steps, in order, each a function of this module that `run_pretraining` (and so `main`, the command line and
`bertology compare`) calls: `parse_args` -> `build_recipe` -> `training_arguments` -> `load_corpora` ->
`build_tokenizer` (loaded, or trained on the corpus) -> `fit_to_tokenizer` -> `set_lengths` -> collator ->
`build_model` -> `configure_batches` (padding-free or padded, the attention kernel) -> `build_datasets` (the
recipe's input format) -> `build_trainer` -> `train_and_evaluate` -> `write_outputs` (Hub-format folder, model
card, `all_results.json`, push).
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from transformers import AutoTokenizer, TrainingArguments, set_seed

from ..data import build_pretraining_dataset, default_corpus, load_corpus, tokenize_corpus
from ..export import write_part_folders
from ..hub import keep_token_out_of_files, push_from_training_args, save_folder, write_model_card
from ..recipes import (
    BACKBONES,
    SIZE_FIELDS,
    VARIANTS,
    Recipe,
    backbone_of_model_class,
    check_override_keys,
    get_recipe,
    list_recipes,
    parse_overrides,
)
from ..utils import (
    BertologyError,
    accelerator_defaults,
    argument_file,
    argument_parser,
    logger,
    parse_arguments,
    read_argument_file,
    run_command,
    set_verbosity,
)
from .attention import configure_attention
from .callbacks import SaveOnInterrupt, callbacks_for
from .checkpoints import apply_umask, check_checkpoint, finished_step, list_checkpoints, newest_complete, run_lock
from .input_checks import MIN_SEQ_LENGTH, check_config, check_counts, check_range, check_training_arguments
from .scale_out import stream_per_process


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
    overwrite_cache: bool = field(default=False, metadata={"help": "Recompute the cached datasets."})
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
    fixed_shape_batches: bool = field(
        default=False,
        metadata={
            "help": "Padding-free steps of one fixed shape: a token budget of about per_device_train_batch_size "
            "examples, filled by best-fit packing, so a compiled step never recompiles and can be a CUDA graph "
            "(docs/speed.md). Needs padding-free batches and a map-style dataset."
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
    """On a CUDA device: bf16 mixed precision (where supported), TF32 matmuls and fused AdamW, the settings every
    fast BERT pretraining uses (NVIDIA, MosaicBERT, Cramming), batches copied to the device without blocking
    (from pinned memory, the Trainer's default: a blocking copy waits for every kernel queued before it), and
    collated in DataLoader workers (up to 4, half the cores; not when streaming, where the masks of examples
    without ids come from the workers' own RNGs, which no checkpoint saves), so that the host only launches
    kernels. A flag still wins, and `--use_cpu` keeps the CPU's, with no pinned memory (`accelerator_defaults`)."""
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
    return defaults


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
        (ModelArguments, DataArguments, TrainingArguments), "bertology pretrain", **shown, **launch
    )
    model_args, data_args, training_args = parse_arguments(parser, argv, file_defaults=launch)
    return model_args, data_args, training_args, explicit


def apply_defaults(training_args: TrainingArguments, defaults: dict, explicit: set[str]) -> TrainingArguments:
    """TrainingArguments with `defaults` filled in wherever the user gave no value."""
    updates = {key: value for key, value in defaults.items() if key not in explicit}
    if not updates:
        return training_args
    values = {f: getattr(training_args, f) for f in training_args.__dataclass_fields__ if not f.startswith("_")}
    values = {key: value for key, value in values.items() if key in explicit or key == "output_dir"}
    rebuilt = TrainingArguments(**{**values, **updates})
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


def checkpoint_variant(path: str):
    """The variant whose classes wrote checkpoint `path` (from the `auto_map` in its config.json), or None."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text())
    classes = {ref.rsplit(".", 1)[-1] for ref in config.get("auto_map", {}).values()}
    if any(backbone_of_model_class(name) for name in classes) and config.get("objective") in VARIANTS:
        return VARIANTS[config["objective"]]  # an objective on another encoder (models/composed)
    return next((v for v in VARIANTS.values() if v.model_class.__name__ in classes), None)


def checkpoint_backbone(path: str) -> str | None:
    """The backbone of a composed checkpoint `path` (an objective on another encoder), else None."""
    auto_map = json.loads((Path(path) / "config.json").read_text()).get("auto_map", {})
    return next(filter(None, (backbone_of_model_class(ref.rsplit(".", 1)[-1]) for ref in auto_map.values())), None)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model")


def load_tokenizer(name: str):
    if Path(name).is_dir() and not any((Path(name) / f).is_file() for f in TOKENIZER_FILES):
        raise BertologyError(
            f"{name} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); pass --tokenizer_name, "
            "or --vocab_size to train one"
        )
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as err:
        raise BertologyError(f"could not load a tokenizer from {name!r} ({type(err).__name__}: {err})") from None


def check_family(source: str, recipe: Recipe) -> None:
    """A checkpoint or config of another family (a GPT-2 config for `--recipe bert-tiny`) is one clear error."""
    if not Path(source).exists():
        return  # a Hub id: transformers resolves (or refuses) it
    config_file = Path(source) / "config.json" if Path(source).is_dir() else Path(source)
    if not config_file.is_file():
        raise BertologyError(f"{source}: no config.json (is it a model folder?)")
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError) as err:
        raise BertologyError(f"{config_file}: unreadable config ({err})") from None
    if model_type != recipe.config.model_type:
        raise BertologyError(
            f"{source} is a {model_type!r} model but --recipe {recipe.name} trains {recipe.config.model_type!r}; "
            "pass a checkpoint of the same family"
        )
    variant = checkpoint_variant(source) if Path(source).is_dir() else None
    backbone = checkpoint_backbone(source) if variant is not None else None
    if variant is not None and (variant.name, backbone) != (recipe.variant, recipe.backbone):
        # its config carries its own objective's fields and auto_map: read into this recipe's config class, they
        # would make a folder that names modeling code it does not hold
        written = variant.name + (f"@{backbone}" if backbone else "")
        raise BertologyError(
            f"{source} was pretrained by the {written} objective and --recipe {recipe.name} trains another: "
            "continue it with its own (leave out --recipe)"
        )


def build_recipe(model_args: ModelArguments) -> Recipe:
    """The recipe to train: a preset, optionally on top of a checkpoint or config of the same variant."""
    overrides = parse_overrides(model_args.config_overrides)
    source = model_args.model_name_or_path or model_args.config_name
    if model_args.recipe:
        recipe = get_recipe(model_args.recipe, backbone=model_args.backbone, **overrides)
    elif source and checkpoint_variant(source) is not None:
        variant, backbone = checkpoint_variant(source), checkpoint_backbone(source)
        config_class = BACKBONES[backbone].config_class if backbone else variant.config_class
        config, unused = config_class.from_pretrained(source, return_unused_kwargs=True, **overrides)
        check_override_keys(source, unused, set(config.to_dict()))  # transformers sets only the keys it knows
        # the length it was pretrained at (saved by `set_lengths`; a checkpoint from before that: the positions')
        length = getattr(config, "max_seq_length", None) or min(512, max_positions(config))
        recipe = Recipe(source, variant.name, config, {}, config.vocab_size, length)
        recipe.backbone = backbone
        check_config(recipe.config, source)
        return recipe
    elif source and not Path(source).exists():
        raise BertologyError(f"{source}: no such folder (a model from the Hub needs --recipe to say what to train)")
    else:
        raise BertologyError("give --recipe NAME (or --model_name_or_path of a checkpoint written by hf_bertology)")
    if source:
        check_family(source, recipe)
        try:
            recipe.config = recipe.config_class.from_pretrained(source, **overrides)
        except OSError as err:  # not a folder, and not on the Hub (or offline)
            raise BertologyError(
                f"{source}: no such folder, and no model of that name could be loaded from the Hub "
                f"({str(err).strip().splitlines()[0]})"
            ) from None
    check_config(recipe.config, f"--recipe {recipe.name}")
    return recipe


NO_POSITION_TABLE = 1 << 30  # `max_positions` of a model with relative positions (XLNet)


def max_positions(config) -> int:
    """How many tokens the model's position table holds (RoBERTa's starts after the padding index)."""
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None or limit <= 0:  # relative positions (XLNet): no table
        return NO_POSITION_TABLE
    offset = config.pad_token_id + 1 if config.model_type == "roberta" and config.pad_token_id is not None else 0
    return limit - offset


def check_lengths(config, max_seq_length: int) -> None:
    """`max_seq_length` must fit the model's position table."""
    if max_seq_length > max_positions(config):
        raise BertologyError(
            f"max_seq_length {max_seq_length} exceeds the model's {max_positions(config)} positions "
            f"(max_position_embeddings={config.max_position_embeddings}); lower --max_seq_length or raise "
            "max_position_embeddings"
        )


def trainer_class(name: str) -> type:
    """The Trainer class a variant names (`module.Class` under `hf_bertology.training`)."""
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), attribute)


RESUME_LAST = ("true", "last", "latest", "yes")


def resolve_resume(value: str | None, output_dir: str, world_size: int | None = None) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint folder, or `true`/`last` for the newest *complete* checkpoint in
    output_dir (none yet: start from scratch, so one command line both starts and resumes a preemptible job).
    Completeness, damage and the process count are `checkpoints`' to judge; the folders `last` skips are named."""
    if value is None or str(value).lower() in ("", "false", "none", "no"):
        return None
    if str(value).lower() in RESUME_LAST:
        checkpoint, skipped = newest_complete(output_dir)
        if skipped:
            logger.warning("skipped %s", "; ".join(f"{path.name}: {reason}" for path, reason in skipped))
        if checkpoint is None:
            logger.warning("no complete checkpoint in %s yet: training from scratch", output_dir)
            return None
        check_checkpoint(checkpoint, world_size)
        logger.info("resuming from %s", checkpoint)
        return str(checkpoint)
    if not Path(value).is_dir():
        raise BertologyError(f"--resume_from_checkpoint {value}: no such checkpoint folder")
    if not (Path(value) / "trainer_state.json").exists() and (
        (Path(value) / "all_results.json").exists() or list_checkpoints(value)
    ):
        raise BertologyError(
            f"--resume_from_checkpoint {value}: a run's output folder, not a checkpoint; pass one of its "
            f"checkpoint-N folders, `last` with --output_dir {value}, or --model_name_or_path {value} to start a "
            "new run from its weights"
        )
    check_checkpoint(value, world_size)
    return value


def already_finished(resume_from: str | None, training_args: TrainingArguments) -> dict | None:
    """A finished run asked to resume with the same (or a smaller) `--max_steps`: nothing to train. Says so, and
    returns the run's metrics (its `all_results.json`, if written); None when there is training to do."""
    step = finished_step(resume_from, training_args.max_steps) if resume_from else None
    if step is None:
        return None
    results = Path(training_args.output_dir) / "all_results.json"
    logger.warning(
        "%s is at step %d and --max_steps is %d: nothing to train (raise --max_steps to continue)%s",
        resume_from,
        step,
        training_args.max_steps,
        "" if results.is_file() else f"; its final folder was not written: the weights are in {resume_from}",
    )
    try:
        return json.loads(results.read_text())
    except (OSError, ValueError):
        return {}


def check_resume(checkpoint: str, recipe: Recipe) -> None:
    """The checkpoint to resume holds this recipe's model: another family, objective or size would fail deep in
    `load_state_dict` or the optimizer's state (`parameter group that doesn't match`)."""
    check_family(checkpoint, recipe)
    saved = json.loads((Path(checkpoint) / "config.json").read_text())
    for key in SIZE_FIELDS:
        if key in saved and saved[key] != getattr(recipe.config, key, None):
            raise BertologyError(
                f"{checkpoint} holds another model ({key}={saved[key]}, --recipe {recipe.name} has "
                f"{getattr(recipe.config, key, None)}): resume it with the recipe and --config_overrides it was "
                "started with"
            )


def check_sizes(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> None:
    """Sizes and counts as one line each, before any work: torch, datasets and the configs would refuse them deep
    inside with a traceback (a batch of 0), or read 0 as "the default" (`--vocab_size 0`)."""
    check_training_arguments(training_args)
    counts = {
        "--max_train_samples": data_args.max_train_samples,
        "--max_eval_samples": data_args.max_eval_samples,
        "--vocab_size": model_args.vocab_size,
        "--tokenizer_train_samples": model_args.tokenizer_train_samples,
    }
    check_counts(counts)
    check_range("--preprocessing_num_workers", data_args.preprocessing_num_workers, 0)  # 0: the main process
    if data_args.max_seq_length is not None and data_args.max_seq_length < MIN_SEQ_LENGTH:
        raise BertologyError(f"--max_seq_length must be at least {MIN_SEQ_LENGTH}, got {data_args.max_seq_length}")
    holding_out = training_args.do_eval and not data_args.validation_file
    if holding_out and not 0 < data_args.validation_split_percentage < 100:
        percentage = data_args.validation_split_percentage
        raise BertologyError(f"--validation_split_percentage must be between 0 and 100 (exclusive), got {percentage}")


def check_output_dir(data_args: DataArguments, training_args: TrainingArguments, resume_from: str | None) -> None:
    """A new run (not resuming) in a folder that holds a run is refused, as run_mlm.py does: its checkpoints would
    sit beside the new ones, and `--resume_from_checkpoint last` could later pick the old run's. With
    `--overwrite_output_dir` the old checkpoints are removed (the final files are written over)."""
    output_dir = Path(training_args.output_dir)
    old = [p.name for p in list_checkpoints(output_dir)]
    old += [name for name in ("model.safetensors", "all_results.json") if (output_dir / name).exists()]
    # `--resume_from_checkpoint last` with no complete checkpoint starts over by design (one command line starts and
    # restarts a job); the checkpoints it could mix with are incomplete ones, which `last` never picks
    if resume_from is not None or str(training_args.resume_from_checkpoint).lower() in RESUME_LAST or not old:
        return
    if not data_args.overwrite_output_dir:
        raise BertologyError(
            f"{output_dir} already holds a run ({', '.join(old[:3])}): resume it with --resume_from_checkpoint last, "
            "or pass --overwrite_output_dir to start over"
        )
    with training_args.main_process_first(desc="clearing the old run"):
        if training_args.process_index == 0:
            for checkpoint in list_checkpoints(output_dir):
                shutil.rmtree(checkpoint)
            logger.warning("--overwrite_output_dir: removed the old run's checkpoints in %s", output_dir)


def describe_corpus(data_args: DataArguments) -> str:
    if not data_args.train_file and not data_args.dataset_name:
        return default_corpus.NAME
    if data_args.train_file:
        return ", ".join(f"`{Path(f).name}`" for f in data_args.train_file)
    return f"`{data_args.dataset_name}` ({data_args.dataset_config_name or 'default'})"


# -- the steps of a run, in order (`run_pretraining` calls them; each can be called on its own from Python) --------


def training_arguments(
    training_args: TrainingArguments, recipe: Recipe, explicit: set[str], streaming: bool = False
) -> TrainingArguments:
    """The run's TrainingArguments: the user's values, then the recipe's and our pretraining defaults (and, under a
    launcher on CPUs, one gloo job), with warmup fitted to short runs; stops if a launcher's ranks would not form
    one job. `streaming`: the corpus is streamed (`--streaming`)."""
    defaults = {
        **PRETRAIN_DEFAULTS,
        **device_defaults(explicit, streaming),
        **recipe.training_defaults,
        **launcher_defaults(explicit),
    }
    training_args = keep_token_out_of_files(fit_warmup(apply_defaults(training_args, defaults, explicit)))
    check_world_size(training_args)
    return training_args


def load_corpora(data_args: DataArguments, training_args: TrainingArguments) -> tuple:
    """The training corpus and, with `--do_eval --validation_file`, the held-out one (else None): documents as
    `datasets` rows of `text` (`IterableDataset`s with `--streaming`)."""
    if data_args.streaming and training_args.max_steps <= 0:
        raise BertologyError("--streaming needs --max_steps (a stream has no length)")
    corpus_kwargs = dict(
        dataset_name=data_args.dataset_name,
        dataset_config_name=data_args.dataset_config_name,
        text_column=data_args.text_column,
        doc_separator=data_args.doc_separator,
        streaming=data_args.streaming,
    )
    train_files, validation_files = data_args.train_file, data_args.validation_file
    with training_args.main_process_first(desc="reading the corpus"):
        if not train_files and not data_args.dataset_name:  # no corpus given: the embedded one, offline
            train_files, embedded_validation = default_corpus.default_corpus_files()
            validation_files = validation_files or embedded_validation
            logger.info("no corpus given (--train_file, --dataset_name): training on %s", default_corpus.NAME)
        corpus = load_corpus(train_files=train_files, **corpus_kwargs)
        eval_corpus = None
        if training_args.do_eval and validation_files:
            eval_corpus = load_corpus(train_files=validation_files, **{**corpus_kwargs, "dataset_name": None})
    return corpus, eval_corpus


def build_tokenizer(
    model_args: ModelArguments, recipe: Recipe, corpus, training_args: TrainingArguments, resume_from: str | None
):
    """The tokenizer: `--tokenizer_name`, the checkpoint's, the resumed checkpoint's, or the family's tokenizer
    trained on the corpus (`--vocab_size`, `--tokenizer_train_samples`) by rank 0 and loaded by the other ranks."""
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_source is None and resume_from and (Path(resume_from) / "tokenizer_config.json").is_file():
        tokenizer_source = resume_from  # resuming: the tokenizer the checkpoint was trained with, not a new one
    if tokenizer_source:
        return load_tokenizer(tokenizer_source)
    texts = corpus["text"] if isinstance(corpus, datasets.Dataset) else (row["text"] for row in corpus)
    limit = model_args.tokenizer_train_samples
    if limit is not None:
        texts = (
            corpus.select(range(min(limit, len(corpus))))["text"]
            if isinstance(corpus, datasets.Dataset)
            else (row["text"] for row in corpus.take(limit))
        )
    # One process trains and saves; the others load its files: `tokenizers` breaks ties between equally
    # frequent merges differently from run to run, so ranks that each trained their own would disagree.
    shared = Path(training_args.output_dir) / "tokenizer-trained"
    with training_args.main_process_first(desc="training the tokenizer"):
        if training_args.process_index == 0:
            try:
                tokenizer = recipe.train_tokenizer(texts, model_args.vocab_size)
            except Exception as err:  # `tokenizers` raises a bare Exception ("vocabulary is not large enough")
                size = model_args.vocab_size or recipe.vocab_size
                raise BertologyError(f"could not train a {size}-token tokenizer on the corpus: {err}") from None
            if training_args.world_size > 1:
                tokenizer.save_pretrained(shared)
        else:
            tokenizer = load_tokenizer(str(shared))
    return tokenizer


def fit_to_tokenizer(recipe: Recipe, tokenizer, model_args: ModelArguments) -> None:
    """A new model takes the tokenizer's vocabulary and special-token ids; a checkpoint must hold all its tokens.
    A `vocab_size` in `--config_overrides` is kept when it holds the tokenizer's tokens (a table padded to a round
    size), refused when it does not (it used to be replaced by the tokenizer's silently)."""
    asked = parse_overrides(model_args.config_overrides).get("vocab_size")
    if asked is not None and asked < len(tokenizer):
        raise BertologyError(
            f"--config_overrides vocab_size={asked} is smaller than the tokenizer's {len(tokenizer)} tokens: raise it, "
            "or leave it out to take the tokenizer's"
        )
    if model_args.model_name_or_path is None:
        recipe.adapt_to_tokenizer(tokenizer)
        if asked is not None:
            recipe.config.vocab_size = asked
    elif len(tokenizer) > recipe.config.vocab_size:
        raise BertologyError(
            f"the tokenizer has {len(tokenizer)} tokens but the checkpoint's vocabulary only {recipe.config.vocab_size}"
        )


def set_lengths(recipe: Recipe, tokenizer, data_args: DataArguments, model_args: ModelArguments | None = None) -> int:
    """The run's sequence length (`--max_seq_length`, else the recipe's), checked against the position table; the
    tokenizer keeps the model's length. Everything in the config that follows the length is set here: the
    prediction caps (`Recipe.fit_to_length`), unless `--config_overrides` set them. The length is saved in the
    config (`max_seq_length`): continuing from the checkpoint without `--recipe` trains at the same length."""
    max_seq_length = data_args.max_seq_length or recipe.max_seq_length
    overrides = parse_overrides(model_args.config_overrides) if model_args is not None else {}
    recipe.fit_to_length(max_seq_length, explicit=overrides)
    recipe.config.max_seq_length = max_seq_length
    if max_positions(recipe.config) < min(tokenizer.model_max_length, NO_POSITION_TABLE):
        # saved with the checkpoint: `truncation=True` downstream (GLUE, pipelines) then fits the position table
        tokenizer.model_max_length = max_positions(recipe.config)
    check_lengths(recipe.config, max_seq_length)
    return max_seq_length


def build_model(recipe: Recipe, model_args: ModelArguments):
    """The pretraining model: the recipe's, freshly initialised, or `--model_name_or_path` with the recipe's config."""
    try:
        if model_args.model_name_or_path:
            model = recipe.model_class.from_pretrained(model_args.model_name_or_path, config=recipe.config)
        else:
            model = recipe.build_model()
    except ValueError as err:  # transformers' modules check their config as they are built (a generator's too)
        raise BertologyError(f"cannot build the model of --recipe {recipe.name}: {str(err).splitlines()[0]}") from None
    logger.info("%s: %s parameters", type(model).__name__, f"{model.num_parameters():,}")
    return model


def configure_batches(recipe: Recipe, model, collator, model_args: ModelArguments, data_args: DataArguments):
    """Padding-free batches (`--padding_free`, on for every recipe that supports them, except with `--streaming`)
    and the attention kernel that reads them (`--attn_implementation`); returns `(model, collator)`."""
    padding_free = data_args.padding_free
    if data_args.streaming:
        # accelerate dispatches a streamed batch by slicing every tensor along its first dimension, which a flat
        # row (one row; cu_seq_lens of B+1) does not survive
        if padding_free:
            raise BertologyError("--padding_free does not work with --streaming yet; pass --padding_free false")
        padding_free = False
    return configure_attention(
        model, collator, padding_free, model_args.attn_implementation, recipe.padding_free, data_args.streaming
    )


def build_datasets(
    corpus, eval_corpus, tokenizer, recipe: Recipe, max_seq_length: int, data_args: DataArguments,
    training_args: TrainingArguments,
) -> tuple:  # fmt: skip
    """Training and evaluation examples in the recipe's input format (NSP/SOP pairs, packed blocks, ...); with
    `--do_eval` and no validation file, `--validation_split_percentage` of the examples are held out."""
    num_proc = data_args.preprocessing_num_workers

    def examples(source):
        tokenized = tokenize_corpus(
            source, tokenizer, num_proc=num_proc, load_from_cache_file=not data_args.overwrite_cache
        )
        return build_pretraining_dataset(
            tokenized, tokenizer, recipe.config, max_seq_length, training_args.seed, num_proc
        )

    with training_args.main_process_first(desc="building examples"):
        train_dataset = examples(corpus)
        eval_dataset = examples(eval_corpus) if eval_corpus is not None else None
    if isinstance(train_dataset, datasets.Dataset):
        if len(train_dataset) == 0:
            raise BertologyError("the corpus produced no training examples (is it empty?)")
        if training_args.do_eval and eval_dataset is None:
            if len(train_dataset) < 2:
                raise BertologyError(
                    "--do_eval holds out examples, and the corpus made only one: pass --validation_file"
                )
            held_out = max(1, len(train_dataset) * data_args.validation_split_percentage // 100)
            split = train_dataset.train_test_split(test_size=held_out, seed=training_args.seed)
            train_dataset, eval_dataset = split["train"], split["test"]
        if data_args.max_train_samples is not None:
            train_dataset = train_dataset.select(range(min(data_args.max_train_samples, len(train_dataset))))
        logger.info("%d training examples of at most %d tokens", len(train_dataset), max_seq_length)
    else:
        train_dataset = train_dataset.shuffle(buffer_size=10_000, seed=training_args.seed)
    if eval_dataset is not None and data_args.max_eval_samples is not None:
        eval_dataset = eval_dataset.select(range(min(data_args.max_eval_samples, len(eval_dataset))))
    return train_dataset, eval_dataset


def build_trainer(
    recipe: Recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args: TrainingArguments,
    callbacks: list | None = None,
) -> tuple:  # fmt: skip
    """The variant's Trainer with its callbacks (component losses, ...) and `callbacks`; returns it with the
    TrainingArguments for the final push: `--push_to_hub` pushes the finished Hub-format folder once
    (`write_outputs`), so the Trainer's own pushes (every checkpoint, its generic model card) are turned off."""
    push_args, training_args.push_to_hub = copy.copy(training_args), False
    trainer = trainer_class(recipe.spec.trainer_class)(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=[*callbacks_for(model), SaveOnInterrupt(), *(callbacks or [])],
    )
    warn_if_fsdp_ignored(trainer)
    return trainer, push_args


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
            metrics["eval_at_start"] = before
            log_learning(before, eval_metrics)
    metrics["tokens_seen"] = int(trainer.state.num_input_tokens_seen or 0)
    return metrics


def evaluation_at_start(log_history: list[dict]) -> dict:
    """The metrics of the evaluation before the first step (`--eval_on_start`), else {}."""
    return next((log for log in log_history if log.get("step") == 0 and "eval_loss" in log), {})


def log_learning(before: dict, after: dict) -> None:
    """One line per held-out accuracy and loss, untrained against trained: whether the run learned, at a glance."""
    keys = [k for k in after if k.startswith("eval_") and k.endswith(("accuracy", "_loss")) and k in before]
    for key in sorted(keys, key=lambda k: (not k.endswith("accuracy"), k)):
        logger.info("held-out %-24s untrained %8.4f -> trained %8.4f", key[len("eval_") :], before[key], after[key])


def write_outputs(trainer, recipe: Recipe, data_args: DataArguments, metrics: dict, push_args=None) -> None:
    """The Hub-format folder, its model card and `all_results.json`, pushed with `--push_to_hub`: one process
    writes them, the others wait until they are complete."""
    if trainer.is_world_process_zero():
        output_dir = trainer.args.output_dir
        save_folder(trainer.model, trainer.processing_class, output_dir)
        card = dict(recipe=recipe.name, variant=recipe.variant, corpus=describe_corpus(data_args))
        write_part_folders(
            trainer.model, trainer.processing_class, output_dir, **card, dataset_name=data_args.dataset_name
        )
        apply_umask(output_dir)  # safetensors writes 0600
        shutil.rmtree(Path(output_dir) / "tokenizer-trained", ignore_errors=True)  # the ranks' hand-over copy
        train_logs = [log for log in trainer.state.log_history if "loss" in log]
        final_losses = {k: v for k, v in (train_logs[-1] if train_logs else {}).items() if k.endswith("loss")}
        if not final_losses and "train_loss" in metrics:  # a run shorter than --logging_steps: its mean loss
            final_losses = {"train_loss (mean)": metrics["train_loss"]}
        pushing = push_args is not None and push_args.push_to_hub
        write_model_card(
            output_dir,
            trainer.model,
            recipe=recipe.name,
            variant=recipe.variant,
            corpus=describe_corpus(data_args),
            steps=trainer.state.global_step,
            tokens_seen=int(trainer.state.num_input_tokens_seen or 0),
            final_losses=final_losses,
            plain_auto_class=recipe.plain_auto_class,
            dataset_name=data_args.dataset_name,
            repo_id=(push_args.hub_model_id or Path(output_dir).absolute().name) if pushing else None,
        )
        with open(os.path.join(output_dir, "all_results.json"), "w") as handle:
            json.dump(metrics, handle, indent=2)
        logger.info("wrote %s", output_dir)
        commit_url = push_from_training_args(output_dir, push_args) if pushing else None
        if commit_url:
            logger.info("pushed to %s", commit_url)
    trainer.accelerator.wait_for_everyone()


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
    fit_to_tokenizer(recipe, tokenizer, model_args)
    max_seq_length = set_lengths(recipe, tokenizer, data_args, model_args)
    collator = recipe.build_collator(tokenizer)  # fails early on a tokenizer without a mask token
    model = build_model(recipe, model_args)
    model, collator = configure_batches(recipe, model, collator, model_args, data_args)
    train_dataset, eval_dataset = build_datasets(
        corpus, eval_corpus, tokenizer, recipe, max_seq_length, data_args, training_args
    )
    trainer, push_args = build_trainer(
        recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args, callbacks
    )
    if data_args.fixed_shape_batches:
        from .fixed_shape import use_fixed_shape

        use_fixed_shape(trainer, max_seq_length)
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
