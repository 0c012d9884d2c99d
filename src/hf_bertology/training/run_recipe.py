"""The recipe of one run: a preset or the checkpoint's own (`build_recipe`), its tokenizer (`build_tokenizer`), the
run's settled values (`settle_recipe`) and its model (`build_model`)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import datasets
from transformers import AutoTokenizer, TrainingArguments

from ..data.prepared import prepared_key
from ..joint import check_weights, joint_config, load_parts, read_weights
from ..recipes.backbones import BACKBONES, backbone_of
from ..recipes.base import check_override_keys, parse_overrides
from ..recipes.networks import Kind, is_joint, kind_of
from ..recipes.recipe import Recipe
from ..recipes.registry import get_recipe
from ..utils import BertologyError, logger
from .arguments import DataArguments, ModelArguments
from .corpora import corpus_identity, find_prepared, prepared_store
from .input_checks import check_config
from .phases import check_phase_start

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


def check_family(source: str, recipe: Recipe, kind: Kind | None) -> None:
    """A checkpoint or config of another family (a GPT-2 config for `--recipe bert-tiny`) is one clear error; `kind`:
    what `source` is made of when it is a checkpoint of ours."""
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
    variant = kind.variant if kind is not None else None
    backbone = kind.backbone.name if variant is not None and kind.backbone is not None else None
    if variant is not None and (variant.name, backbone) != (recipe.variant_name, recipe.backbone):
        # its config carries its own objective's fields and auto_map: read into this recipe's config class, they
        # would make a folder that names modeling code it does not hold
        written = variant.name + (f"@{backbone}" if backbone else "")
        raise BertologyError(
            f"{source} was pretrained by the {written} objective and --recipe {recipe.name} trains another: "
            "continue it with its own (leave out --recipe)"
        )


def build_recipe(model_args: ModelArguments) -> Recipe:
    """The recipe to train: a preset (`--recipe`), optionally on top of a checkpoint or config of the same family, or
    the one a checkpoint of ours was trained with. The one place that reads `--config_overrides`: the recipe keeps
    their keys (`Recipe.explicit`) for the steps after it."""
    source = model_args.model_name_or_path or model_args.config_name
    kind = kind_of(source) if source else None  # read once: what the checkpoint is made of, if it is ours
    ours = None if model_args.recipe or kind is None else kind.variant
    backbone = kind.backbone.name if ours is not None and kind.backbone is not None else None
    if not model_args.recipe and ours is None:
        if source and not Path(source).exists():
            raise BertologyError(
                f"{source}: no such folder (a model from the Hub needs --recipe to say what to train)"
            )
        raise BertologyError("give --recipe NAME (or --model_name_or_path of a checkpoint written by hf_bertology)")
    if ours is not None and model_args.generator_name_or_path:
        raise BertologyError(
            f"{source} is a checkpoint of ours, which holds its generator: leave out "
            "--generator_name_or_path (it is for two released networks)"
        )
    overrides = parse_overrides(model_args.config_overrides)
    if ours is not None:
        config_class = BACKBONES[backbone].config_class if backbone else ours.config_class
        config, unused = config_class.from_pretrained(source, return_unused_kwargs=True, **overrides)
        check_override_keys(source, unused, set(config.to_dict()))  # transformers sets only the keys it knows
        # the length it was pretrained at (saved by `settle_recipe`; a checkpoint from before that: the positions')
        length = getattr(config, "max_seq_length", None) or min(512, max_positions(config))
        recipe = Recipe(
            source,
            ours.name,
            config,
            {},
            config.vocab_size,
            length,
            explicit=frozenset(overrides),
            backbone=backbone,
            networks=kind.networks,
        )
    else:
        recipe = get_recipe(model_args.recipe, backbone=model_args.backbone, **overrides)
        if source:
            check_family(source, recipe, kind)
            recipe.config = continued_config(recipe, source, overrides)
        if model_args.generator_name_or_path:
            fit_generator(recipe, model_args)
    check_config(recipe.config, source if ours is not None else f"--recipe {recipe.name}")
    if model_args.model_name_or_path:  # damage is refused here, before the output folder is made
        check_weights(model_args.model_name_or_path)
        if recipe.phase_config is not None:
            check_phase_start(model_args.model_name_or_path)
    return recipe


def _read_config(source: str, config_class) -> dict:
    try:
        return config_class.get_config_dict(source)[0]
    except OSError as err:  # not a folder, and not on the Hub (or offline)
        raise BertologyError(
            f"{source}: no such folder, and no model of that name could be loaded from the Hub "
            f"({str(err).strip().splitlines()[0]})"
        ) from None


def continued_config(recipe: Recipe, source: str, overrides: dict):
    """The config of a run continued from `source`: its architecture (every field its config.json has), the
    recipe's objective settings for the fields it lacks (a released checkpoint has none: ELECTRA-large's 25%
    masking is the preset's, not the config class's default), a later phase's own fields, `--config_overrides`."""
    saved = _read_config(source, recipe.config_class)
    family = next(c for c in type(recipe.config).__mro__ if c.__module__.startswith("transformers."))
    # the architecture as plain transformers reads `source` (a field it lacks: the family class's default, not ours)
    fields = {key: value for key, value in family().to_dict().items() if key not in saved}
    fields.update(
        (key, value)
        for key, value in recipe.config.to_dict().items()
        if key not in saved and key not in fields and key != "auto_map"
    )
    # a later phase sets its own fields (ModernBERT's RoPE θ) on the checkpoint's config
    return recipe.config_class.from_dict({**fields, **saved, **(recipe.phase_config or {}), **overrides})


