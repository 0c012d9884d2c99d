"""Fixed-shape token-budget batches: every training step has the same tensor shapes.

A step is a token budget (`TokenBudget`: `rows` bins of `row_length` slots, one `(1, T)` row laid out as
`flatten_batch` lays a padding-free batch out) instead of a number of examples, so a compiled step never recompiles
and can be replayed as a CUDA graph. `TokenBudgetBatchSampler` fills the bins with whole examples by best-fit
decreasing packing (`best_fit`) over a look-ahead pool of the shuffled order; `FixedShapeCollator` masks the padded
batch of those examples as the wrapped collator does (the same draws), keeps the sampler's order (`next_fit`) and
pads every varying count to a fixed one: filler segments at the end of each bin, empty segments up to
`max_sequences`, target positions up to `max_targets` with the last slot (always a filler, label -100). The
Trainer's counts, the losses and the gradients stay those of the padded batch. How the budget is chosen, the
padding waste and when the flag pays: docs/speed.md ("Fixed-shape token-budget steps").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..utils import logger
from .base import CollatorWrapper
from .flatten import (
    POSITION_KEYS,
    REPAD_KEYS,
    TARGET_POSITIONS,
    UNFLATTENABLE,
    add_target_positions,
    flatten_batch,
    repad_layout,
)

# Keys of a padded batch that are per token but not labels: their filler value.
_LABEL_FILL = -100


class DoesNotFit(ValueError):
    """The examples of a batch do not fit the token budget."""


def _round_up(value: float, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


@dataclass
class TokenBudget:
    """The fixed shape of every step (module docstring)."""

    rows: int
    row_length: int
    max_length: int  # the longest example (and filler segment): `max_length_q`, the re-padded width on CPU
    max_sequences: int  # segments per step, real examples plus fillers plus empty ones: `len(cu_seq_lens_q) - 1`
    max_targets: int  # entries of every `*target_positions`
    target_fraction: float = 0.15  # labelled share of the real tokens, for growing `max_targets` (logged)

    def __post_init__(self):
        if self.row_length < self.max_length:
            raise ValueError(f"row_length {self.row_length} is shorter than the longest example {self.max_length}")
        if self.max_sequences < self.rows * math.ceil(self.row_length / self.max_length) + 1:
            raise ValueError("max_sequences leaves no room for an example next to the fillers")

    @property
    def slots(self) -> int:
        return self.rows * self.row_length

    @property
    def fillers_per_row(self) -> int:
        return math.ceil(self.row_length / self.max_length)

    @property
    def max_examples(self) -> int:
        """Examples a step may hold: the segments left once every row may need its fillers."""
        return self.max_sequences - self.rows * self.fillers_per_row

    @classmethod
    def for_lengths(
        cls,
        lengths: Sequence[int],
        batch_size: int,
        max_seq_length: int,
        rows_per_example_length: int = 4,
        target_fraction: float = 0.15,
    ) -> TokenBudget:
        """The budget for a dataset with these example lengths (module docstring, "How the budget is chosen").

        `rows_per_example_length`: a row holds this many longest examples; longer rows pack better (fewer bin ends),
        and on a GPU any row length costs the same (varlen attention never crosses a segment).
        """
        lengths = np.asarray(lengths)
        mean = float(lengths.mean()) if len(lengths) else float(max_seq_length)
        row_length = rows_per_example_length * max_seq_length
        slots = batch_size * mean
        rows = max(1, math.ceil(slots / row_length))
        examples = rows * row_length / mean
        fillers = rows * math.ceil(row_length / max_seq_length)
        labelled = rows * row_length * target_fraction
        return cls(
            rows=rows,
            row_length=row_length,
            max_length=max_seq_length,
            max_sequences=_round_up(2 * examples + fillers + 1, 8),
            max_targets=_round_up(labelled + 6 * math.sqrt(labelled) + 16, 64),
            target_fraction=target_fraction,
        )


def best_fit(lengths: Sequence[int], budget: TokenBudget) -> tuple[list[list[int]], list[int]]:
    """Best-fit decreasing: `(bins, rest)`, the indices of `lengths` placed in each of `budget.rows` bins (in
    decreasing length) and those left out. The last slot of the last bin is kept free (the padded targets' index),
    and at most `budget.max_examples` are placed. Deterministic: ties keep the input order."""
    free = [budget.row_length] * budget.rows
    free[-1] -= 1
    bins: list[list[int]] = [[] for _ in range(budget.rows)]
    rest: list[int] = []
    placed = 0
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[index]
        if length > budget.max_length:
            raise ValueError(f"an example of {length} tokens exceeds the budget's max_length {budget.max_length}")
        best = -1
        if placed < budget.max_examples:
            for row, room in enumerate(free):
                if length <= room and (best < 0 or room < free[best]):
                    best = row
        if best < 0:
            rest.append(index)
            continue
        free[best] -= length
        bins[best].append(index)
        placed += 1
    return bins, rest


class TokenBudgetBatchSampler(torch.utils.data.Sampler):
    """Batches of dataset indices that fill a `TokenBudget` (best-fit decreasing over a look-ahead pool).

    The order is a seeded permutation per epoch (`set_epoch`), read in order into a pool of `pool_steps` steps'
    worth of examples; each step takes the pool's best fit, and the examples left wait for a later step (short ones
    fill the ends of bins). The last steps of an epoch empty the pool. A step never holds more than
    `budget.max_examples` examples or more tokens than the budget. For one process of `num_replicas`, every process
    plans the same steps (one seed) and takes every `num_replicas`-th, the epoch cut to a multiple of `num_replicas`
    so all take as many.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        budget: TokenBudget,
        shuffle: bool = True,
        seed: int = 0,
        pool_steps: int = 4,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.num_replicas, self.rank = num_replicas, rank
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.budget = budget
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.pool_size = max(1, int(pool_steps * budget.slots / max(1.0, float(self.lengths.mean()))))
        self._batches: list[list[int]] | None = None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self._batches = epoch, None

    def _plan(self) -> list[list[int]]:
        if self._batches is None:
            n = len(self.lengths)
            order = np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else np.arange(n)
            batches, pool, cursor = [], [], 0
            while cursor < n or pool:
                take = min(n, cursor + self.pool_size - len(pool))
                pool.extend(order[cursor:take].tolist())
                cursor = take
                rows = self.rows_at(len(batches))
                budget = self.budget if rows == self.budget.rows else dataclasses.replace(self.budget, rows=rows)
                bins, rest = best_fit([int(self.lengths[i]) for i in pool], budget)
                chosen = [pool[i] for row in bins for i in row]
                if not chosen:
                    raise ValueError("an example does not fit the token budget")
                batches.append(chosen)  # row by row: `lay_out` keeps this order (`next_fit`)
                pool = [pool[i] for i in sorted(rest)]
            self._batches = batches
        return self._batches

    def rows_at(self, index: int) -> int:
        """The budget's rows step `index` of this epoch may fill (all; fewer under a batch-size warmup, the shape
        staying the budget's)."""
        return self.budget.rows

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._plan()
        usable = len(batches) - len(batches) % self.num_replicas
        yield from batches[self.rank : usable : self.num_replicas]

    def __len__(self) -> int:
        return len(self._plan()) // self.num_replicas


