"""A low-precision residual stream under bf16 / fp16 autocast (`--low_precision_layernorm`): LayerNorm in the
autocast dtype, as MosaicBERT's low-precision LayerNorm (composer `LPLayerNorm`). Autocast otherwise runs
`layer_norm` in fp32 and returns fp32. Off by default: docs/speed.md says what must be measured first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LowPrecisionLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` that, under autocast, runs in the autocast dtype: the input, weight and bias cast to it."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        device = hidden.device.type
        if not torch.is_autocast_enabled(device):
            return super().forward(hidden)
        dtype = torch.get_autocast_dtype(device)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(device, enabled=False):
            return F.layer_norm(hidden.to(dtype), self.normalized_shape, weight, bias, self.eps)


def use_low_precision_layernorm(model: nn.Module) -> nn.Module:
    """Every plain `nn.LayerNorm` of `model` made a `LowPrecisionLayerNorm` in place: the same module and parameters
    (names, ties, an optimizer's references and the checkpoint stay as they are), only its forward differs."""
    for module in model.modules():
        if type(module) is nn.LayerNorm:
            module.__class__ = LowPrecisionLayerNorm
    return model


__all__ = ["LowPrecisionLayerNorm", "use_low_precision_layernorm"]
