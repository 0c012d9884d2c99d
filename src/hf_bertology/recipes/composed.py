"""One paper's objective on another paper's encoder (`NAME@BACKBONE`, `models/composed`): which parts carry over,
the combinations refused with one line, and the two networks of an RTD objective there (`rtd_networks`)."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForSpanMasking
from ..models.configuration_composed import two_networks
from ..utils import BertologyError, logger
from .backbones import (
    BACKBONES,
    IDENTITY_FIELDS,
    NATIVE_ONLY_FIELDS,
    PART_FIELDS,
    SEGMENT_FORMATS,
    SENTENCE_FORMATS,
    SIZE_FIELDS,
    Backbone,
    rtd_networks,
)
from .base import (
    CONFIG_ERRORS,
    SMALL_DATA,
    Variant,
    _family_config,
    _fields,
    _one_line,
    check_override_keys,
)
from .recipe import PRESETS, Recipe, preset_recipe


def normalise_parts(parts: dict[str, Any]) -> dict[str, Any]:
    parts = dict(parts)
    if "sentence_task" in parts and str(parts["sentence_task"]).lower() in ("none", "", "false"):
        parts["sentence_task"] = None
    return parts


def parts_change(variant: Variant, requested: dict[str, Any]) -> bool:
    defaults = {"sentence_task": None, "span_boundary_objective": False}
    return any(value != variant.parts.get(name, defaults[name]) for name, value in requested.items())


def compose(name: str, variant: Variant, backbone_name: str, overrides: dict[str, Any]) -> Recipe:
    """Preset `name`'s objective (masking, sentence task, SBO, RTD) and sizes on another encoder (`models/composed`).

    The architecture is the backbone's own preset at the same size (`roberta-mini` for `electra-mini@roberta`; its
    base preset where no such size exists), with the objective preset's layer sizes; every objective field of the
    paper's config carries over, so the collator, the input format and the prediction cap are the paper's.
    Combinations that cannot work are refused here with one line.
    """
    if variant.backbone is None:
        raise BertologyError(
            f"{name}: the {variant.name} objective runs only on its own encoder (XLNet's permutation LM needs "
            "XLNet's two-stream attention and memory); pick another recipe for --backbone"
        )
    backbone = BACKBONES[backbone_name]
    for field_name in NATIVE_ONLY_FIELDS:
        if overrides.get(field_name) is not None:
            raise BertologyError(f"{field_name} works only with the {variant.name} recipe's own encoder")
    if overrides.get("replaced_token_detection") is not None:
        raise BertologyError("replaced_token_detection comes with the electra and deberta-v3 objectives")
    preset = PRESETS[name]
    objective_config = preset_recipe(name, {}).config
    native_fields = _fields(_family_config(variant.config_class))
    objective = {
        key: value
        for key, value in objective_config.to_dict().items()
        if key not in native_fields and key not in NATIVE_ONLY_FIELDS and not key.startswith("_")
    }
    size = name.rsplit("-", 1)[-1]
    architecture_name = f"{backbone.architecture_of}-{size}"
    if architecture_name not in PRESETS:
        architecture_name = f"{backbone.architecture_of}-base"
    family_defaults = _family_config(backbone.config_class)().to_dict()
    family_fields = set(family_defaults)
    architecture = {
        key: value
        for key, value in preset_recipe(architecture_name, {}).config.to_dict().items()
        if key in family_fields and key not in IDENTITY_FIELDS and not key.startswith("_")
    }
    values = {**architecture, **{key: getattr(objective_config, key) for key in SIZE_FIELDS}}
    values.update(objective, **variant.parts, objective=variant.name, vocab_size=objective_config.vocab_size)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if key in family_fields:  # the objective's tokenizer family (adapt_to_tokenizer sets the real ids)
            values[key] = getattr(objective_config, key, None)
    max_seq_length = preset["data"].get("max_seq_length", SMALL_DATA.get(size, {}).get("max_seq_length", 128))
    if "max_position_embeddings" in family_fields:  # RoBERTa's positions start after the padding index: its own
        needed = max_seq_length + backbone.first_position(family_defaults["pad_token_id"])  # (the tokenizer's later)
        values["max_position_embeddings"] = max(values.get("max_position_embeddings") or 0, needed)
    check_override_keys(f"{name}@{backbone.name}", overrides, set(values) | family_fields | set(PART_FIELDS))
    requested = normalise_parts({key: overrides[key] for key in PART_FIELDS if key in overrides})
    values.update(requested)
    if "sentence_task" in requested:
        task = requested["sentence_task"]
        if task is not None:
            values["input_format"] = SENTENCE_FORMATS.get(task, values["input_format"])
        elif values["input_format"] in SENTENCE_FORMATS.values():
            values["input_format"] = "full_sentences"
    if "type_vocab_size" in family_fields and values["input_format"] in SEGMENT_FORMATS:
        own = values.get("type_vocab_size") or 0  # the family's own (RoBERTa 1, DeBERTa-v3 0); kept otherwise
        if own < 2 and "type_vocab_size" not in overrides:
            logger.warning(
                "%s@%s: the %s examples have two segments and %s has %d token type(s): type_vocab_size=2",
                name,
                backbone.name,
                values["input_format"],
                backbone.name,
                own,
            )
            values["type_vocab_size"] = 2
    if values.get("sentence_task") is not None and "type_vocab_size" not in family_fields:
        raise BertologyError(
            f"{values['sentence_task']} needs token types (segment embeddings) and {backbone.name} has none; "
            "pass sentence_task=none in --config_overrides or pick another backbone"
        )
    if values.get("span_boundary_objective") and variant.collator_class is not DataCollatorForSpanMasking:
        raise BertologyError(
            f"span_boundary_objective needs span masking; the {variant.name} objective masks tokens (use spanbert)"
        )
    if two_networks(values) and values.get("sentence_task") is not None:
        raise BertologyError("replaced-token detection with a sentence task is not supported; set sentence_task=none")
    values.update({key: value for key, value in overrides.items() if key not in PART_FIELDS})
    if two_networks(values) and not _can_share_embeddings(backbone, values):
        if "embedding_sharing" in overrides and values["embedding_sharing"] != "nes":
            raise BertologyError(
                f"embedding_sharing={values['embedding_sharing']} needs the generator's word table as wide as the "
                f"discriminator's, and {backbone.name} has no embedding projection: set generator_hidden_fraction=1.0 "
                "or embedding_sharing=nes"
            )
        logger.warning(
            "%s on %s: the generator (generator_hidden_fraction=%s) is narrower than the discriminator and %s has "
            "no embedding projection, so the embeddings cannot be shared: embedding_sharing=nes",
            variant.name,
            backbone.name,
            values.get("generator_hidden_fraction"),
            backbone.name,
        )
        values["embedding_sharing"] = "nes"
    try:
        config = backbone.config_class(**values)
    except CONFIG_ERRORS as err:
        raise BertologyError(f"{name}@{backbone.name}: {_one_line(err)}") from None
    return Recipe(
        name=f"{name}@{backbone.name}",
        variant_name=variant.name,
        config=config,
        training_defaults=dict(preset["training"]),
        vocab_size=objective_config.vocab_size,
        max_seq_length=max_seq_length,
        tokenizer_kwargs=dict(preset.get("tokenizer", {})),
        explicit=frozenset(overrides),
        backbone=backbone.name,
        networks=rtd_networks(backbone) if config.writes_joint_type else (),
    )


def _can_share_embeddings(backbone: Backbone, values: dict[str, Any]) -> bool:
    """Whether the generator's word table can have the discriminator's width: always where the table has a width of
    its own (`Backbone.own_embedding_width`), else only at the same hidden size."""
    return backbone.own_embedding_width or values.get("generator_hidden_fraction", 1) == 1