def next_fit(lengths: Sequence[int], budget: TokenBudget) -> list[list[int]] | None:
    """The examples in their order, each row filled until the next one does not fit (`None` if they need more rows
    than the budget has). For a sequence that `best_fit`'s rows hold, read row by row (the sampler's order), this
    always succeeds: greedy filling is optimal among order-keeping placements. Keeping the order keeps everything a
    model draws per target (ELECTRA's samples) in the padded batch's order."""
    bins: list[list[int]] = [[] for _ in range(budget.rows)]
    row, room = 0, budget.row_length - (budget.rows == 1)
    for index, length in enumerate(lengths):
        while length > room:
            row += 1
            if row == budget.rows:
                return None
            room = budget.row_length - (row == budget.rows - 1)  # the last slot stays free
        bins[row].append(index)
        room -= length
    return bins


def lay_out(
    batch: dict[str, torch.Tensor], budget: TokenBudget, layout_keys: tuple[str, ...] = REPAD_KEYS
) -> dict[str, torch.Tensor]:
    """A right-padded batch (`attention_mask` `(B, L)`) of examples that fit `budget`, as the fixed-shape row
    (module docstring), with the re-padded layout's keys named in `layout_keys`. Raises `ValueError` when they do
    not fit."""
    if "attention_mask" not in batch:
        raise ValueError("lay_out needs the batch's attention_mask to know which tokens are real")
    for key in UNFLATTENABLE:
        if key in batch:
            raise ValueError(f"a batch with {key!r} (XLNet's permutation LM) cannot be packed; keep it padded")
    real = batch["attention_mask"].bool()
    count, width = real.shape
    lengths = real.sum(1).tolist()
    bins, rest = next_fit(lengths, budget), []
    if bins is None:  # not in a sampler's order: place them best-fit (the examples' order then changes)
        bins, rest = best_fit(lengths, budget)
    if rest:
        raise DoesNotFit(
            f"{len(rest)} of {count} examples do not fit the token budget ({budget.rows} x {budget.row_length}); "
            "batch them with TokenBudgetBatchSampler"
        )
    # segments in flat order: (example or -1 for a filler, start, length)
    segments: list[tuple[int, int, int]] = []
    for row, members in enumerate(bins):
        start = row * budget.row_length
        for example in members:
            segments.append((example, start, lengths[example]))
            start += lengths[example]
        end = (row + 1) * budget.row_length
        while start < end:
            piece = min(budget.max_length, end - start)
            segments.append((-1, start, piece))
            start += piece
    empty = budget.max_sequences - len(segments)
    if empty < 0:  # best_fit caps the examples, so only a too-small max_sequences gets here
        raise ValueError(f"{len(segments)} segments exceed max_sequences={budget.max_sequences}")
    seg_example = torch.tensor([-1] * empty + [s[0] for s in segments])
    seg_start = torch.tensor([0] * empty + [s[1] for s in segments])
    seg_length = torch.tensor([0] * empty + [s[2] for s in segments])
    cu_seqlens = torch.zeros(budget.max_sequences + 1, dtype=torch.int32)
    cu_seqlens[1:] = seg_length.cumsum(0)

    # every slot: its segment and its position in it
    slot_segment = torch.repeat_interleave(torch.arange(budget.max_sequences), seg_length)  # (T,)
    slot_position = torch.arange(budget.slots) - seg_start[slot_segment]
    # where each real token of the padded batch goes: its example's segment start + its column
    is_example = seg_example >= 0
    example_start = torch.empty(count, dtype=torch.long)
    example_start[seg_example[is_example]] = seg_start[is_example]
    rows_of, cols_of = real.nonzero(as_tuple=True)
    destination = example_start[rows_of] + cols_of  # (N real,)

    out: dict[str, torch.Tensor] = {}
    for key, value in batch.items():
        if key == "attention_mask" or key in TARGET_POSITIONS.values():
            continue
        if torch.is_tensor(value) and value.dim() >= 2 and value.shape[:2] == (count, width):
            fill = _LABEL_FILL if "label" in key else 0
            flat = value.new_full((budget.slots, *value.shape[2:]), fill)
            tokens = value[real]
            if key in POSITION_KEYS:  # positions in the padded row -> positions in the flat row
                tokens = tokens + example_start[rows_of].view(-1, *([1] * (tokens.dim() - 1)))
            flat[destination] = tokens
            out[key] = flat.unsqueeze(0)
        elif torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == count:  # per example
            per_segment = value.new_full((budget.max_sequences, *value.shape[1:]), _LABEL_FILL)
            per_segment[is_example] = value[seg_example[is_example]]
            out[key] = per_segment
        else:
            out[key] = value
    mask = torch.zeros(budget.slots, dtype=batch["attention_mask"].dtype)
    mask[destination] = 1
    out["attention_mask"] = mask.unsqueeze(0)
    out["position_ids"] = slot_position.unsqueeze(0)
    out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = cu_seqlens
    out["max_length_q"] = out["max_length_k"] = budget.max_length
    if layout_keys:  # for the CPU's re-padded attention
        columns = torch.arange(budget.max_length)[None, :]
        # an empty segment keeps one (zero, never gathered) key: a row with none would be NaN (`packed_key_mask`)
        key_mask = (columns < seg_length[:, None]) | (columns == 0)
        out.update(repad_layout(slot_segment * budget.max_length + slot_position, key_mask, layout_keys))
    add_fixed_target_positions(out, budget)
    return out


