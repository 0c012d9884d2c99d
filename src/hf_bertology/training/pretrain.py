"""`bertology pretrain`: pretrain a recipe on a corpus with the `transformers` Trainer.

    bertology pretrain --recipe roberta-mini --train_file wiki_00 --output_dir runs/roberta-mini --max_steps 2000

Flags follow transformers' `run_mlm.py` (`--model_name_or_path`, `--config_name`, `--tokenizer_name`,
`--dataset_name`, `--train_file`, `--max_seq_length`, ...) plus every `TrainingArguments` flag; a single JSON or
YAML file holding the same keys works too. The recipe's training settings (lr, betas, warmup, ...) apply wherever a
flag does not set them. The output folder is Hub format (see `hf_bertology.hub`).

Steps, in order: arguments -> corpus -> tokenizer (loaded, or trained on the corpus) -> config and model ->
examples (the recipe's input format) -> collator -> Trainer -> Hub-format folder + model card.
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
import transformers
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, set_seed

from ..data import build_pretraining_dataset, load_corpus, tokenize_corpus
from ..hub import push_from_training_args, save_folder, write_model_card
from ..recipes import VARIANTS, Recipe, get_recipe, list_recipes
from ..utils import BertologyError, logger, set_verbosity
from .callbacks import callbacks_for
from .trainer import is_complete_checkpoint, last_complete_checkpoint


@dataclass
class ModelArguments:
    recipe: str | None = field(
        default=None, metadata={"help": f"Preset to train (sizes, objective, defaults): {', '.join(list_recipes())}"}
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
    tokenizer_train_samples: int | None = field(
        default=None, metadata={"help": "Train the tokenizer on at most this many documents (default: all)."}
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset, e.g. `wikitext`."})
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


# TrainingArguments defaults that suit pretraining (a flag or the recipe still wins).
PRETRAIN_DEFAULTS = {
    "remove_unused_columns": False,  # collators read `word_starts` & co., which the model's forward does not take
    "prediction_loss_only": True,
    "include_num_input_tokens_seen": "non_padding",
    "logging_steps": 50,
    "save_total_limit": 2,
}


def explicit_keys(argv: list[str]) -> set[str]:
    """Argument names the user set (flags, or keys of a JSON/YAML file), so recipe defaults do not override them."""
    if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")):
        text = Path(argv[0]).read_text(encoding="utf-8")
        if argv[0].endswith(".json"):
            return set(json.loads(text))
        import yaml

        return set(yaml.safe_load(text) or {})
    return {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}


def parse_args(argv: list[str]) -> tuple[ModelArguments, DataArguments, TrainingArguments, set[str]]:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    parser.prog = "bertology pretrain"
    if len(argv) == 1 and argv[0].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(argv[0])
    elif len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
        model_args, data_args, training_args = parser.parse_yaml_file(argv[0])
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(argv)
    return model_args, data_args, training_args, explicit_keys(argv)


def apply_defaults(training_args: TrainingArguments, defaults: dict, explicit: set[str]) -> TrainingArguments:
    """TrainingArguments with `defaults` filled in wherever the user gave no value."""
    updates = {key: value for key, value in defaults.items() if key not in explicit}
    if not updates:
        return training_args
    values = {f: getattr(training_args, f) for f in training_args.__dataclass_fields__ if not f.startswith("_")}
    values = {key: value for key, value in values.items() if key in explicit or key == "output_dir"}
    rebuilt = TrainingArguments(**{**values, **updates})
    return rebuilt


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


def parse_overrides(text: str | None) -> dict:
    """`"a=1,b=0.5,c=true,d=gelu"` -> `{"a": 1, "b": 0.5, "c": True, "d": "gelu"}`."""
    overrides = {}
    for item in filter(None, (text or "").split(",")):
        if "=" not in item:
            raise BertologyError(f"--config_overrides expects key=value pairs, got {item!r}")
        key, raw = (part.strip() for part in item.split("=", 1))
        try:
            overrides[key] = json.loads(raw.lower() if raw.lower() in ("true", "false", "null") else raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides


def checkpoint_variant(path: str):
    """The variant whose classes wrote checkpoint `path` (from the `auto_map` in its config.json), or None."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return None
    auto_map = json.loads(config_file.read_text()).get("auto_map", {})
    classes = {ref.rsplit(".", 1)[-1] for ref in auto_map.values()}
    return next((v for v in VARIANTS.values() if v.model_class.__name__ in classes), None)


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


