"""Permutation language modelling for XLNet: span targets, factorisation order, `perm_mask`, `target_mapping`.

Follows zihangdai/xlnet `data_utils.py` (`_sample_mask`, `_local_perm`) and the parser in `create_tfrecords`, not
transformers' `DataCollatorForPermutationLanguageModeling` (docs/recipes/xlnet.md says how that one differs).
Per sequence, vectorised over the batch (no Python loop over positions):

1. **Targets** (`_sample_mask`): spans of n whole words, p(n) ∝ 1/n, one in each context of `n * alpha / beta`
   words; exactly `min(num_predict, max(1, round(num_real_tokens * beta / alpha)))` targets, topped up with words.
2. **Order** (`_local_perm`): a random rank for the targets and `<sep>`/`<cls>`, in blocks of `perm_size`; the first
   `reuse_len` real tokens come before the rest and never attend to it.
3. **Masks**: `perm_mask[b, i, j] = 1` when i may NOT attend to j; padding is never attended and never a target.

`input_ids` keep the real tokens; `target_mapping` has one one-hot row per target, `labels` the targets in the same
rows (-100 in padded rows). Any length works; batches are left-padded. The rules in full: docs/recipes/xlnet.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError
from .base import (
    Draws,
    ExampleSeeded,
    RandomSource,
    WordStartLookup,
    id_table,
    pad_features,
    prediction_inputs,
    require_tokens,
    special_ids,
)

# Keys of the features that are bookkeeping for the data order, not model inputs.
DROPPED_KEYS = ("stream_position",)
# Streams of `Draws`, drawn per word, span or position index so that a row's draws do not depend on its batch.
SPAN_LENGTH, SPAN_OFFSET, SPAN_ORDER, TOP_UP, FACTORISATION = 1, 2, 3, 4, 5


def as_draws(randomness: Draws | torch.Generator | None, rows: int) -> Draws:
    """`Draws` as they are; a torch generator (or None: the global one) gives fresh keys."""
    return randomness if isinstance(randomness, Draws) else Draws.fresh(rows, randomness)


def segment_words(candidates: torch.Tensor, word_starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidates' whole words: `word_index` `(B, L)` (-1 before the first word) and `word_len` `(B, W)`.

    A word starts at a word start, after a non-candidate (a word never continues across specials or padding) and
    at a row's first token (a reuse part cut from the stream may open mid-word).
    """
    starts = word_starts & candidates
    starts[:, 1:] |= candidates[:, 1:] & ~candidates[:, :-1]
    starts[:, 0] |= candidates[:, 0]
    word_index = starts.long().cumsum(1) - 1  # (B, L)
    num_words = max(1, int(word_index[:, -1].max()) + 1)
    word_len = torch.zeros(candidates.shape[0], num_words, dtype=torch.long)
    word_len.scatter_add_(1, word_index.clamp(min=0), candidates.long())  # (B, W)
    return word_index, word_len


def sample_spans(
    num_words: torch.Tensor,
    width: int,
    context_ratio: float,
    max_span_length: int,
    randomness: Draws | torch.Generator | None = None,
) -> torch.Tensor:
    """XLNet's span sampling (`_sample_mask`) over whole words: `(B, width)` span id of each word, -1 if none.

    Each row's `num_words` words are cut into consecutive contexts of `floor(n * context_ratio)` words
    (n ~ p(n) ∝ 1/n, n = 1..max_span_length), each holding one span of n words at a uniform offset, so about
    1 / context_ratio of the words are targets. Context s draws its length and offset from counter s.
    """
    batch = num_words.shape[0]
    draws = as_draws(randomness, batch)
    num_spans = width // max(1, int(context_ratio)) + 2  # enough contexts to cover every word
    lengths = torch.arange(1, max_span_length + 1, dtype=torch.float64)
    cdf = (1.0 / lengths).cumsum(0) / (1.0 / lengths).sum()
    uniform = draws.uniform(SPAN_LENGTH, num_spans)
    span_len = torch.searchsorted(cdf, uniform).clamp(max=max_span_length - 1) + 1  # (B, S) words per span
    context = (span_len.double() * context_ratio).floor().long().clamp(min=1)
    span_len = torch.minimum(span_len, context)
    offset = draws.integers(SPAN_OFFSET, num_spans, context - span_len + 1)
    context_end = context.cumsum(1)  # (B, S)
    span_start = context_end - context + offset
    # difference array over words: +1 where a span starts, -1 where it ends
    edges = torch.zeros(batch, width + 1, dtype=torch.long)
    edges.scatter_add_(1, span_start.clamp(max=width), torch.ones_like(span_start))
    edges.scatter_add_(1, (span_start + span_len).clamp(max=width), -torch.ones_like(span_start))
    words = torch.arange(width).expand(batch, width)
    is_target = (edges.cumsum(1)[:, :width] > 0) & (words < num_words[:, None])  # (B, W)
    span_id = torch.searchsorted(context_end, words.contiguous(), right=True)  # (B, W) the context of each word
    return torch.where(is_target, span_id, -1)