def add_fixed_target_positions(batch: dict[str, torch.Tensor], budget) -> dict[str, torch.Tensor]:
    """Each label key's labelled flat indices, padded to `budget.max_targets` with the labels' last slot labelled
    -100 (the last filler; in `pad_statically` the padding row's last slot, or XLNet's last unused target row).
    Grows `budget.max_targets` when a step has more (logged: a compiled step recompiles once)."""
    for key, name in TARGET_POSITIONS.items():
        labels = batch.get(key)
        if not torch.is_tensor(labels):
            continue
        positions = labels.flatten().ne(_LABEL_FILL).nonzero().squeeze(1)
        if positions.numel() > budget.max_targets:
            grown = _round_up(positions.numel() * 1.25, 64)
            logger.warning(
                f"{positions.numel()} targets exceed max_targets={budget.max_targets}; growing to {grown} "
                "(a compiled step recompiles once)"
            )
            budget.max_targets = grown
        ignored = labels.flatten().eq(_LABEL_FILL).nonzero()  # none only where every entry is a real target
        padded = torch.full((budget.max_targets,), int(ignored[-1]) if len(ignored) else 0, dtype=torch.long)
        padded[: positions.numel()] = positions
        batch[name] = padded
    return batch


class FixedShapeCollator(CollatorWrapper):
    """Wraps one of our collators: it collates (and masks) the padded batch of a step's examples as always, then
    `lay_out` gives the fixed-shape row. Use with `TokenBudgetBatchSampler(lengths, budget)` so every step's
    examples fit; the model needs a packed-aware attention (`training.attention.use_padding_free`).
    `layout_keys`: as `flatten.PaddingFreeCollator`'s."""

    def __init__(self, collator, budget: TokenBudget, layout_keys: tuple[str, ...] = REPAD_KEYS):
        super().__init__(collator)
        self.budget, self.layout_keys = budget, layout_keys

    def __call__(self, features):
        batch = self.collator(features)
        try:
            return lay_out(batch, self.budget, self.layout_keys)
        except DoesNotFit:  # a batch the sampler did not make (evaluation): the padding-free layout
            return add_target_positions(flatten_batch(batch, self.layout_keys))


