"""ModernBERT-large initialised from a trained ModernBERT-base: weights tiled from the middle, layers spread.

As the official large run (`init_from_checkpoint`, `mode: tile_weights_from_middle`), on transformers' module names:
every tensor holds the base tensor in its middle, repeated outwards; fused tensors (`Wqkv`, the GLU's `Wi`) are
tiled per part; new layer `i` starts from base layer `round(i · L_base / L_new)`. Sources and the list of tensors:
docs/recipes/modernbert.md ("In the code").
"""

from __future__ import annotations

import torch
from torch import nn


def tile_from_middle(base: torch.Tensor, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    """`base` (1-D or 2-D) tiled to `shape` (each dimension at least as large): official `tile_weights_from_middle`."""
    if base.dim() not in (1, 2) or len(shape) != base.dim():
        raise ValueError(
            f"tile a 1-D or 2-D tensor to the same number of dimensions, got {tuple(base.shape)} -> {shape}"
        )
    if any(new < old for new, old in zip(shape, base.shape)):
        raise ValueError(f"cannot tile {tuple(base.shape)} to the smaller {tuple(shape)}")
    out = base
    for dim, (new, old) in enumerate(zip(shape, base.shape)):
        index = (torch.arange(new, device=base.device) - (new - old) // 2).remainder(old)
        out = out.index_select(dim, index)
    return out.clone()


def _tile_parts(base: torch.Tensor, new: torch.Tensor, parts: int) -> torch.Tensor:
    """A fused tensor (parts stacked on dim 0: q/k/v, or the GLU's two halves) tiled part by part."""
    new_parts = new.chunk(parts, dim=0)
    return torch.cat([tile_from_middle(b, n.shape) for b, n in zip(base.chunk(parts, dim=0), new_parts)], dim=0)


@torch.no_grad()
def _copy(base: nn.Module, new: nn.Module, parts: int = 1) -> None:
    """Tile `base`'s weight (and bias) into `new`'s, in place; an `nn.Identity` (the first layer's norm) is skipped."""
    for name in ("weight", "bias"):
        source, target = getattr(base, name, None), getattr(new, name, None)
        if source is None or target is None:
            continue
        target.copy_(_tile_parts(source, target, parts) if parts > 1 else tile_from_middle(source, target.shape))


def layer_mapping(base_layers: int, new_layers: int) -> list[int]:
    """The base layer each new layer starts from (official `src/bert_layers/model.py:1549`), kept in range: the
    official `round(i · L_base / L_new)` reaches `L_base` itself when the last index rounds half up to it (2 -> 4
    layers), which the official code would fail on; 22 -> 28 never does."""
    return [min(round(i * base_layers / new_layers), base_layers - 1) for i in range(new_layers)]


@torch.no_grad()
def init_from_base(base_model: nn.Module, new_model: nn.Module) -> nn.Module:
    """Initialise `new_model` (a larger `ModernBertForMaskedLM` or subclass) from `base_model`'s weights, in place."""
    base, new = base_model.model, new_model.model
    if base.embeddings.tok_embeddings.num_embeddings != new.embeddings.tok_embeddings.num_embeddings:
        raise ValueError("the base and the new model must share the vocabulary")
    _copy(base.embeddings.tok_embeddings, new.embeddings.tok_embeddings)
    _copy(base.embeddings.norm, new.embeddings.norm)
    for new_index, base_index in enumerate(layer_mapping(len(base.layers), len(new.layers))):
        source, target = base.layers[base_index], new.layers[new_index]
        _copy(source.attn_norm, target.attn_norm)
        _copy(source.mlp_norm, target.mlp_norm)
        _copy(source.attn.Wqkv, target.attn.Wqkv, parts=3)
        _copy(source.attn.Wo, target.attn.Wo)
        _copy(source.mlp.Wi, target.mlp.Wi, parts=2)
        _copy(source.mlp.Wo, target.mlp.Wo)
    _copy(base_model.head.dense, new_model.head.dense)
    _copy(base_model.head.norm, new_model.head.norm)
    if base_model.decoder.bias is not None and new_model.decoder.bias is not None:
        new_model.decoder.bias.copy_(base_model.decoder.bias)  # the decoder weight is tied to the embeddings
    return new_model


__all__ = ["init_from_base", "layer_mapping", "tile_from_middle"]
