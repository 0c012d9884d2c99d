"""The batches a run feeds the model: padding-free or padded, the collator wrapped for them, and the attention kernel
that reads them (`attention.py` holds the kernels)."""

from __future__ import annotations

from ..recipes.recipe import Recipe
from ..utils import BertologyError
from .arguments import DataArguments, ModelArguments
from .attention import PACKED_IMPLEMENTATIONS, set_attention, use_padding_free


def configure_batches(
    recipe: Recipe, model, collator, model_args: ModelArguments, data_args: DataArguments, device=None
):  # fmt: skip
    """Padding-free batches (`--padding_free`, on for every recipe that supports them, except with `--streaming`)
    and the attention kernel that reads them (`--attn_implementation`, else the fastest on `device`, the run's);
    returns `(model, collator)`."""
    padding_free = data_args.padding_free
    if data_args.streaming:
        # accelerate dispatches a streamed batch by slicing every tensor along its first dimension, which a flat
        # row (one row; cu_seq_lens of B+1) does not survive
        if padding_free:
            raise BertologyError("--padding_free does not work with --streaming yet; pass --padding_free false")
        padding_free = False
    return configure_attention(
        model, collator, padding_free, model_args.attn_implementation, recipe.padding_free, data_args.streaming,
        device,
    )  # fmt: skip


def configure_attention(
    model, collator, padding_free: bool | None, implementation: str | None, supported: bool, streaming: bool = False,
    device=None,
):  # fmt: skip
    """The model and collator a run trains with: padding-free (flattened batches, a packed-aware attention) by
    default wherever the variant `supported` it, else padded with `implementation` if one was named. Either way
    the batches carry their labelled tokens' positions (`collators.flatten.add_target_positions`), except streamed
    ones (accelerate slices those across processes by rows).

    `padding_free=None` means "where it pays": every variant whose attention is transformers' `AttentionInterface`
    (not XLNet, DeBERTa-v3), unless `implementation` names a kernel that cannot read a flat row (`sdpa`,
    `eager`): then padded batches with that kernel. Returns `(model, collator)`.
    """
    from ..collators.flatten import PaddingFreeCollator, TargetPositionsCollator

    packs = implementation is None or implementation in PACKED_IMPLEMENTATIONS
    if padding_free and not supported:
        raise BertologyError(f"{type(model).__name__} cannot take padding-free batches; pass --padding_free false")
    if padding_free and not packs:
        raise BertologyError(
            f"padding-free batches need --attn_implementation in {PACKED_IMPLEMENTATIONS}, not {implementation!r}; "
            "or pass --padding_free false"
        )
    if padding_free is None:
        padding_free = supported and packs
    if padding_free:
        return use_padding_free(model, implementation, device), PaddingFreeCollator(collator)
    if implementation:
        set_attention(model, implementation)
    return model, collator if streaming else TargetPositionsCollator(collator)