def _padding_value(key: str, pad_token_id: int) -> int:
    """A padding row's value of a key: ignored labels, no attention, the pad token, zeros elsewhere."""
    if "label" in key:
        return _LABEL_FILL
    return pad_token_id if key == "input_ids" else 0


@dataclass
class StaticShape:
    """The fixed shape of every padded step: `rows` examples plus one padding row, each `width` tokens wide, and
    `max_targets` entries in every `*target_positions` (None: set from the first batch's labels)."""

    rows: int
    width: int
    max_targets: int | None = None


def static_target_cap(collator, rows: int, labels_width: int, width: int) -> int:
    """Target positions a step of `rows` full rows can have, by the collator's own count rule: `rows` times the
    per-sequence count at `width` (`num_to_predict`: `min(max_predictions_per_seq, max(1, round(width * rate)))`,
    the prediction caps' rule), or every label slot where the targets have rows of their own (XLNet's `num_predict`
    rows). A draw without a count (`masking_draw="bernoulli"`) gets the token budget's margin
    (`TokenBudget.for_lengths`) and grows if exceeded."""
    if labels_width != width:
        return rows * labels_width
    count = getattr(collator, "num_to_predict", None)
    if count is not None and getattr(collator, "masking_draw", None) != "bernoulli":
        full = torch.tensor([width])
        return rows * int(count(full, full))
    labelled = rows * width * getattr(collator, "mlm_probability", 0.15)
    return _round_up(labelled + 6 * math.sqrt(labelled) + 16, 64)