ARCHITECTURE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "embedding_size",
)


def fit_generator(recipe: Recipe, model_args: ModelArguments) -> None:
    """Size the recipe's generator as the released one (`--generator_name_or_path`): the official code derives it
    from the discriminator (ELECTRA: a fraction of the width; DeBERTa-v3: of the depth), so the released one says
    which fraction. Mismatches the joint model cannot hold are one error line."""
    generator = model_args.generator_name_or_path
    if not recipe.networks:
        raise BertologyError(
            f"--generator_name_or_path is for recipes with two networks (ELECTRA, DeBERTa-v3, electra@… and "
            f"deberta-v3@… cells); --recipe {recipe.name} trains one"
        )
    if not model_args.model_name_or_path:
        raise BertologyError("--generator_name_or_path needs --model_name_or_path: the released discriminator")
    if Path(generator).is_dir() and not (Path(generator) / "config.json").is_file():
        raise BertologyError(
            f"{generator} has no config.json: a generator folder holds its config beside its weights (for "
            "DeBERTa-v3's pytorch_model.generator.bin, see docs/pretraining.md)"
        )
    released = _read_config(generator, recipe.config_class)
    config = recipe.config
    check_not_swapped(recipe, model_args, released)
    check_weights(generator)
    if released.get("model_type") not in (config.model_type, None):
        raise BertologyError(
            f"{generator} is a {released.get('model_type')!r} model, the discriminator a {config.model_type!r} one"
        )
    if released.get("vocab_size") != config.vocab_size:
        raise BertologyError(
            f"the generator's vocabulary ({released.get('vocab_size')} tokens, {generator}) differs from the "
            f"discriminator's ({config.vocab_size}, {model_args.model_name_or_path}): they must share one tokenizer"
        )
    width = released.get("hidden_size", config.hidden_size) / config.hidden_size
    depth = released.get("num_hidden_layers", config.num_hidden_layers) / config.num_hidden_layers
    if hasattr(config, "generator_hidden_fraction"):
        config.generator_hidden_fraction = width
    if hasattr(config, "generator_layers_fraction"):
        config.generator_layers_fraction = depth
    if hasattr(config, "generator_num_hidden_layers"):
        config.generator_num_hidden_layers = released.get("num_hidden_layers")


def check_not_swapped(recipe: Recipe, model_args: ModelArguments, generator: dict) -> None:
    """The generator (its config.json, `generator`) is never larger than the discriminator (the official
    derivations make it narrower or shallower) and names no discriminator class; otherwise the two paths were
    given the other way round, which would fail later on a size fraction."""
    config, discriminator = recipe.config, model_args.model_name_or_path
    larger = [
        f"{key} {generator[key]} > {getattr(config, key)}"
        for key in ("hidden_size", "num_hidden_layers")
        if isinstance(generator.get(key), int) and generator[key] > getattr(config, key, generator[key])
    ]
    classes = {n.name: n.plain_class.__name__ for n in recipe.networks}
    named = set(generator.get("architectures") or ())
    if classes["discriminator"] in named and classes["generator"] not in named:
        larger.append(f"it is a {classes['discriminator']}")
    if larger:
        raise BertologyError(
            f"the generator {model_args.generator_name_or_path} looks like a discriminator ({', '.join(larger)}, "
            f"against {discriminator}): are --model_name_or_path and --generator_name_or_path swapped? The "
            "discriminator goes to --model_name_or_path"
        )


