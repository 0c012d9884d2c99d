""" "ELECTRA 15%" (Clark et al. 2020, §3.2, Table 5): ELECTRA whose discriminator's loss reads the chosen tokens only.

The row and the presets are ELECTRA's (`electra.py`: its model, collator, networks and schedules) with one field,
`rtd_loss_positions="masked"` (`models/replaced_token_detection.MaskedTokenDetection`). docs/recipes/electra_ablations.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import electra

VARIANT = replace(
    electra.VARIANT,
    name="electra-15",
    identified_by={"rtd_loss_positions": "masked"},  # its checkpoints are ELECTRA's classes
    card_objective="ELECTRA 15%: ELECTRA's replaced-token detection with the discriminator's loss over the chosen "
    "(masked) tokens only, 15% in the paper and 25% at mini size (Clark et al. 2020, Table 5)",
)

# The paper's small and base settings (Table 6, as ELECTRA's presets), mini and tiny; the one field changed.
PRESETS: dict[str, dict[str, Any]] = {
    f"electra-15-{size}": {
        **electra.PRESETS[f"electra-{size}"],
        "variant": VARIANT.name,
        "config": {**electra.PRESETS[f"electra-{size}"]["config"], "rtd_loss_positions": "masked"},
    }
    for size in ("small", "base", "mini", "tiny")
}
