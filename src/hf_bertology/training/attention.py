"""Attention for padding-free batches, plugged into transformers' own attention dispatch.

transformers' BERT, RoBERTa, ALBERT, ELECTRA and ModernBERT layers call the function `config._attn_implementation`
names in `AttentionInterface` with every keyword of the model's forward, so a registered function reads the
boundaries of a padding-free batch (`cu_seq_lens_q`, `max_length_q`; `collators.flatten`) with no modeling code
copied. `sdpa_packed`, registered here: FlashAttention's variable-length kernel on CUDA in bf16/fp16, else one SDPA
call on the examples re-padded (MosaicBERT's layout); plain SDPA for padded batches; ModernBERT's `sliding_window`
in both (`batches.configure_attention` pairs a run's kernel with its batches). Why, and what is measured: docs/speed.md
("Padding-free batches") and docs/internals.md.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..models.step import PACKED_IMPLEMENTATIONS

PACKED_ATTENTION = PACKED_IMPLEMENTATIONS[0]  # "sdpa_packed": ours, registered by `register_packed_attention`


def _repad_sdpa(
    query, key, value, cu_seqlens, max_len, dropout, scaling, slots=None, key_mask=None, window=None, layout=None
):
    """SDPA over each example of a flat `(1, H, T, D)` batch: scatter into `(B, H, max_len, D)`, attend, gather
    back into `(T, H, D)`.

    `slots` (`(T,)`): each token's place `row * max_len + col` (the collator's `packed_slots`); `key_mask`
    (`(B, max_len)`): the real keys of each example (the collator's `packed_key_mask`); else both derived here, in
    every layer. `window`: keys at most this far from the query (ModernBERT's local layers), else every key of the
    example. `layout`: the collator's `packed_index` and `packed_key_bias` (`collators.flatten.repad_layout`): the
    output read back by one index and an additive mask SDPA takes as it is, 8 fewer kernels per layer.
    """
    _, heads, total, dim = query.shape
    rows = cu_seqlens.numel() - 1
    index, bias = layout if layout is not None else (None, None)
    if slots is None:
        cu = cu_seqlens.to(torch.long)
        token = torch.arange(total, device=cu.device)
        row = torch.bucketize(token, cu[1:], right=True)  # (T,) example of every token
        slots = row * max_len + (token - cu[row])
    if key_mask is None and (bias is None or window is not None):  # the bias stands for it, but in a window
        key_mask = packed_key_mask(cu_seqlens, max_len)
    slots = slots.to(query.device)
    if bias is not None and window is None:
        keep = bias if bias.dtype == query.dtype else bias.to(query.dtype)  # (B, 1, 1, max_len)
    else:
        keep = key_mask.to(query.device)[:, None, None, :]  # (B, 1, 1, max_len)
    if window is not None:
        col = torch.arange(max_len, device=query.device)
        keep = keep & ((col[:, None] - col[None, :]).abs() <= window)  # (B, 1, max_len, max_len)

    # q, k and v scattered together: one copy into the padded layout (and one back in the backward), not three;
    # in (T, H, D) layout, the one their gradients go back to through transformers' `.view().transpose(1, 2)`
    # without a copy (scattered as (3, H, T, D), they would need one each)
    qkv = torch.cat((query, key, value)).transpose(1, 2)  # (3, T, H, D)
    padded = qkv.new_zeros(3, rows * max_len, heads, dim).index_copy(1, slots, qkv)
    padded_q, padded_k, padded_v = padded.view(3, rows, max_len, heads, dim).transpose(2, 3).unbind(0)
    out = F.scaled_dot_product_attention(
        padded_q, padded_k, padded_v, attn_mask=keep, dropout_p=dropout, scale=scaling
    )  # (B, H, max_len, D)
    if index is not None:
        example, column = index.unbind(0)
        return out[example, :, column]  # (T, H, D): one gather, no copy into (B, max_len, H, D) first
    return out.transpose(1, 2).reshape(rows * max_len, heads, dim)[slots]  # (T, H, D)


def packed_key_mask(cu_seqlens: torch.Tensor, max_len: int) -> torch.Tensor:
    """`(B, max_len)`: True at the real keys of each example in the re-padded layout. An empty example (fixed-shape
    batches pad `cu_seqlens` with them) keeps one zero slot, never gathered: a row with no key at all would be NaN,
    and NaN times a zero gradient is still NaN."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.long)
    columns = torch.arange(max_len, device=cu_seqlens.device)[None, :]
    return (columns < lengths[:, None]) | (columns == 0)


def _flash_varlen(query, key, value, cu_seqlens, max_len, dropout, scaling, window=None):
    """FlashAttention's variable-length kernel as torch ships it (`aten._flash_attention_forward`, differentiable,
    with attention dropout, which `torch.nn.attention.varlen.varlen_attn` does not take): no padding at all."""
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (T, H, D)
    cu = cu_seqlens.to(torch.int32)
    out = torch.ops.aten._flash_attention_forward(
        q,
        k,
        v,
        cu,
        cu,
        max_len,
        max_len,
        dropout,
        False,
        False,
        scale=scaling,
        window_size_left=window,
        window_size_right=window,
    )[0]
    return out  # (T, H, D)


def flash_varlen_applies(query: torch.Tensor) -> bool:
    """CUDA, half precision and a head size the flash kernel takes."""
    dim = query.shape[-1]
    return query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and dim % 8 == 0 and dim <= 256


def packed_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`AttentionInterface` function: variable-length attention on packed batches, SDPA on padded ones.

    Shapes as transformers' attention functions: in `(B, H, T, D)`, out `(B, T, H, D)`; a packed batch's out is
    `(T, H, D)`, the row's tokens without the batch dimension of 1: every layer that calls this reshapes the output to
    `(*input_shape, -1)` = `(1, T, H * D)` (BERT, RoBERTa, ALBERT, ELECTRA, ModernBERT), so the output needs no
    `unsqueeze` (nor its gradient a `squeeze`) in every layer.
    """
    cu_seqlens = kwargs.get("cu_seq_lens_q")
    if cu_seqlens is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one row of tokens, got {query.shape[0]} rows")
    if is_causal or getattr(module, "is_causal", False):
        raise ValueError("sdpa_packed is bidirectional (encoder) attention only")
    max_len = kwargs.get("max_length_q")
    if max_len is None:
        max_len = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    cu_seqlens = cu_seqlens.to(query.device)
    # ModernBERT's local layers pass `sliding_window` in flash-attention's convention (transformers'
    # modeling_flash_attention_utils: window_size = sliding_window - 1 on each side, i.e. |i - j| <= sliding_window - 1).
    sliding_window = kwargs.get("sliding_window")
    window = None if sliding_window is None else int(sliding_window) - 1
    if flash_varlen_applies(query):
        return _flash_varlen(query, key, value, cu_seqlens, max_len, dropout, scaling, window), None
    slots, key_mask = kwargs.get("packed_slots"), kwargs.get("packed_key_mask")
    layout = None
    if kwargs.get("packed_index") is not None and kwargs.get("packed_key_bias") is not None:
        layout = (kwargs["packed_index"].to(query.device), kwargs["packed_key_bias"].to(query.device))
    out = _repad_sdpa(query, key, value, cu_seqlens, max_len, dropout, scaling, slots, key_mask, window, layout)
    return out, None


def head_size(config) -> int:
    """A config's attention head size."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def layout_keys_read(model: torch.nn.Module, device_type: str, half: bool) -> tuple[str, ...]:
    """The keys of the re-padded layout (`collators.flatten.REPAD_KEYS`) that `model`'s attention reads on
    `device_type`, `half` meaning bf16/fp16 autocast: none where every padding-free attention runs a varlen kernel
    (transformers' `flash_attention_*`; `sdpa_packed` on CUDA in half precision with a head size FlashAttention
    takes, `flash_varlen_applies`); else the slots, index and bias of `_repad_sdpa`, and the boolean key mask where
    a layer attends in a sliding window (ModernBERT's local layers). The collators make and the Trainer copies to the
    device only these."""
    keys: set[str] = set()
    for module in model.modules():
        if not isinstance(module, PreTrainedModel) or module.config._attn_implementation != PACKED_ATTENTION:
            continue
        dim = head_size(module.config)
        if device_type == "cuda" and half and dim % 8 == 0 and dim <= 256:
            continue  # `flash_varlen_applies`
        keys |= {"packed_slots", "packed_index", "packed_key_bias"}
        if getattr(module.config, "local_attention", None) or getattr(module.config, "sliding_window", None):
            keys.add("packed_key_mask")
    from ..collators.flatten import REPAD_KEYS

    return tuple(key for key in REPAD_KEYS if key in keys)


def register_packed_attention() -> str:
    """Register `sdpa_packed` (attention, and SDPA's mask for padded batches) with transformers; idempotent."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention_forward)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)
    return PACKED_ATTENTION


def flash_attention_available(device: torch.device | None = None) -> bool:
    """flash-attn installed and the run on CUDA: `device`, the run's (a `--use_cpu` run on a GPU machine is a CPU
    run); None: the machine's GPU, if any. flash-attn's kernels take CUDA tensors only."""
    on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    return on_cuda and importlib.util.find_spec("flash_attn") is not None


def default_attention(padding_free: bool, device: torch.device | None = None) -> str:
    """The fastest attention available on `device`: `flash_attention_2` when installed (CUDA), else SDPA
    (packed-aware)."""
    if flash_attention_available(device):
        return "flash_attention_2"
    return register_packed_attention() if padding_free else "sdpa"


def set_attention(model: torch.nn.Module, implementation: str) -> torch.nn.Module:
    """Use `implementation` in every transformers model inside `model` (ELECTRA's generator included)."""
    if implementation == PACKED_ATTENTION:
        register_packed_attention()
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.config._attn_implementation = implementation
    return model


def use_padding_free(model: torch.nn.Module, implementation: str | None = None, device=None) -> torch.nn.Module:
    """Make `model` accept padding-free batches: an attention implementation that reads `cu_seq_lens_q` (the
    fastest on `device`, the run's, unless `implementation` is named)."""
    implementation = implementation or default_attention(padding_free=True, device=device)
    if implementation not in PACKED_IMPLEMENTATIONS:
        raise ValueError(f"padding-free batches need one of {PACKED_IMPLEMENTATIONS}, not {implementation!r}")
    return set_attention(model, implementation)


__all__ = [
    "PACKED_ATTENTION",
    "default_attention",
    "layout_keys_read",
    "packed_attention_forward",
    "packed_key_mask",
    "register_packed_attention",
    "set_attention",
    "use_padding_free",
]
