"""The recipes by name: `get_recipe` (a preset, an objective on another encoder, overrides in the name) and
`list_recipes`."""

from __future__ import annotations

from ..utils import BertologyError
from .backbones import BACKBONE_ALIASES, BACKBONES, PART_FIELDS
from .base import parse_overrides
from .composed import compose, normalise_parts, parts_change
from .recipe import PRESETS, VARIANTS, Recipe, preset_recipe


def list_recipes() -> list[str]:
    """Names of every preset."""
    return list(PRESETS)


def get_recipe(name: str, backbone: str | None = None, **config_overrides) -> Recipe:
    """The preset `name` with `config_overrides` applied to its config (e.g. `num_hidden_layers=6`).

    `backbone` (or `name@backbone`, e.g. `electra-small@roberta`) runs the preset's objective on another encoder
    (a key of `BACKBONES`); so does changing a part of the objective (`sentence_task`, `span_boundary_objective`).
    Overrides can ride in the name too, after `+` (`deberta-v3-mini+embedding_sharing=es`, `bert-mini@roberta+
    sentence_task=sop`), so that one recipe string (e.g. in `bertology compare --recipes`) names a variation.
    """
    full_name = name
    if "+" in name:
        name, _, extra = name.partition("+")
        config_overrides = {**parse_overrides(extra, "+", f"recipe {full_name!r}"), **config_overrides}
        recipe = get_recipe(name, backbone=backbone, **config_overrides)
        recipe.name = full_name
        return recipe
    if "@" in name:
        name, _, named_backbone = name.partition("@")
        if backbone is not None and BACKBONE_ALIASES.get(backbone, backbone) != named_backbone:
            raise BertologyError(f"recipe {name}@{named_backbone} and backbone {backbone!r} disagree")
        backbone = named_backbone
    if name not in PRESETS:
        raise BertologyError(f"unknown recipe {name!r}; known: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    variant = VARIANTS[preset["variant"]]
    backbone = BACKBONE_ALIASES.get(backbone, backbone)
    if backbone is not None and backbone not in BACKBONES:
        raise BertologyError(f"unknown backbone {backbone!r}; known: {', '.join(BACKBONES)}")
    parts = normalise_parts({key: config_overrides[key] for key in PART_FIELDS if key in config_overrides})
    if backbone not in (None, variant.backbone) or parts_change(variant, parts):
        return compose(name, variant, backbone or variant.backbone, config_overrides)
    return preset_recipe(name, config_overrides)
