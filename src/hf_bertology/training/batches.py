"""The batches a run feeds the model: padding-free or padded, and the attention kernel that reads them."""

from __future__ import annotations

from ..recipes.recipe import Recipe
from ..utils import BertologyError
from .arguments import DataArguments, ModelArguments
from .attention import configure_attention


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