def _check_part(part: str, path: str, built, released) -> None:
    differ = [
        f"{key} {getattr(released, key, None)} (the recipe's {getattr(built, key, None)})"
        for key in ARCHITECTURE_FIELDS
        if getattr(released, key, None) != getattr(built, key, None)
    ]
    if differ:
        raise BertologyError(f"the {part} {path} has another shape than the recipe derives: {', '.join(differ)}")


def _heads(keys: list[str], model) -> str:
    """`cls.predictions.dense.weight, cls.predictions.bias, …` as `cls.predictions.*, …`: a line, not a table. A
    module is named whole (two levels deep) only when none of its tensors was loaded, else its tensors one by one
    (`generator.deberta.embeddings.position_embeddings.weight`, not `generator.deberta.*`); a tied copy of a table
    counts as that table."""
    seen, own = set(), []
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) not in seen:
            seen.add(id(value))
            own.append(key)
    missing = set(keys)

    def group(key: str) -> str:
        module = ".".join(key.split(".")[:2])
        whole = key.count(".") > 1 and all(k in missing for k in own if k.startswith(module + "."))
        return module + ".*" if whole else key

    return ", ".join(dict.fromkeys(group(key) for key in sorted(keys)))


NO_POSITION_TABLE = 1 << 30  # `max_positions` of a model with relative positions (XLNet)


def max_positions(config) -> int:
    """How many tokens the model's position table holds (`Backbone.first_position`: RoBERTa's starts after the
    padding index)."""
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None or limit <= 0:  # relative positions (XLNet): no table
        return NO_POSITION_TABLE
    backbone = backbone_of(config)
    return limit - (backbone.first_position(config.pad_token_id) if backbone else 0)


def check_lengths(config, max_seq_length: int) -> None:
    """`max_seq_length` must fit the model's position table."""
    if max_seq_length > max_positions(config):
        raise BertologyError(
            f"max_seq_length {max_seq_length} exceeds the model's {max_positions(config)} positions "
            f"(max_position_embeddings={config.max_position_embeddings}); lower --max_seq_length or raise "
            "max_position_embeddings"
        )


def build_tokenizer(
    model_args: ModelArguments,
    recipe: Recipe,
    corpus,
    training_args: TrainingArguments,
    resume_from: str | None,
    data_args: DataArguments | None = None,
):
    """The tokenizer: `--tokenizer_name`, the checkpoint's, the resumed checkpoint's, or the family's tokenizer
    trained on the corpus (`--vocab_size`, `--tokenizer_train_samples`) once: rank 0 trains it into a prepared entry
    keyed by the corpus and the recipe's tokenizer (`data.prepared`), and every rank, and every later run, loads it."""
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_source is None and resume_from and (Path(resume_from) / "tokenizer_config.json").is_file():
        tokenizer_source = resume_from  # resuming: the tokenizer the checkpoint was trained with, not a new one
    if tokenizer_source:
        return load_tokenizer(tokenizer_source)
    limit = model_args.tokenizer_train_samples
    vocab_size = model_args.vocab_size or recipe.vocab_size
    store = prepared_store(data_args)
    key = prepared_key(
        "tokenizer",
        corpus=corpus_identity(corpus, data_args or DataArguments()),
        tokenizer_type=recipe.tokenizer_type,
        tokenizer_class=recipe.variant.tokenizer_class,
        tokenizer_kwargs=recipe.tokenizer_kwargs,
        vocab_size=vocab_size,
        tokenizer_train_samples=limit,
    )
    overwrite = data_args is not None and data_args.overwrite_cache
    # One process trains and saves; the others load its files: `tokenizers` breaks ties between equally
    # frequent merges differently from run to run, so ranks that each trained their own would disagree.
    with training_args.main_process_first(local=False, desc="training the tokenizer"):
        folder = find_prepared(store, "tokenizer", key, training_args, overwrite)
        if folder is None:
            texts = corpus["text"] if isinstance(corpus, datasets.Dataset) else (row["text"] for row in corpus)
            if limit is not None:
                texts = (
                    corpus.select(range(min(limit, len(corpus))))["text"]
                    if isinstance(corpus, datasets.Dataset)
                    else (row["text"] for row in corpus.take(limit))
                )
            try:
                tokenizer = recipe.train_tokenizer(texts, model_args.vocab_size)
            except Exception as err:  # `tokenizers` raises a bare Exception ("vocabulary is not large enough")
                raise BertologyError(f"could not train a {vocab_size}-token tokenizer on the corpus: {err}") from None
            manifest = {"recipe": recipe.name, "vocab_size": vocab_size, "tokenizer_train_samples": limit}
            folder = store.write("tokenizer", key, tokenizer.save_pretrained, manifest, replace=overwrite)
    return load_tokenizer(str(folder))  # the same object on every rank and in every later run


