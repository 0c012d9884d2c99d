""" "Replace MLM" (Clark et al. 2020, §3.2, Table 5): masked LM whose chosen tokens are replaced by a generator's samples
instead of [MASK], on ELECTRA's setting.

The objective is `models/modeling_composed`'s masked LM with a generator (`replace_mlm=True`): the main network's
masked-LM head predicts the originals of the chosen tokens from the generator's samples, the generator (ELECTRA's,
its size and sampling) is trained with it. ELECTRA's masking, data, sizes and schedules (`electra.py`).
docs/recipes/electra_ablations.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..models.configuration_electra import BertologyElectraConfig
from .backbones import BACKBONES, rtd_networks
from .electra import PRESETS as ELECTRA_PRESETS
from .electra import VARIANT as ELECTRA

# ELECTRA's objective fields the composed config does not default to ELECTRA's values (its masking: 85% [MASK], 15%
# kept, no random tokens; its segments; the generator's width, weight and sampling)
ELECTRA_OBJECTIVE = ("mlm_probability", "mask_replace_prob", "random_replace_prob", "whole_word_mask", "input_format")
ELECTRA_OBJECTIVE += (
    "predictions_follow_length",
    "generator_hidden_fraction",
    "generator_weight",
    "sampling_temperature",
)
ELECTRA_OBJECTIVE += ("disallow_correct",)

VARIANT = replace(
    ELECTRA,
    name="replace-mlm",
    config_class=BACKBONES["electra"].config_class,
    model_class=BACKBONES["electra"].model_class,
    plain_auto_class="AutoModel",  # the encoder fine-tuned: its `discriminator/` part, as an RTD cell's
    parts={"replace_mlm": True, "embedding_sharing": "es"},
    networks=rtd_networks(BACKBONES["electra"]),
    card_objective="Replace MLM: masked LM on the chosen tokens replaced by samples of a jointly trained generator "
    "instead of [MASK] (Clark et al. 2020, Table 5), ELECTRA's masking and generator",
)


def _preset(size: str) -> dict[str, Any]:
    """ELECTRA's preset of `size` (its sizes, generator fraction, cap and schedule) with this objective."""
    preset = ELECTRA_PRESETS[f"electra-{size}"]
    defaults = BertologyElectraConfig()
    objective = {name: getattr(defaults, name) for name in ELECTRA_OBJECTIVE}
    config = {**objective, **preset["config"], **VARIANT.parts, "objective": VARIANT.name}
    return {**preset, "variant": VARIANT.name, "config": config}


# The paper's small and base settings (Table 6, as ELECTRA's presets), mini and tiny.
PRESETS: dict[str, dict[str, Any]] = {
    f"replace-mlm-{size}": _preset(size) for size in ("small", "base", "mini", "tiny")
}
