"""The recipe of one run: a preset or the checkpoint's own (`build_recipe`), its tokenizer (`build_tokenizer`), the
run's settled values (`settle_recipe`) and its model (`build_model`)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import datasets
from transformers import AutoTokenizer, TrainingArguments

from ..export import joint_config
from ..recipes import (
    BACKBONES,
    VARIANTS,
    Recipe,
    backbone_of_model_class,
    check_override_keys,
    get_recipe,
    parse_overrides,
)
from ..utils import BertologyError, logger
from .arguments import DataArguments, ModelArguments
from .input_checks import check_config


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
        return AutoTokenizer.from_pretrained(name, config=joint_config(name))  # a joint run's: read by our class
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
    written = recipe.config.to_diff_dict().get("model_type")  # a joint run's own type (configuration_electra.py)
    if model_type not in (recipe.config.model_type, written):
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
        # the length it was pretrained at (saved by `settle_recipe`; a checkpoint from before that: the positions')
        length = getattr(config, "max_seq_length", None) or min(512, max_positions(config))
        recipe = Recipe(source, variant.name, config, {}, config.vocab_size, length, backbone=backbone)
        check_config(recipe.config, source)
        return recipe
    elif source and not Path(source).exists():
        raise BertologyError(f"{source}: no such folder (a model from the Hub needs --recipe to say what to train)")
    else:
        raise BertologyError("give --recipe NAME (or --model_name_or_path of a checkpoint written by hf_bertology)")
    if source:
        check_family(source, recipe)
        try:
            # a later phase sets its own fields (ModernBERT's RoPE θ) on the checkpoint's config
            recipe.config = recipe.config_class.from_pretrained(source, **{**(recipe.phase_config or {}), **overrides})
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


def settle_recipe(recipe: Recipe, tokenizer, data_args: DataArguments, model_args: ModelArguments) -> Recipe:
    """The run's values, settled once: a new `Recipe` that every later step reads (`recipe` itself is not changed).

    - Vocabulary: a new model takes the tokenizer's size and special-token ids; a checkpoint must hold all its tokens.
      A `vocab_size` in `--config_overrides` is kept when it holds the tokenizer's tokens (a table padded to a round
      size), refused when it does not (it used to be replaced by the tokenizer's silently).
    - Sequence length: `--max_seq_length`, else the recipe's, checked against the position table. It is the settled
      recipe's `max_seq_length` and its config's (saved with the checkpoint: continuing from it without `--recipe`
      trains at the same length), and everything in the config that follows it is set from it: the prediction caps
      and XLNet's memory (`Recipe.fit_to_length`), unless `--config_overrides` set them.
    - The tokenizer keeps the model's length (`model_max_length` capped at the position table, saved with it:
      `truncation=True` downstream, GLUE or pipelines, then fits the table); the one value written outside the recipe.
    """
    overrides = parse_overrides(model_args.config_overrides)
    asked = overrides.get("vocab_size")
    if asked is not None and asked < len(tokenizer):
        raise BertologyError(
            f"--config_overrides vocab_size={asked} is smaller than the tokenizer's {len(tokenizer)} tokens: raise it, "
            "or leave it out to take the tokenizer's"
        )
    settled = dataclasses.replace(recipe, config=copy.deepcopy(recipe.config))
    if model_args.model_name_or_path is None:
        settled.adapt_to_tokenizer(tokenizer)
        if asked is not None:
            settled.config.vocab_size = asked
    elif len(tokenizer) > settled.config.vocab_size:
        raise BertologyError(
            f"the tokenizer has {len(tokenizer)} tokens but the checkpoint's vocabulary only "
            f"{settled.config.vocab_size}"
        )
    max_seq_length = data_args.max_seq_length or recipe.max_seq_length
    settled.fit_to_length(max_seq_length, explicit=overrides)
    settled.config.max_seq_length = max_seq_length
    check_lengths(settled.config, max_seq_length)
    if max_positions(settled.config) < min(tokenizer.model_max_length, NO_POSITION_TABLE):
        tokenizer.model_max_length = max_positions(settled.config)
    return settled


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
