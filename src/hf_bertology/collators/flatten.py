"""Padding-free batches: every example of a padded batch laid end to end in one row of real tokens.

`flatten_batch` turns a padded `(B, L)` batch into one `(1, T)` row of its T real tokens: `position_ids` restart in
every example (every document, for rows of packed documents that carry `document_starts`), the boundaries go into
`cu_seq_lens_q/k` and `max_length_q/k` (the keywords of transformers' variable-length attention, which keeps
attention inside each unit: `training.attention`), positions inside a row (`sbo_boundaries`) are shifted by their
example's offset, per-example keys (`next_sentence_label`) stay `(B,)` and `attention_mask` becomes ones, so the
Trainer's counts are the padded batch's. `PaddingFreeCollator` wraps a padded collator (the same draws) and
flattens; it and `TargetPositionsCollator` (padded batches) add `target_positions` and `sbo_target_positions`, the
flat indices of the labelled tokens, computed on the host so that no sparse head syncs with the device. Why, and
what it saves: docs/speed.md ("Padding-free batches") and docs/internals.md ("No host sync in a training step").
"""

from __future__ import annotations

from typing import Any

import torch

from .base import CollatorWrapper

# Keys whose values are positions inside a row; flattened, they move by the example's offset in the flat row.
POSITION_KEYS = ("sbo_boundaries",)
# Label keys -> the key of their labelled tokens' flat indices (module docstring, "Target positions").
TARGET_POSITIONS = {"labels": "target_positions", "sbo_labels": "sbo_target_positions"}
# The re-padded layout the CPU's attention reads (`training.attention`), made once per batch here; a run whose
# attention runs a varlen kernel reads none of them (`training.attention.layout_keys_read`): they are not made.
REPAD_KEYS = ("packed_slots", "packed_index", "packed_key_bias", "packed_key_mask")
# Keys that cannot be flattened (XLNet's permutation inputs are (B, L, L) / (B, P, L) by construction).
UNFLATTENABLE = ("perm_mask", "target_mapping")


def flatten_batch(batch: dict[str, torch.Tensor], layout_keys: tuple[str, ...] = REPAD_KEYS) -> dict[str, Any]:
    """A right-padded batch (`attention_mask` `(B, L)`) as one padding-free row (module docstring), with the keys
    of the re-padded layout named in `layout_keys` (`REPAD_KEYS`)."""
    if "attention_mask" not in batch:
        raise ValueError("flatten_batch needs the batch's attention_mask to know which tokens are real")
    for key in UNFLATTENABLE:
        if key in batch:
            raise ValueError(f"a batch with {key!r} (XLNet's permutation LM) cannot be flattened; keep it padded")
    real = batch["attention_mask"].bool()  # (B, L)
    rows, width = real.shape
    lengths = real.sum(1)  # (B,)
    if not torch.equal(real, torch.arange(width) < lengths[:, None]):
        raise ValueError("flatten_batch expects right padding (real tokens first in every row)")
    cu_seqlens = torch.zeros(rows + 1, dtype=torch.int32)
    cu_seqlens[1:] = lengths.cumsum(0)
    longest = int(lengths.max())
    # One index of the real tokens in the (B * L) layout, shared by every key: `index_select` with it is several
    # times faster than a boolean index per key (each of which finds the real tokens again).
    index = real.view(-1).nonzero().squeeze(1)  # (T,)
    row = index.div(width, rounding_mode="floor")
    positions = index - row * width  # (T,) restart at 0 in every example

    flat: dict[str, Any] = {}
    for key, value in batch.items():
        if key == "attention_mask" or key in TARGET_POSITIONS.values():  # target positions: recomputed below
            continue
        if torch.is_tensor(value) and value.dim() >= 2 and value.shape[:2] == (rows, width):
            value = value.reshape(rows * width, *value.shape[2:]).index_select(0, index)  # (T, ...)
            if key in POSITION_KEYS:  # row positions -> flat positions: add the example's offset in the flat row
                offsets = torch.arange(len(index)) - positions  # (T,)
                value = value + offsets.view(-1, *([1] * (value.dim() - 1)))
            flat[key] = value.unsqueeze(0)  # (1, T, ...)
        else:
            flat[key] = value  # per-example keys: (B,), kept
    starts = flat.pop("document_starts", None)
    if starts is not None:  # packed documents: the units are the documents of every row
        flat.update(varlen_keys(starts[0].bool() | _row_starts(lengths), layout_keys))
    else:
        flat["position_ids"] = positions.unsqueeze(0)  # (1, T)
        flat["cu_seq_lens_q"] = flat["cu_seq_lens_k"] = cu_seqlens
        flat["max_length_q"] = flat["max_length_k"] = longest
        # Where each token sits in a (B, longest) layout and which keys are real there, for attention kernels
        # without variable lengths (the CPU): computed here once per batch rather than in every layer (and
        # `bucketize` does not compile on every torch).
        key_mask = torch.arange(longest)[None, :] < lengths[:, None]  # (B, longest): the real keys
        flat.update(repad_layout(row * longest + positions, key_mask, layout_keys))
    flat["attention_mask"] = torch.ones_like(flat["position_ids"])  # counts only: every token is real
    if any(key in batch for key in TARGET_POSITIONS.values()):  # they index the padded layout: index the flat one
        add_target_positions(flat)
    return flat


