"""Span masking over whole words: SpanBERT's geometric spans and ALBERT's n-grams.

Two official procedures, vectorised over the batch and over many anchors per row at once (each round solves the
official one-anchor-at-a-time rule as a fixed point, so the masks are exactly the sequential loop's):

- `scheme="spanbert"` follows facebookresearch/SpanBERT `pretraining/fairseq/data/masking.py:
  PairWithSpanMaskingScheme.mask` and `span_masking`: budget `ceil(rate * maskable tokens)`; repeat: draw a length
  in words, an anchor token uniform over the tokens not yet masked, expand it back to its word start and take that
  many whole words forward, adding tokens until the budget is met (so the last span may stop inside a word);
  overlapping or abutting spans merge (`merge_intervals`). Drawing the anchor among the unmasked tokens is the same
  distribution as the official draw-and-reject loop.
- `scheme="albert"` follows google-research/albert `create_pretraining_data.py: create_masked_lm_predictions`
  (`do_whole_word_mask=True`, `ngram=3`): budget `min(max_predictions, max(1, round(rate * tokens)))`, tokens
  counting the special ones; word starts are visited in a random order; each draws `n`; an n-gram that would
  overflow the budget is shortened, else skipped; one that touches an already chosen token is skipped. Anchors that
  could only be skipped (start covered, or a first word longer than what is left) are left out of the draw, which
  keeps the order of the others uniform, so the outcome has the official distribution without its O(words) loop.

Span lengths come from `span_length_distribution`: `"geometric"` (SpanBERT: p(l) ∝ p(1-p)^(l-1) on lower..upper,
renormalised, not clipped) or `"ngram"` (ALBERT and XLNet: p(n) ∝ 1/n). Replacement is decided once per merged span
(`replacement_level="span"`, SpanBERT's `--replacement-method span`) or per token (`"token"`, BERT/ALBERT).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError
from .base import (
    Draws,
    ExampleSeeded,
    RandomSource,
    id_table,
    non_special_vocab,
    pad_features,
    require_tokens,
    special_ids,
    word_start_table,
)

SCHEMES = ("spanbert", "albert")
DISTRIBUTIONS = ("geometric", "ngram")
# Spans tried per row per vectorised round, beyond the budget left divided by the mean span length in words; at
# most MAX_ANCHORS_PER_ROUND (a round's cost grows with its square: long rows take more rounds instead).
MIN_ANCHORS_PER_ROUND, MAX_ANCHORS_PER_ROUND = 8, 64
# ALBERT: anchors tried one at a time per round once the budget starts to bind (after that, the next round).
TAIL_ANCHORS = 6
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
class DataCollatorForSpanMasking(ExampleSeeded):
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
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
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
        self._word_start_table: torch.Tensor | None = None

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
    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = pad_features(features, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        draws = self._random.draws(features)
        word_starts = batch.pop("word_starts", None)
        special_mask = batch.pop("special_tokens_mask", None)
        input_ids, attention = batch["input_ids"], batch["attention_mask"].bool()
        candidates = attention & ~self._is_special[input_ids]  # a table lookup is faster than `torch.isin`
        if special_mask is not None:
            candidates &= ~special_mask.bool()
        if word_starts is None:
            if self._word_start_table is None:
                self._word_start_table = word_start_table(self.tokenizer)
            word_starts = self._word_start_table[input_ids]
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
        if self.scheme == "spanbert":
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
        if self.scheme == "spanbert":
            state["scores"] = scores.masked_fill_(~candidates, 2.0)
        else:
            state["scores"] = scores.masked_fill_(~(starts & candidates), 2.0)  # ALBERT anchors are word starts
            state["word_len"] = word_start_pos[:, 1:].gather(1, word_id) - word_start_pos.gather(1, word_id)
        masked_out = torch.zeros(batch, length, dtype=torch.bool)
        spans: list[torch.Tensor] = []
        step = self._spanbert_step if self.scheme == "spanbert" else self._albert_step
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

    def _anchors_per_round(self, remaining: torch.Tensor, length: int) -> int:
        """Anchors to try per row this round: enough for the largest budget left in most rows (a span adds about
        `mean_span_length` words), so that most rows finish in one round; rows that need more get another."""
        wanted = int(int(remaining.max()) / self._mean_words) + MIN_ANCHORS_PER_ROUND
        return min(length, wanted, MAX_ANCHORS_PER_ROUND)

    def _spanbert_step(self, state, positions, spans) -> torch.Tensor:
        """Place the next spans of every row that still has budget, exactly as the official loop would one after
        the other; returns the rows that can go on.

        The round's K anchors are taken at once: anchor j is rejected when it lies in an accepted earlier span of
        the round. That is a lower-triangular system (j depends only on i < j) with one solution, found by
        iterating to a fixed point (a few passes over `(B, K, K)`). Each token then goes to the first accepted span
        covering it (a scatter of the spans' own tokens, not a `(B, K, L)` cover), and spans are added in order
        until the budget is met.
        """
        scores, masked, remaining = state["scores"], state["masked"], state["remaining"]
        batch, length = masked.shape
        k = self._anchors_per_round(remaining, length)
        best, anchor = scores.topk(k, 1, largest=False)  # (B, K): the next unmasked tokens in the random order
        n = self.sample_lengths(Draws(state["keys"]), anchor)  # (B, K)
        word = state["word_id"].gather(1, anchor)
        start = state["word_start_pos"].gather(1, word)
        stop = state["segment_end"].gather(1, start)  # a span ends at the next special token or padding
        end = torch.minimum(state["word_start_pos"].gather(1, (word + n).clamp(max=length)), stop)
        valid = (best < 2.0) & (remaining > 0)[:, None]
        # inside[b, j, i]: anchor j lies in span i < j (the official loop rejects an anchor already masked).
        earlier = torch.ones(k, k, dtype=torch.bool).tril(-1)
        inside = (start[:, None, :] <= anchor[..., None]) & (anchor[..., None] < end[:, None, :]) & earlier
        inside &= valid[:, None, :]
        accepted = valid
        for _ in range(k):
            update = valid & ~(inside & accepted[:, None, :]).any(2)
            if torch.equal(update, accepted):
                break
            accepted = update
        # The accepted spans' tokens as flat (row, position) slots, each tagged with its span index.
        size = (end - start) * accepted  # (B, K)
        counts = size.flatten()
        slot = torch.repeat_interleave(torch.arange(batch * k), counts)  # (N,) the span (row-major) of each entry
        offset = torch.arange(len(slot)) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        flat = (slot // k) * length + start.flatten()[slot] + offset
        first = torch.full((batch * length,), k, dtype=torch.long)
        first.scatter_reduce_(0, flat, slot % k, "amin")  # the first span covering each token (k: none)
        first = first.view(batch, length).masked_fill_(masked, k)  # tokens masked earlier are not new
        covered = first < k
        new_per_span = torch.zeros(batch, k + 1, dtype=torch.long).scatter_add_(1, first, torch.ones_like(first))
        total = new_per_span[:, :k].cumsum(1)  # (B, K)
        # Spans are added in order until the budget is met; the span that meets it adds its first new tokens only.
        cut = (total < remaining[:, None]).sum(1)  # (B,) index of the span that meets the budget (k: none)
        before = torch.where(cut > 0, total.gather(1, (cut[:, None] - 1).clamp(min=0)).squeeze(1), 0)
        in_cut = first == cut[:, None]
        taken = covered & ((first < cut[:, None]) | (in_cut & (in_cut.cumsum(1) <= (remaining - before)[:, None])))
        masked |= taken
        scores.masked_fill_(taken, 2.0)
        if spans is not None:
            cut_end = torch.where(in_cut & taken, positions + 1, 0).amax(1)
            index = torch.arange(k)
            end = torch.where(index == cut[:, None], cut_end[:, None], end)
            rows, slots = (accepted & (index <= cut[:, None])).nonzero(as_tuple=True)
            spans.append(torch.stack([state["rows"][rows], start[rows, slots], end[rows, slots], n[rows, slots]], 1))
        remaining -= taken.sum(1)
        return (remaining > 0) & (best[:, -1] < 2.0)

    def _albert_step(self, state, positions, spans) -> torch.Tensor:
        """Try the next word starts of every row that still has budget, with the outcome of the official loop
        trying them one after the other; returns the rows that can go on.

        Whether n-gram j is taken, and how far it reaches, depends on the n-grams taken before it (overlap, budget
        left). Ignoring the budget, that is a lower-triangular system with one solution, found by iterating to a
        fixed point over the round's K anchors at once (`_first_guess`); it is the official outcome up to the
        first anchor whose drawn n-gram no longer fits the budget left. From that anchor on, `TAIL_ANCHORS` anchors
        are tried one at a time (shorter n-grams, skips), and the round's later anchors wait for the next round.
        """
        scores, masked, remaining = state["scores"], state["masked"], state["remaining"]
        batch, length = masked.shape
        # Anchors that could only be skipped: covered word starts and first words longer than the budget left.
        scores.masked_fill_(masked | (state["word_len"] > remaining[:, None]), 2.0)
        k = self._anchors_per_round(remaining, length)
        best, anchor = scores.topk(k, 1, largest=False)
        n = self.sample_lengths(Draws(state["keys"]), anchor)  # (B, K)
        word = state["word_id"].gather(1, anchor)
        start = state["word_start_pos"].gather(1, word)  # (B, K)
        stop = state["segment_end"].gather(1, start)
        offsets = torch.arange(1, self.span_upper + 1)
        # ends[b, j, m-1]: end of the m-gram from anchor j (cut at the next special token).
        ends = state["word_start_pos"].gather(1, (word[..., None] + offsets).clamp(max=length).view(batch, -1))
        ends = torch.minimum(ends.view(batch, k, -1), stop[..., None])  # (B, K, U)
        wanted = offsets <= n[..., None]  # (B, K, U)
        masked_before = torch.nn.functional.pad(masked.long().cumsum(1), (1, 0))  # (B, L + 1) prefix counts
        valid = best < 2.0
        # First guess, ignoring the budget: every anchor with the n-gram it drew, unless it meets an earlier one.
        full = ends.gather(2, (n - 1)[..., None]).squeeze(2)
        base = valid & (masked_before.gather(1, full) == masked_before.gather(1, start))
        accepted = self._first_guess(start, full, base, length)
        # That is the official outcome up to the first anchor whose n-gram the budget would shorten or skip (t).
        size = (full - start) * accepted
        left = remaining[:, None] - (size.cumsum(1) - size)  # (B, K) budget left when anchor j is tried
        binding = valid & (full - start > left)
        t = torch.where(binding.any(1), binding.byte().argmax(1), k)  # (B,)
        column = torch.arange(k)
        accepted &= column < t[:, None]
        end = torch.where(accepted, full, start)
        remaining -= (end - start).sum(1)
        masked |= self._cover(start, end, accepted, length)
        # From t on, a few anchors one at a time with the official rule; the round's later anchors wait for the next.
        masked_before = torch.nn.functional.pad(masked.long().cumsum(1), (1, 0))
        columns = t[:, None] + torch.arange(TAIL_ANCHORS)  # (B, T) the columns tried one at a time
        tail = columns.clamp(max=k - 1)
        tail_start, tail_valid = start.gather(1, tail), valid.gather(1, tail) & (columns < k)
        tail_ends = ends.gather(1, tail[..., None].expand(-1, -1, ends.shape[2]))  # (B, T, U)
        tail_sizes = tail_ends - tail_start[..., None]  # tokens of each m-gram
        tail_wanted = wanted.gather(1, tail[..., None].expand(-1, -1, ends.shape[2]))
        # which m-grams touch no masked token (the prefix's n-grams, earlier rounds): all at once, before the loop
        tail_clear = masked_before.gather(1, tail_ends.view(batch, -1)).view_as(tail_ends)
        tail_clear = tail_clear == masked_before.gather(1, tail_start)[..., None]  # (B, T, U)
        tail_end = torch.full_like(tail_start, -1)  # -1: not taken (overlaps nothing)
        for c in range(TAIL_ANCHORS):
            s = tail_start[:, c]
            # The longest m <= n that fits the budget (the official "try shorter n-grams"), else skip.
            fits = tail_wanted[:, c] & (tail_sizes[:, c] <= remaining[:, None])  # (B, U), a prefix
            m = (fits.sum(1, keepdim=True) - 1).clamp(min=0)
            e = tail_ends[:, c].gather(1, m).squeeze(1)
            ok = tail_valid[:, c] & fits[:, 0] & tail_clear[:, c].gather(1, m).squeeze(1)
            ok &= ~((tail_start[:, :c] < e[:, None]) & (s[:, None] < tail_end[:, :c])).any(1)  # this round's tail
            tail_end[:, c] = torch.where(ok, e, -1)
            remaining -= torch.where(ok, e - s, 0)
        taken = tail_end > tail_start
        tail_end = torch.where(taken, tail_end, tail_start)
        # Back into the round's columns (past the last column: into padding, cut off).
        accepted = torch.nn.functional.pad(accepted, (0, TAIL_ANCHORS)).scatter_(1, columns, taken)[:, :k]
        end = torch.nn.functional.pad(end, (0, TAIL_ANCHORS)).scatter_(1, columns, tail_end)[:, :k]
        masked |= self._cover(tail_start, tail_end, None, length)
        tried = column < (t + TAIL_ANCHORS)[:, None]
        scores.scatter_(1, anchor, torch.where(tried, 2.0, best))  # each word start is tried once
        if spans is not None:
            rows, slots = accepted.nonzero(as_tuple=True)
            spans.append(torch.stack([state["rows"][rows], start[rows, slots], end[rows, slots], n[rows, slots]], 1))
        return (remaining > 0) & (scores < 2.0).any(1)

    def _first_guess(self, start, full, base, length) -> torch.Tensor:
        """`(B, K)`: which of the anchors `base` (word starts, n-grams `[start, full)`, in the round's order) the
        official loop takes when no budget runs out: an anchor is skipped when its n-gram meets one taken earlier.

        A fixed point of that rule (lower-triangular: one solution). In position order an n-gram of at most U words
        can only meet the next U - 1 anchors (each starts a word of its own), so the rule needs a `(B, K, 2(U-1))`
        band of neighbours, not all `(B, K, K)` pairs.
        """
        batch, k = start.shape
        column = torch.arange(k)
        order = torch.where(base, start, length + column).argsort(1)  # (B, K) the columns in position order
        start, full, base = start.gather(1, order), full.gather(1, order), base.gather(1, order)
        reach = torch.arange(1, self.span_upper)
        offsets = torch.cat([-reach, reach])  # (2(U-1),) neighbours before and after in position order
        neighbour = column[:, None] + offsets  # (K, 2(U-1))
        inside = (neighbour >= 0) & (neighbour < k)
        index = neighbour.clamp(0, k - 1).view(1, -1).expand(batch, -1)  # (B, K * 2(U-1))

        def of_neighbours(values):
            return values.gather(1, index).view(batch, k, -1)

        # before: the neighbour's n-gram reaches this start; after: this n-gram reaches the neighbour's start
        meets = torch.where(
            offsets < 0, of_neighbours(full) > start[..., None], full[..., None] > of_neighbours(start)
        )
        meets &= inside & of_neighbours(base) & base[..., None] & (of_neighbours(order) < order[..., None])  # earlier
        accepted = base
        for _ in range(k):
            update = base & ~(meets & of_neighbours(accepted)).any(2)
            if torch.equal(update, accepted):
                break
            accepted = update
        return torch.zeros_like(accepted).scatter_(1, order, accepted)  # back to the round's order

    @staticmethod
    def _cover(start: torch.Tensor, end: torch.Tensor, accepted: torch.Tensor | None, length: int) -> torch.Tensor:
        """`(B, L)` bool: the tokens of the non-overlapping spans `[start, end)` (`(B, K)`; empty where
        `accepted` is False): +1 at each start and -1 at each end, then a cumsum."""
        weight = torch.ones_like(start) if accepted is None else accepted.long()
        weight = weight * (end > start)
        edges = torch.zeros(start.shape[0], length + 1, dtype=torch.long)
        edges.scatter_add_(1, start, weight).scatter_add_(1, end, -weight)
        return edges[:, :length].cumsum(1) > 0

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
        to_mask = draw < self.mask_replace_prob
        to_random = (draw >= self.mask_replace_prob) & (draw < self.mask_replace_prob + self.random_replace_prob)
        corrupted = input_ids.clone()
        corrupted[rows[to_mask], columns[to_mask]] = self.tokenizer.mask_token_id
        if bool(to_random.any()):
            rows, columns = rows[to_random], columns[to_random]
            corrupted[rows, columns] = self.random_tokens(input_ids, candidates, draws, rows, columns)
        return corrupted

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