def top_up_words(
    word_len: torch.Tensor, chosen: torch.Tensor, missing: torch.Tensor, randomness: Draws | torch.Generator | None
) -> torch.Tensor:
    """`(B, W)` bool: random words not yet `chosen` whose lengths add up to each row's `missing` token count.

    Greedy in a random order: each word is taken if it still fits, so the count falls short only when no free word
    is short enough. `missing` is small (what the kept spans leave of the budget), so the random order is the
    `topk` of a few random scores, and the greedy pass loops over those few columns, not over positions: the first
    `missing + 8` words of a row's order (its own count, so that the batch's other rows change nothing).
    """
    batch, width = word_len.shape
    draws = as_draws(randomness, batch)
    eligible = (word_len > 0) & ~chosen & (word_len <= missing[:, None])
    scores = torch.where(eligible, draws.uniform(TOP_UP, width), -1.0)
    best, words = scores.topk(min(width, int(missing.max()) + 8), dim=1)  # (B, k) words in random order
    # (B, k); ineligible words, and those past a row's own `missing + 8`, never fit
    own = torch.arange(words.shape[1]) < (missing + 8)[:, None]
    sizes = torch.where((best >= 0) & own, word_len.gather(1, words), missing.max() + 1)
    take = torch.zeros_like(sizes, dtype=torch.bool)
    remaining = missing.clone()
    for column in range(sizes.shape[1]):  # a few columns: greedy, word by word
        fits = sizes[:, column] <= remaining
        take[:, column] = fits
        remaining -= sizes[:, column] * fits
    return torch.zeros(batch, width, dtype=torch.bool).scatter_(1, words, take)