def build_recipe(model_args: ModelArguments) -> Recipe:
    """The recipe to train: a preset, optionally on top of a checkpoint or config of the same variant."""
    overrides = parse_overrides(model_args.config_overrides)
    source = model_args.model_name_or_path or model_args.config_name
    if model_args.recipe:
        recipe = get_recipe(model_args.recipe, **overrides)
    elif source and checkpoint_variant(source) is not None:
        variant = checkpoint_variant(source)
        config = variant.config_class.from_pretrained(source, **overrides)
        return Recipe(source, variant.name, config, {}, config.vocab_size, min(512, max_positions(config)))
    else:
        raise BertologyError("give --recipe NAME (or --model_name_or_path of a checkpoint written by hf_bertology)")
    if source:
        check_family(source, recipe)
        recipe.config = recipe.spec.config_class.from_pretrained(source, **overrides)
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


def resolve_resume(value: str | None, output_dir: str) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint folder, or `true`/`last` for the newest *complete* checkpoint in
    output_dir (none yet: start from scratch, so one command line both starts and resumes a preemptible job)."""
    if value is None or str(value).lower() in ("", "false", "none", "no"):
        return None
    if str(value).lower() in ("true", "last", "latest", "yes"):
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            logger.warning("no complete checkpoint in %s yet: training from scratch", output_dir)
            return None
        logger.info("resuming from %s", checkpoint)
        return str(checkpoint)
    if not Path(value).is_dir():
        raise BertologyError(f"--resume_from_checkpoint {value}: no such checkpoint folder")
    if not is_complete_checkpoint(value):
        raise BertologyError(
            f"--resume_from_checkpoint {value}: the checkpoint is incomplete (its run was stopped while saving); "
            "pass an earlier one or `last`"
        )
    return value


def describe_corpus(data_args: DataArguments) -> str:
    if data_args.train_file:
        return ", ".join(f"`{Path(f).name}`" for f in data_args.train_file)
    return f"`{data_args.dataset_name}` ({data_args.dataset_config_name or 'default'})"


def load_corpora(data_args: DataArguments, training_args: TrainingArguments) -> tuple:
    """The training corpus and, with --do_eval and --validation_file, the evaluation corpus (else None)."""
    corpus_kwargs = dict(
        dataset_name=data_args.dataset_name,
        dataset_config_name=data_args.dataset_config_name,
        text_column=data_args.text_column,
        doc_separator=data_args.doc_separator,
        streaming=data_args.streaming,
    )
    with training_args.main_process_first(desc="reading the corpus"):
        corpus = load_corpus(train_files=data_args.train_file, **corpus_kwargs)
        eval_corpus = None
        if training_args.do_eval and data_args.validation_file:
            eval_corpus = load_corpus(train_files=data_args.validation_file, **{**corpus_kwargs, "dataset_name": None})
    return corpus, eval_corpus


def build_examples(
    corpus,
    eval_corpus,
    tokenizer,
    recipe: Recipe,
    data_args: DataArguments,
    training_args: TrainingArguments,
    max_seq_length: int,
) -> tuple:
    """The training and evaluation examples, as the Trainer gets them: row i of the training set is example i
    (`bertology show-mask --example i` rebuilds them with the same flags)."""
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


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict:
    """Run pretraining; returns the final metrics (also written to `output_dir/all_results.json`).

    `callbacks`: extra `TrainerCallback`s for the Trainer (e.g. `bertology compare`'s compute-budget stop).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, explicit = parse_args(argv)
    set_verbosity()
    transformers.utils.logging.set_verbosity_warning()
    datasets.utils.logging.set_verbosity_warning()

    # -- recipe, with its training defaults wherever no flag was given ----------------------------------------
    recipe = build_recipe(model_args)
    training_args = fit_warmup(
        apply_defaults(training_args, {**PRETRAIN_DEFAULTS, **recipe.training_defaults}, explicit)
    )
    max_seq_length = data_args.max_seq_length or recipe.max_seq_length
    resume_from = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    set_seed(training_args.seed)
    if data_args.streaming and training_args.max_steps <= 0:
        raise BertologyError("--streaming needs --max_steps (a stream has no length)")

    # -- corpus ---------------------------------------------------------------------------------------------
    corpus, eval_corpus = load_corpora(data_args, training_args)

    # -- tokenizer ------------------------------------------------------------------------------------------
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_source is None and resume_from and (Path(resume_from) / "tokenizer_config.json").is_file():
        tokenizer_source = resume_from  # resuming: the tokenizer the checkpoint was trained with, not a new one
    if tokenizer_source:
        tokenizer = load_tokenizer(tokenizer_source)
    else:
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
                tokenizer = recipe.train_tokenizer(texts, model_args.vocab_size)
                if training_args.world_size > 1:
                    tokenizer.save_pretrained(shared)
            else:
                tokenizer = load_tokenizer(str(shared))
    if model_args.model_name_or_path is None:
        recipe.adapt_to_tokenizer(tokenizer)
    elif len(tokenizer) > recipe.config.vocab_size:
        raise BertologyError(
            f"the tokenizer has {len(tokenizer)} tokens but the checkpoint's vocabulary only {recipe.config.vocab_size}"
        )
    collator = recipe.build_collator(tokenizer)  # fails early on a tokenizer without a mask token
    if max_positions(recipe.config) < min(tokenizer.model_max_length, NO_POSITION_TABLE):
        # saved with the checkpoint: `truncation=True` downstream (GLUE, pipelines) then fits the position table
        tokenizer.model_max_length = max_positions(recipe.config)
    check_lengths(recipe.config, max_seq_length)

    # -- model ----------------------------------------------------------------------------------------------
    if model_args.model_name_or_path:
        model = recipe.spec.model_class.from_pretrained(model_args.model_name_or_path, config=recipe.config)
    else:
        model = recipe.build_model()
    logger.info("%s: %s parameters", type(model).__name__, f"{model.num_parameters():,}")

    # -- examples -------------------------------------------------------------------------------------------
    train_dataset, eval_dataset = build_examples(
        corpus, eval_corpus, tokenizer, recipe, data_args, training_args, max_seq_length
    )

    # -- training -------------------------------------------------------------------------------------------
    # `--push_to_hub` pushes the final Hub-format folder once, below; the Trainer's own pushes (every checkpoint,
    # its generic model card) are turned off.
    push_args, training_args.push_to_hub = copy.copy(training_args), False
    trainer = trainer_class(recipe.spec.trainer_class)(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=[*callbacks_for(model), *(callbacks or [])],
    )
    metrics: dict = {}
    if training_args.do_train or not training_args.do_eval:
        result = trainer.train(resume_from_checkpoint=resume_from)
        metrics.update(result.metrics)
    if training_args.do_eval and eval_dataset is not None:
        eval_metrics = trainer.evaluate()
        eval_metrics["perplexity"] = math.exp(min(eval_metrics.get("eval_mlm_loss", eval_metrics["eval_loss"]), 50))
        metrics.update(eval_metrics)

    # -- the Hub-format folder ------------------------------------------------------------------------------
    if trainer.is_world_process_zero():
        output_dir = training_args.output_dir
        save_folder(trainer.model, tokenizer, output_dir)
        shutil.rmtree(Path(output_dir) / "tokenizer-trained", ignore_errors=True)  # the ranks' hand-over copy
        train_logs = [log for log in trainer.state.log_history if "loss" in log]
        final_losses = {k: v for k, v in (train_logs[-1] if train_logs else {}).items() if k.endswith("loss")}
        write_model_card(
            output_dir,
            trainer.model,
            recipe=recipe.name,
            variant=recipe.variant,
            corpus=describe_corpus(data_args),
            steps=trainer.state.global_step,
            tokens_seen=int(trainer.state.num_input_tokens_seen or 0),
            final_losses=final_losses,
            plain_auto_class=recipe.spec.plain_auto_class,
            repo_id=(push_args.hub_model_id or Path(output_dir).absolute().name) if push_args.push_to_hub else None,
        )
        metrics["tokens_seen"] = int(trainer.state.num_input_tokens_seen or 0)
        with open(os.path.join(output_dir, "all_results.json"), "w") as handle:
            json.dump(metrics, handle, indent=2)
        logger.info("wrote %s", output_dir)
        commit_url = push_from_training_args(output_dir, push_args)
        if commit_url:
            logger.info("pushed to %s", commit_url)
    return metrics


if __name__ == "__main__":
    main()