def _row_starts(lengths: torch.Tensor) -> torch.Tensor:
    """`(T,)` bool: True at the first token of every row of the flat batch (a row always starts a unit)."""
    starts = torch.zeros(int(lengths.sum()), dtype=torch.bool)
    starts[(lengths.cumsum(0) - lengths)[lengths > 0]] = True
    return starts


def varlen_keys(starts: torch.Tensor, layout_keys: tuple[str, ...] = REPAD_KEYS) -> dict[str, Any]:
    """The variable-length keys of a flat row whose units begin where `starts` (`(T,)` bool) is True (those of the
    re-padded layout named in `layout_keys`)."""
    total = starts.numel()
    begin = starts.nonzero().squeeze(1)  # (D,) first token of every document
    cu_seqlens = torch.cat([begin, torch.tensor([total])]).to(torch.int32)
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    document = torch.repeat_interleave(torch.arange(len(begin)), lengths)  # (T,)
    positions = torch.arange(total) - begin[document]  # restart at 0 in every document
    longest = int(lengths.max())
    slots, key_mask = document * longest + positions, torch.arange(longest)[None, :] < lengths[:, None]
    return {
        "position_ids": positions.unsqueeze(0),
        "cu_seq_lens_q": cu_seqlens,
        "cu_seq_lens_k": cu_seqlens,
        "max_length_q": longest,
        "max_length_k": longest,
        **repad_layout(slots, key_mask, layout_keys),  # key mask (D, longest): the real keys
    }


def repad_layout(
    slots: torch.Tensor, key_mask: torch.Tensor, layout_keys: tuple[str, ...] = REPAD_KEYS
) -> dict[str, torch.Tensor]:
    """What the re-padded attention (the CPU's, `training.attention`) needs, made once per batch here rather than in
    every layer, restricted to `layout_keys`: each token's slot `row * longest + column` (`packed_slots`, `(T,)`)
    and its `(example, column)` (`packed_index`, `(2, T)`: one index reads the attention's output back), the
    keys' additive mask (`packed_key_bias`, `(B, 1, 1, longest)`: 0 at real keys, -inf elsewhere, which SDPA adds
    as it is instead of converting a boolean mask in every layer) and the boolean one (`packed_key_mask`,
    `(B, longest)`, which a sliding window combines with)."""
    out = {}
    if "packed_slots" in layout_keys:
        out["packed_slots"] = slots
    if "packed_key_mask" in layout_keys:
        out["packed_key_mask"] = key_mask
    if "packed_index" in layout_keys:
        width = key_mask.shape[1]
        out["packed_index"] = torch.stack((slots // width, slots % width))
    if "packed_key_bias" in layout_keys:
        bias = torch.zeros(key_mask.shape).masked_fill_(~key_mask, float("-inf"))
        out["packed_key_bias"] = bias[:, None, None, :]
    return out


def add_target_positions(batch: dict[str, Any]) -> dict[str, Any]:
    """`batch` with the flat indices of every label key's labelled tokens (module docstring, "Target positions")."""
    for key, name in TARGET_POSITIONS.items():
        labels = batch.get(key)
        if torch.is_tensor(labels):
            batch[name] = labels.flatten().ne(-100).nonzero().squeeze(1)
    return batch


class TargetPositionsCollator(CollatorWrapper):
    """Wraps one of our collators: its padded batch, plus the labelled tokens' flat indices (`add_target_positions`).

    Not for streamed batches that accelerate dispatches across processes: it slices every tensor along its first
    dimension, which flat indices do not survive.
    """

    def __call__(self, features):
        return add_target_positions(self.collator(features))


class PaddingFreeCollator(TargetPositionsCollator):
    """Wraps one of our collators: it collates (and masks) a padded batch as always, then `flatten_batch`, then
    `add_target_positions`.

    `collator = PaddingFreeCollator(recipe.build_collator(tokenizer))`; the model needs an attention
    implementation that reads `cu_seq_lens_q` (`hf_bertology.training.attention.use_padding_free(model)`).
    `layout_keys`: the re-padded layout's keys the run's attention reads (default all; `run_trainer.build_trainer`
    sets those of the run, none on CUDA's varlen kernels).
    """

    def __init__(self, collator, layout_keys: tuple[str, ...] = REPAD_KEYS):
        super().__init__(collator)
        self.layout_keys = layout_keys

    def __call__(self, features):
        return add_target_positions(flatten_batch(self.collator(features), self.layout_keys))


__all__ = [
    "REPAD_KEYS",
    "TARGET_POSITIONS",
    "TargetPositionsCollator",
    "PaddingFreeCollator",
    "add_target_positions",
    "flatten_batch",
]