@dataclass
class DataCollatorForPermutationLM(WordStartLookup, ExampleSeeded):
    """Pads features and builds XLNet's permutation-LM inputs: `perm_mask`, `target_mapping`, `labels`.

    Expected statistics: per sequence, exactly `min(num_predict, max(1, round(num_real_tokens / K)))` targets
    (K = `mask_alpha / mask_beta` = 6; fewer by less than one word when no remaining word fits), all of them whole
    words, most in spans of 1-5 words (mean 2.19 words); `<sep>`, `<cls>`, other special tokens and padding are never
    targets. A new choice and order are drawn on every call, or, for features with an `example_id`, as a pure
    function of (seed, epoch, example id, position) (`RandomSource`).

    Input features: dicts with `input_ids` (XLNet's layout `A <sep> B <sep> <cls>`, specials included) and optionally
    `token_type_ids` (0/1/2), `word_starts`, `special_tokens_mask`, and per-example scalars that are passed through.
    Output: `input_ids` (unchanged), `token_type_ids`, `attention_mask`, `perm_mask` `(B, L, L)` bool (True: may
    not attend; `XLNetModel` takes it as it is, and it is 4x smaller than float), `target_mapping` `(B, P, L)`
    float, `labels` `(B, P)`, with P = `num_predict` (or the batch's largest count).
    """

    tokenizer: PreTrainedTokenizerBase
    mask_alpha: float = 6
    mask_beta: float = 1
    max_span_length: int = 5
    num_predict: int | None = 85
    perm_size: int | None = None
    reuse_len: int = 0
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    return_tensors: str = "pt"
    _random: RandomSource = field(init=False, repr=False)

    def __post_init__(self):
        require_tokens(self.tokenizer, "pad")
        if not 0 < self.mask_beta < self.mask_alpha:
            raise ValueError(f"need 0 < mask_beta < mask_alpha, got {self.mask_beta} and {self.mask_alpha}")
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be >= 1, got {self.max_span_length}")
        if self.num_predict is not None and self.num_predict < 1:
            raise ValueError(f"num_predict must be >= 1 or None, got {self.num_predict}")
        if self.perm_size is not None and self.perm_size < 1:
            raise ValueError(f"perm_size must be >= 1 or None, got {self.perm_size}")
        if self.reuse_len < 0:
            raise ValueError(f"reuse_len must be >= 0, got {self.reuse_len}")
        if self.return_tensors != "pt":
            raise ValueError("only return_tensors='pt' is supported")
        self._random = RandomSource(self.seed)
        self._is_special = id_table(self.tokenizer, special_ids(self.tokenizer))
        functional = [i for i in (self.tokenizer.sep_token_id, self.tokenizer.cls_token_id) if i is not None]
        self._is_functional = id_table(self.tokenizer, functional)

    @classmethod
    def from_config(cls, config, tokenizer: PreTrainedTokenizerBase, **overrides) -> DataCollatorForPermutationLM:
        """The collator a `BertologyXLNetConfig` describes (spans, `num_predict`, `perm_size`, `reuse_len`)."""
        names = ("mask_alpha", "mask_beta", "max_span_length", "num_predict", "perm_size")
        kwargs = {name: getattr(config, name) for name in names if hasattr(config, name)}
        kwargs["reuse_len"] = getattr(config, "reuse_len", None) or 0
        kwargs.update(overrides)
        return cls(tokenizer=tokenizer, **kwargs)

    @property
    def plm_probability(self) -> float:
        return self.mask_beta / self.mask_alpha

    def pad(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """`pad_features` with left padding, as XLNet's tokenizer pads."""
        return pad_features(features, self.tokenizer.pad_token_id, self.pad_to_multiple_of, padding_side="left")

    def _special_at(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`(B, L)` bool: the special ids among `input_ids`, which must all be the tokenizer's (a table lookup)."""
        if int(input_ids.max()) >= len(self._is_special):
            raise BertologyError(f"token id {int(input_ids.max())} is outside the tokenizer's {len(self._is_special)}")
        return self._is_special[input_ids]

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise BertologyError("cannot collate an empty list of features")
        batch = self.pad(features)
        draws = self._random.draws(features)
        for key in DROPPED_KEYS:
            batch.pop(key, None)
        input_ids, real, candidates, word_starts = prediction_inputs(batch, self._special_at)
        word_starts = self._word_starts(input_ids, word_starts)
        targets = self.choose_targets(real, candidates, word_starts.bool(), draws)
        functional = real & self._is_functional[input_ids]
        batch["perm_mask"] = self.permutation_mask(real, targets, functional, draws)
        batch["target_mapping"], batch["labels"] = self.targets_to_rows(input_ids, targets)
        return batch

    def budget(self, num_real: torch.Tensor, num_candidates: torch.Tensor) -> torch.Tensor:
        """Targets per sequence: `min(num_predict, max(1, round(n / K)))`, never more than the candidates."""
        count = torch.round(num_real.double() * self.plm_probability).long().clamp(min=1)
        if self.num_predict is not None:
            count = count.clamp(max=self.num_predict)
        return torch.minimum(count, num_candidates)

    def choose_targets(
        self, real: torch.Tensor, candidates: torch.Tensor, word_starts: torch.Tensor, draws: Draws | None = None
    ) -> torch.Tensor:
        """`(B, L)` bool: the positions to predict (spans of whole words, exact count)."""
        draws = self._draws_or_fresh(draws, len(real))
        budget = self.budget(real.sum(1), candidates.sum(1))
        word_index, word_len = segment_words(candidates, word_starts)
        ratio = self.mask_alpha / self.mask_beta
        span = sample_spans((word_len > 0).sum(1), word_len.shape[1], ratio, self.max_span_length, draws)
        # keep whole spans, in a random order, while they fit the budget (as `num_predict` cuts the official walk)
        chosen = span >= 0  # (B, W)
        if chosen.any():
            safe = span.clamp(min=0)
            sizes = torch.zeros(span.shape[0], int(span.max()) + 1, dtype=torch.long)
            sizes.scatter_add_(1, safe, word_len * chosen)  # (B, S) tokens per span
            order = draws.uniform(SPAN_ORDER, sizes.shape[1]).argsort(dim=1)  # (B, S) spans in random order
            fits = sizes.gather(1, order).cumsum(1) <= budget[:, None]
            chosen &= torch.zeros_like(fits).scatter_(1, order, fits).gather(1, safe)
        # top up with random whole words (the official code tops up with random single tokens)
        missing = budget - (word_len * chosen).sum(1)
        if bool((missing > 0).any()):
            chosen |= top_up_words(word_len, chosen, missing.clamp(min=0), draws)
        return candidates & chosen.gather(1, word_index.clamp(min=0))

    def permutation_mask(
        self, real: torch.Tensor, targets: torch.Tensor, functional: torch.Tensor, draws: Draws | None = None
    ) -> torch.Tensor:
        """`(B, L, L)` bool, True where i may not attend to j, from a random factorisation order.

        One comparison: `perm_mask[b, i, j] = key[j] >= query[i]`. Keys are integers: context tokens of group g
        (0 = the reuse part, 1 = the rest) get `base(g)`, ordered tokens (targets, `<sep>`, `<cls>`) get
        `base(g) + 1 + rank` with a random rank, padding +inf. A query sees strictly smaller keys: a context token
        `base(g) + 1` (all context up to its group), a target its own key (not itself), a functional token its key
        + 1 (itself too), padding `base(0) + 1` (attends to something harmless, so its state carries no target).
        """
        batch, length = real.shape
        draws = self._draws_or_fresh(draws, batch)
        perm_size = min(self.perm_size or length, length)
        # a random order of the slots, shared by the blocks (`_local_perm`); numpy sorts ~5x faster than torch
        slot_order = np.argsort(draws.uniform(FACTORISATION, perm_size).numpy(), axis=1)
        slot_rank = np.empty_like(slot_order)
        np.put_along_axis(slot_rank, slot_order, np.arange(perm_size)[None, :], axis=1)  # (B, perm_size)
        # (B, L) integer work in numpy: a few dozen small torch ops cost more in dispatch than in compute here
        real, functional = real.numpy(), functional.numpy()
        ordered = real & (targets.numpy() | functional)
        offset = length - real.sum(1, keepdims=True)  # left padding: the first real token's position
        real_index = np.maximum(np.arange(length)[None, :] - offset, 0)  # (B, L) index among real tokens
        group = (real_index >= self.reuse_len) if self.reuse_len else np.zeros_like(real)
        block, slot = np.divmod(real_index - group * self.reuse_len, perm_size)
        rank = block * perm_size + np.take_along_axis(slot_rank, slot, axis=1)  # distinct within a group
        top = 2 * (length + perm_size + 2)  # above every key: padding's key
        dtype = np.int16 if top < np.iinfo(np.int16).max else np.int32  # numpy compares int16 fastest
        base = group * (length + perm_size + 2)
        key = np.where(ordered, base + 1 + rank, base)
        query = np.where(real, np.where(ordered, key + functional, base + 1), 1).astype(dtype)
        key = np.where(real, key, top).astype(dtype)
        return torch.from_numpy(key[:, None, :] >= query[:, :, None])  # (B, L, L)

    def targets_to_rows(self, input_ids: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`target_mapping` `(B, P, L)` and `labels` `(B, P)`: one row per target in position order."""
        batch, length = input_ids.shape
        counts = targets.sum(1)
        rows = self.num_predict if self.num_predict is not None else max(1, int(counts.max()))
        row_of = targets.long().cumsum(1) - 1  # (B, L) the row of each target
        b, position = targets.nonzero(as_tuple=True)
        row = row_of[b, position]
        target_mapping = torch.zeros(batch, rows, length)
        target_mapping[b, row, position] = 1.0
        labels = torch.full((batch, rows), -100, dtype=torch.long)
        labels[b, row] = input_ids[b, position]
        return target_mapping, labels
