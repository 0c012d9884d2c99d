"""Span masking over whole words: SpanBERT's geometric spans and ALBERT's n-grams.

`DataCollatorForSpanMasking` runs two official procedures, vectorised over the batch and over many anchors per row
(`span_rounds.SpanRounds`: each round solves the official one-anchor-at-a-time rule as a fixed point, so the masks
are exactly the sequential loop's):

- `scheme="spanbert"`: facebookresearch/SpanBERT `pretraining/fairseq/data/masking.py` (`span_masking`);
- `scheme="albert"`: google-research/albert `create_pretraining_data.py: create_masked_lm_predictions`.

Span lengths come from `span_length_distribution` (`"geometric"`: SpanBERT's, renormalised on lower..upper;
`"ngram"`: p(n) ∝ 1/n, ALBERT and XLNet); replacement is decided per merged span (`replacement_level="span"`) or per
token. The official rules, step by step: docs/recipes/spanbert.md and docs/recipes/albert.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError
from .base import (
    Draws,
    ExampleSeeded,
    RandomSource,
    Treatment,
    WordStartLookup,
    id_table,
    non_special_vocab,
    pad_features,
    prediction_inputs,
    require_tokens,
    special_ids,
)
from .span_rounds import SpanRounds

# scheme -> what anchors a span: SpanBERT's any maskable token, ALBERT's a word start (its n-grams are whole words)
SCHEMES = {"spanbert": "token", "albert": "word"}
DISTRIBUTIONS = ("geometric", "ngram")
# Streams of `Draws`. A span's length is drawn for its anchor position (each position is an anchor at most once), so
# a row's spans do not depend on how many anchors a round tries or on the other rows.
ANCHOR_ORDER, TREATMENT, REPLACEMENT, SPAN_LENGTH = 1, 2, 3, 4


def span_length_distribution(kind: str, lower: int = 1, upper: int = 10, p: float = 0.2) -> torch.Tensor:
    """Probabilities of the span lengths `lower..upper` (in words), as a `(upper - lower + 1,)` float64 tensor.

    `"geometric"`: SpanBERT's truncated geometric, `p(1-p)^(l-1)` renormalised on the range (p=0.2, 1..10: mean
    3.797 words). `"ngram"`: `1/n` renormalised (ALBERT's `favor_shorter_ngram`; 1..3 gives 6/11, 3/11, 2/11).
    """
    if kind not in DISTRIBUTIONS:
        raise BertologyError(f"unknown span distribution {kind!r}; known: {', '.join(DISTRIBUTIONS)}")
    if not 1 <= lower <= upper:
        raise ValueError(f"span lengths need 1 <= lower <= upper, got {lower}..{upper}")
    lengths = torch.arange(lower, upper + 1, dtype=torch.float64)
    if kind == "geometric":
        if not 0.0 < p <= 1.0:
            raise ValueError(f"geometric_p must be in (0, 1], got {p}")
        weights = p * (1 - p) ** (lengths - 1)
    else:
        weights = 1.0 / lengths
    return weights / weights.sum()


def _first_at_or_after(flags: torch.Tensor) -> torch.Tensor:
    """`(B, L)` bool -> for each position, the first position >= it where `flags` is set (L if none)."""
    length = flags.shape[1]
    where = torch.where(flags, torch.arange(length), length)
    return where.flip(1).cummin(1).values.flip(1)


@dataclass
class DataCollatorForSpanMasking(SpanRounds, Treatment, WordStartLookup, ExampleSeeded):
    """Pads features and masks whole-word spans: SpanBERT's geometric spans or ALBERT's n-grams.

    Expected statistics (tests/test_span_collator.py checks them):
    - `scheme="spanbert"`, geometric p=0.2 on 1..10 words: sampled span lengths have mean 3.797 words; every span
      starts at a word start and covers whole words, except the last one of a row, which the budget may cut;
      masked share `ceil(0.15 * maskable)` per row (0.15 of the real tokens); 80/10/10 decided per merged span.
    - `scheme="albert"`, n-grams p(n) ∝ 1/n on 1..3: lengths 6/11, 3/11, 2/11; whole words only; never more than
      the budget `round(0.15 * tokens)`; 80/10/10 per token.
    Special tokens and padding are never masked; a span never crosses a special token. Random replacements are
    uniform over the non-special vocabulary, or (`random_token_distribution="unigram"`) follow the corpus unigram
    distribution: `token_frequencies` if given, else a uniform draw among the row's own real tokens (a sample of
    the corpus token stream, as SpanBERT draws from its token list; the row's, so that an example's masks do not
    depend on its batch).

    Randomness (`RandomSource`): features with an `example_id` are masked as a pure function of (seed, epoch,
    example id, position); features without one get new draws on every call.

    With `sbo_max_targets` (SpanBERT's span boundary objective), each merged span `(s, e)` whose outside neighbours
    `s-1` and `e+1` are real non-special tokens gives targets for its first `sbo_max_targets` tokens:
    `sbo_labels` `(B, L)` the original token (-100 elsewhere), `sbo_boundaries` `(B, L, 2)` the positions
    `(s-1, e+1)`, `sbo_relative_positions` `(B, L)` the offset `i - s` (0 where there is no target).

    Word starts come from the features' `word_starts` (hf_bertology.data, from `word_ids()`), else from the
    tokenizer's vocabulary (`word_start_table`: "##" continuations, "Ġ"/"▁" starts).
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    scheme: str = "spanbert"
    span_distribution: str = "geometric"
    geometric_p: float = 0.2
    span_lower: int = 1
    span_upper: int = 10
    replacement_level: str = "span"
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    random_token_distribution: str = "uniform"
    token_frequencies: Any = None
    max_predictions_per_seq: int | None = None
    sbo_max_targets: int | None = None
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    return_tensors: str = "pt"
    _random: RandomSource = field(init=False, repr=False)

    def __post_init__(self):
        require_tokens(self.tokenizer, "mask", "pad")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {tuple(SCHEMES)}, got {self.scheme!r}")
        if self.replacement_level not in ("span", "token"):
            raise ValueError(f"replacement_level must be 'span' or 'token', got {self.replacement_level!r}")
        if self.random_token_distribution not in ("uniform", "unigram"):
            raise ValueError("random_token_distribution must be 'uniform' or 'unigram'")
        if min(self.mask_replace_prob, self.random_replace_prob) < 0 or (
            self.mask_replace_prob + self.random_replace_prob > 1
        ):
            raise ValueError("mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1")
        if self.max_predictions_per_seq is not None and self.max_predictions_per_seq < 1:
            raise ValueError("max_predictions_per_seq must be >= 1 or None")
        if self.sbo_max_targets is not None and self.sbo_max_targets < 1:
            raise ValueError("sbo_max_targets must be >= 1 or None")
        if self.return_tensors != "pt":
            raise ValueError("only return_tensors='pt' is supported")
        self.length_probs = span_length_distribution(
            self.span_distribution, self.span_lower, self.span_upper, self.geometric_p
        )
        self._length_cdf = self.length_probs.cumsum(0).float()
        self._length_cdf[-1] = 1.0  # guard against rounding: every uniform draw maps to a length
        self._mean_words = float((self.length_probs * torch.arange(self.span_lower, self.span_upper + 1)).sum())
        self._random = RandomSource(self.seed)
        self._special = special_ids(self.tokenizer)
        self._is_special = id_table(self.tokenizer, self._special)
        self._replacements = non_special_vocab(self.tokenizer)
        if self.token_frequencies is not None:
            weights = torch.as_tensor(self.token_frequencies, dtype=torch.float64).clone()
            weights[self._special] = 0  # never a special token
            if weights.numel() != len(self.tokenizer) or weights.sum() <= 0:
                raise BertologyError("token_frequencies needs one non-negative count per vocabulary id")
            self.token_frequencies = weights
            cdf = weights.cumsum(0)
            self._frequency_cdf = cdf / cdf[-1]  # inverse-CDF sampling: one uniform per position

    @classmethod
    def from_config(cls, config, tokenizer: PreTrainedTokenizerBase, **overrides) -> DataCollatorForSpanMasking:
        """The collator a SpanBERT or ALBERT config describes (its masking fields; `sbo_max_targets` if the
        config has a span boundary objective)."""
        names = (
            "mlm_probability",
            "scheme",
            "span_distribution",
            "geometric_p",
            "span_lower",
            "span_upper",
            "replacement_level",
            "mask_replace_prob",
            "random_replace_prob",
            "random_token_distribution",
            "max_predictions_per_seq",
            "sbo_max_targets",
        )
        kwargs = {name: getattr(config, name) for name in names if hasattr(config, name)}
        if "scheme" not in kwargs and hasattr(config, "masking_scheme"):
            kwargs["scheme"] = config.masking_scheme
        kwargs.update(overrides)
        return cls(tokenizer=tokenizer, **kwargs)

    # -- the batch -------------------------------------------------------------------------------------------
    def _special_at(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`(B, L)` bool: the special ids among `input_ids` (a table lookup is faster than `torch.isin`)."""
        return self._is_special[input_ids]

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = pad_features(features, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        draws = self._random.draws(features)
        input_ids, attention, candidates, word_starts = prediction_inputs(batch, self._special_at)
        word_starts = self._word_starts(input_ids, word_starts)
        masked, _ = self.sample_spans(attention, candidates, word_starts.bool(), draws=draws)
        run_start = self.span_starts(masked)
        batch["labels"] = torch.where(masked, input_ids, -100)
        if self.sbo_max_targets is not None:
            batch.update(self.sbo_targets(input_ids, masked, candidates, run_start))
        batch["input_ids"] = self.corrupt(input_ids, masked, run_start, candidates, draws)
        return batch

    def budget(self, attention: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """`(B,)` tokens to mask per row: SpanBERT `ceil(rate * maskable)`, ALBERT `max(1, round(rate * tokens))`
        (capped by `max_predictions_per_seq`), never more than the maskable tokens."""
        num_candidates = candidates.sum(1)
        if SCHEMES[self.scheme] == "token":
            count = torch.ceil(num_candidates.double() * self.mlm_probability).long()
        else:
            count = torch.round(attention.sum(1).double() * self.mlm_probability).long().clamp(min=1)
        if self.max_predictions_per_seq is not None:
            count = count.clamp(max=self.max_predictions_per_seq)
        return torch.minimum(count, num_candidates)

    def sample_lengths(self, draws: Draws, anchors: torch.Tensor) -> torch.Tensor:
        """`(B, K)` span lengths in words drawn from `length_probs`, one for each anchor position `(B, K)`."""
        uniform = draws.uniform(SPAN_LENGTH, anchors).contiguous()
        return torch.searchsorted(self._length_cdf, uniform).clamp(max=len(self._length_cdf) - 1) + self.span_lower

    def sample_spans(
        self,
        attention: torch.Tensor,
        candidates: torch.Tensor,
        word_starts: torch.Tensor,
        return_spans: bool = False,
        draws: Draws | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Choose the spans: the `(B, L)` bool mask, and with `return_spans` the placed spans as a `(N, 4)` long
        tensor of `(row, start, end_exclusive, drawn_length_in_words)` in placement order (before merging).

        Many anchors per row per round (`_anchors_per_round`; most batches need one round). Rows that are done
        leave the working set once it has halved, so the rows that need another round cost little.
        """
        batch, length = candidates.shape
        draws = self._draws_or_fresh(draws, batch)
        positions = torch.arange(length)
        # Words never continue across a special token or padding; those tokens are one-token "words" of their own.
        starts = word_starts | ~candidates
        starts[:, 1:] |= ~candidates[:, :-1]
        word_id = starts.long().cumsum(1) - 1  # (B, L)
        # word_start_pos[b, w]: position of word w's first token; L past the last word.
        word_start_pos = torch.full((batch, length + 1), length, dtype=torch.long)
        word_start_pos.scatter_(1, torch.where(starts, word_id, length), positions.expand(batch, length))
        word_start_pos[:, length] = length
        state = {
            "rows": torch.arange(batch),
            "keys": draws.keys,
            "remaining": self.budget(attention, candidates),
            "masked": torch.zeros(batch, length, dtype=torch.bool),
            "word_id": word_id,
            "word_start_pos": word_start_pos,
            "segment_end": _first_at_or_after(~candidates),  # (B, L): end of the maskable stretch of each token
        }
        # A uniform random order of anchors per row; 2.0 marks tokens that can no longer be an anchor.
        scores = draws.uniform(ANCHOR_ORDER, length)  # float64: no ties, whatever the padded length
        if SCHEMES[self.scheme] == "token":
            state["scores"] = scores.masked_fill_(~candidates, 2.0)
        else:
            state["scores"] = scores.masked_fill_(~(starts & candidates), 2.0)  # ALBERT anchors are word starts
            state["word_len"] = word_start_pos[:, 1:].gather(1, word_id) - word_start_pos.gather(1, word_id)
        masked_out = torch.zeros(batch, length, dtype=torch.bool)
        spans: list[torch.Tensor] = []
        step = self._spanbert_step if SCHEMES[self.scheme] == "token" else self._albert_step
        while True:
            active = step(state, positions, spans if return_spans else None)
            if not active.any():
                break
            if int(active.sum()) * 2 <= len(active):  # shrink the working set to the rows still masking
                masked_out[state["rows"]] = state["masked"]
                state = {key: value[active] for key, value in state.items()}
        masked_out[state["rows"]] = state["masked"]
        spans_tensor = (torch.cat(spans) if spans else torch.zeros(0, 4, dtype=torch.long)) if return_spans else None
        return masked_out, spans_tensor

    # -- merged spans: SBO targets and replacement --------------------------------------------------------------
    @staticmethod
    def span_starts(masked: torch.Tensor) -> torch.Tensor:
        """`(B, L)`: for each masked token, the position where its merged span (maximal masked run) starts."""
        length = masked.shape[1]
        first = masked.clone()
        first[:, 1:] &= ~masked[:, :-1]
        return torch.where(first, torch.arange(length), 0).cummax(1).values

    def sbo_targets(
        self, input_ids: torch.Tensor, masked: torch.Tensor, candidates: torch.Tensor, run_start: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """SpanBERT's pair targets (`span_masking`, endpoints "external") as per-token `(B, L)` tensors."""
        batch, length = masked.shape
        last = masked.clone()
        last[:, :-1] &= ~masked[:, 1:]
        run_end = _first_at_or_after(last)  # (B, L): last position of each masked token's run
        left, right = run_start - 1, run_end + 1
        inside = (left >= 0) & (right < length)
        # Boundaries must be real non-special tokens: a span touching [CLS], [SEP] or padding has no SBO target.
        boundary_ok = candidates.gather(1, left.clamp(min=0)) & candidates.gather(1, right.clamp(max=length - 1))
        relative = torch.arange(length) - run_start
        target = masked & inside & boundary_ok & (relative < self.sbo_max_targets)
        return {
            "sbo_labels": torch.where(target, input_ids, -100),
            "sbo_boundaries": torch.stack([left, right], -1) * target[..., None],  # (B, L, 2)
            "sbo_relative_positions": relative * target,
        }

    def corrupt(
        self,
        input_ids: torch.Tensor,
        masked: torch.Tensor,
        run_start: torch.Tensor,
        candidates: torch.Tensor,
        draws: Draws | None = None,
    ) -> torch.Tensor:
        """[MASK] / random tokens / unchanged, decided per merged span or per token (draws made at the masked
        positions only)."""
        draws = self._draws_or_fresh(draws, len(input_ids))
        rows, columns = masked.nonzero(as_tuple=True)
        # every token of a span shares its first token's draw
        at = run_start[rows, columns] if self.replacement_level == "span" else columns
        draw = draws.uniform_at(TREATMENT, rows, at)
        return self.treat(input_ids, rows, columns, draw, partial(self.random_tokens, input_ids, candidates, draws))

    def random_tokens(
        self,
        input_ids: torch.Tensor,
        candidates: torch.Tensor,
        draws: Draws,
        rows: torch.Tensor,
        columns: torch.Tensor,
    ) -> torch.Tensor:
        """`(N,)` replacement ids for the positions `(rows, columns)`: uniform non-special, or unigram (given
        frequencies, else a uniform pick among the row's own real tokens)."""
        uniform = draws.uniform_at(REPLACEMENT, rows, columns)  # (N,)
        uniform_pick = self._replacements[(uniform * len(self._replacements)).long()]
        if self.random_token_distribution == "uniform":
            return uniform_pick
        if self.token_frequencies is not None:
            picks = torch.searchsorted(self._frequency_cdf, uniform, right=True)
            return picks.clamp(max=len(self._frequency_cdf) - 1)
        # the row's candidates, in order, first: pick the k-th with k uniform below the row's count
        count = candidates.sum(1)[rows]  # (N,)
        pool = (~candidates).long().argsort(dim=1, stable=True)  # (B, L) candidate positions first
        own = input_ids[rows, pool[rows, (uniform * count).long().clamp(max=input_ids.shape[1] - 1)]]
        return torch.where(count > 0, own, uniform_pick)


def mean_span_length(kind: str, lower: int = 1, upper: int = 10, p: float = 0.2) -> float:
    """Expected sampled span length in words (3.797 for SpanBERT's p=0.2 on 1..10; 1.636 for 1/n on 1..3)."""
    probs = span_length_distribution(kind, lower, upper, p)
    return float((probs * torch.arange(lower, upper + 1, dtype=torch.float64)).sum())


__all__ = ["DataCollatorForSpanMasking", "mean_span_length", "span_length_distribution"]