def pad_statically(batch: dict[str, torch.Tensor], shape: StaticShape, pad_token_id: int, collator=None) -> dict:
    """A padded batch of at most `shape.rows` examples, each `shape.width` wide (the collator padded them there), as
    the static step: padding rows up to `shape.rows + 1` (labels -100, attention mask 0, the pad token), and every
    label key's target positions padded to `shape.max_targets` with the last padding row's last slot
    (`add_fixed_target_positions`). So the padded targets, and whatever the replacement sampling writes at them,
    land in a row no real token attends to. Labels in rows of their own (XLNet's `(B, num_predict)`: nothing is
    written into the input at a target) need no padding row: rows up to `shape.rows`, padded targets at an unused
    target row. Raises `ValueError` on a batch wider than `shape.width`."""
    count, width = batch["attention_mask"].shape
    if width != shape.width:
        raise ValueError(f"a batch {width} tokens wide, not the static width {shape.width}")
    own_rows = batch["labels"].shape[1] != width
    rows = max(shape.rows, count) + (not own_rows)  # one padding row: the padded targets' slot
    out: dict[str, torch.Tensor] = {}
    for key, value in batch.items():
        if key in TARGET_POSITIONS.values():
            continue
        if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == count:
            extra = value.new_full((rows - count, *value.shape[1:]), _padding_value(key, pad_token_id))
            value = torch.cat([value, extra])
        out[key] = value
    if shape.max_targets is None:
        labels = out["labels"]
        shape.max_targets = static_target_cap(collator, shape.rows, labels.shape[1], width)
    return add_fixed_target_positions(out, shape)


class StaticPaddedCollator(CollatorWrapper):
    """Wraps one of our padded collators (XLNet's, DeBERTa-v3's: batches that cannot be packed) so that every
    training step has one shape (`pad_statically`): the collator pads every example to `shape.width` (its
    `pad_to_multiple_of`; left or right as it pads), then the padding rows and padded target positions. The masks
    and draws are the collator's at that width; the losses and gradients are the batch's own (the padding row's
    labels are -100 and its attention mask 0). Evaluation batches get the same treatment."""

    def __init__(self, collator, shape: StaticShape):
        if not hasattr(collator, "pad_to_multiple_of"):
            raise ValueError(f"{type(collator).__name__} cannot pad to a fixed width")
        collator = dataclasses.replace(collator, pad_to_multiple_of=shape.width)
        super().__init__(collator)
        self.shape = shape

    def __call__(self, features):
        batch = self.collator(features)
        return pad_statically(batch, self.shape, self.collator.tokenizer.pad_token_id, self.collator)


def padding_waste(batches: Sequence[Sequence[int]], lengths: Sequence[int], budget: TokenBudget) -> float:
    """Computed slots / real tokens over these batches (every step computes `budget.slots` slots)."""
    lengths = np.asarray(lengths)
    real = sum(int(lengths[list(b)].sum()) for b in batches)
    return len(batches) * budget.slots / real


__all__ = [
    "DoesNotFit",
    "FixedShapeCollator",
    "StaticPaddedCollator",
    "StaticShape",
    "TokenBudget",
    "TokenBudgetBatchSampler",
    "add_fixed_target_positions",
    "best_fit",
    "lay_out",
    "next_fit",
    "pad_statically",
    "padding_waste",
    "static_target_cap",
]