def settle_recipe(recipe: Recipe, tokenizer, data_args: DataArguments, model_args: ModelArguments) -> Recipe:
    """The run's values, settled once: a new `Recipe` that every later step reads (`recipe` itself is not changed).

    - Vocabulary: a new model takes the tokenizer's size and special-token ids; a checkpoint must hold all its tokens.
      A `vocab_size` the user set (`--config_overrides`, `Recipe.explicit`) is kept when it holds the tokenizer's
      tokens (a table padded to a round size), refused when it does not.
    - Sequence length: `--max_seq_length`, else the recipe's, checked against the position table. It is the settled
      recipe's `max_seq_length` and its config's (saved with the checkpoint: continuing from it without `--recipe`
      trains at the same length), and everything in the config that follows it is set from it: the prediction caps
      and XLNet's memory (`Recipe.fit_to_length`), unless the user set them (`Recipe.explicit`).
    - The tokenizer keeps the model's length (`model_max_length` capped at the position table, saved with it:
      `truncation=True` downstream, GLUE or pipelines, then fits the table); the one value written outside the recipe.
    """
    asked = recipe.config.vocab_size if "vocab_size" in recipe.explicit else None
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
    settled.fit_to_length(max_seq_length)
    settled.config.max_seq_length = max_seq_length
    check_lengths(settled.config, max_seq_length)
    if max_positions(settled.config) < min(tokenizer.model_max_length, NO_POSITION_TABLE):
        tokenizer.model_max_length = max_positions(settled.config)
    return settled


def build_model(recipe: Recipe, model_args: ModelArguments):
    """The pretraining model: the recipe's, freshly initialised, or `--model_name_or_path` with the recipe's config
    (and `--generator_name_or_path`: a joint model from the two released networks, `joint.load_parts`). What the
    checkpoints do not hold (a head the release does not ship) is initialised and named in one line."""
    source, generator = model_args.model_name_or_path, model_args.generator_name_or_path
    try:
        if source and recipe.networks and not is_joint(source):  # released networks: one or both
            model = recipe.build_model()
            parts = {}  # --model_name_or_path: the first network (the discriminator), then the generator's
            for network, path in zip(recipe.networks, (source, generator)):
                if path is None:  # a release without its generator: it starts fresh (Δ set against it)
                    continue
                released = _quietly(network.plain_class.config_class.from_pretrained, path)
                _check_part(network.name, path, network.plain_config(model), released)
                parts[network.name] = read_weights(path)  # every tensor, those plain classes drop too
            missing = load_parts(model, recipe.networks, parts)
        elif source:
            model, info = _quietly(
                recipe.model_class.from_pretrained, source, config=recipe.config, output_loading_info=True
            )
            missing = info["missing_keys"]
        else:
            model, missing = recipe.build_model(), []
    except ValueError as err:  # transformers' modules check their config as they are built (a generator's too)
        raise BertologyError(f"cannot build the model of --recipe {recipe.name}: {str(err).splitlines()[0]}") from None
    if missing:
        named = " or ".join(filter(None, (source, generator)))
        logger.info("initialised (not in %s): %s", named, _heads(missing, model))
    model.continued_from = tuple(filter(None, (source, generator)))  # the model card's base_model (hub.py)
    logger.info("%s: %s parameters", type(model).__name__, f"{model.num_parameters():,}")
    return model


def _quietly(load, *args, **kwargs):
    """A transformers load without its multi-line load report: what it initialised is our one line."""
    import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return load(*args, **kwargs)
    finally:
        transformers.logging.set_verbosity(level)
