"""Which of our classes a model, a config or a checkpoint folder is made of (`kind_of`), and so whether it holds two
networks: `is_joint` and `networks_of`, the one answer every module asks (export, hub, training, GLUE)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..models.configuration_composed import two_networks
from ..utils import BertologyError
from .backbones import BACKBONES, Backbone, rtd_networks
from .base import Network, Variant
from .recipe import VARIANTS


@dataclass(frozen=True)
class Kind:
    """The variant (its objective) and, for an objective on another encoder, the backbone a model is made of."""

    variant: Variant | None  # None: a composed objective this version does not know
    backbone: Backbone | None
    networks: tuple[Network, ...]  # () : one network

    @property
    def config_class(self) -> type:
        return self.backbone.config_class if self.backbone else self.variant.config_class

    @property
    def model_class(self) -> type:
        return self.backbone.model_class if self.backbone else self.variant.model_class

    @property
    def label(self) -> str:
        """What a model card calls it: the variant's name, or "RTD on <model_type>" (composed)."""
        return f"RTD on {self.backbone.model_type}" if self.backbone else self.variant.name


def _names_and_fields(source) -> tuple[set[str], dict]:
    """(the class names `source` names, its config's fields): a model, a config, or a folder (its config.json:
    `auto_map`, and `architectures`, which keeps our class for a joint folder and for a Trainer checkpoint)."""
    if source is None:
        return set(), {}
    if isinstance(source, (str, os.PathLike)):
        try:
            fields = json.loads((Path(source) / "config.json").read_text())
        except (OSError, ValueError):
            return set(), {}
        refs = [*fields.get("auto_map", {}).values(), *(fields.get("architectures") or [])]
        return {ref.rsplit(".", 1)[-1] for ref in refs if isinstance(ref, str)}, fields
    model = getattr(source, "module", source)  # a model wrapped for DDP
    config = getattr(model, "config", model)
    return {type(model).__name__, type(config).__name__}, vars(config)


def kind_of(source) -> Kind | None:
    """What `source` (a model, a config, a folder, or a `Variant` row) is made of, or None when it is none of ours (a
    plain `transformers` model or folder, a Hub id, a path without config.json). Classes are matched by name, so a
    model loaded through remote code is ours too."""
    if isinstance(source, (Kind, Variant)):
        return source if isinstance(source, Kind) else Kind(source, None, source.networks)
    names, fields = _names_and_fields(source)
    for backbone in BACKBONES.values():
        if {backbone.model_class.__name__, backbone.config_class.__name__} & names:
            variant = VARIANTS.get(fields.get("objective"))
            if variant is not None and variant.model_class is backbone.model_class:  # a row on composed classes
                return Kind(variant, None, variant.networks)
            return Kind(variant, backbone, rtd_networks(backbone) if two_networks(fields) else ())
    rows = [v for v in VARIANTS.values() if {v.model_class.__name__, v.config_class.__name__} & names]
    if not rows:
        return None
    # rows on the same classes (ELECTRA, ELECTRA 15%): the one whose telling fields the config holds, the most
    variant = max(
        rows, key=lambda v: (all(fields.get(k) == x for k, x in v.identified_by.items()), len(v.identified_by))
    )
    return Kind(variant, None, variant.networks)


def networks_of(source) -> tuple[Network, ...]:
    """The networks `source` (a model, a config or a folder) holds when it holds two (`Variant.networks`; an RTD
    objective on another encoder: `composed.rtd_networks`), else ()."""
    kind = kind_of(source)
    return kind.networks if kind else ()


def is_joint(source) -> bool:
    """Whether `source` (a model, a config or a folder) holds two networks trained together (a generator and a
    discriminator): its folder has its own `model_type`, its networks are also written as plain folders."""
    return bool(networks_of(source))


def network(networks: tuple[Network, ...], name: str) -> Network:
    """Network `name` of a joint model's `networks`; one error line when there is no such network."""
    found = next((n for n in networks if n.name == name), None)
    if found is None:
        raise BertologyError(f"unknown part {name!r}; choose one of {', '.join(n.name for n in networks)}")
    return found
