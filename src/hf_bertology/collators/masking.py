"""Token and whole-word masking for masked language modelling (BERT, RoBERTa, ELECTRA's generator input).

Follows google-research/bert `create_masked_lm_predictions` (exact count per sequence, 80/10/10 per token,
whole-word groups skipped when they would overflow the count) and fairseq's `MaskTokensDataset` (dynamic: a new
mask each time a sequence is seen; random tokens from the non-special vocabulary). Written here rather than reusing
transformers' `DataCollatorForLanguageModeling`, which draws a per-token Bernoulli (no exact count, no cap), masks
special tokens unless given a mask, and supports whole words only with pre-padded offset features and
`mask_replace_prob=1`. Everything is vectorised over the batch: no Python loop over tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .base import (
    Draws,
    ExampleSeeded,
    RandomSource,
    Treatment,
    WordStartLookup,
    non_special_vocab,
    pad_features,
    prediction_inputs,
    require_tokens,
    special_ids,
)

# Streams of `Draws`: one per use, so that the draws of one position for two uses are independent.
CHOOSE, TREATMENT, REPLACEMENT, SAMPLING = 1, 2, 3, 4


def rank_within_rows(scores: torch.Tensor) -> torch.Tensor:
    """`(B, L)` -> the rank (0 = smallest) of each entry within its row."""
    order = scores.argsort(dim=1)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(scores.shape[1]).expand_as(order))
    return ranks


def choose_whole_words(
    candidates: torch.Tensor, word_starts: torch.Tensor, budget: torch.Tensor, draws: Draws
) -> torch.Tensor:
    """Pick whole words in a random order until each row's token `budget` is met; `(B, L)` bool.

    As in BERT's whole-word masking, a word that would overflow the budget is skipped and later (shorter) words
    are still tried: rounds of "take the longest prefix of the shuffled words that fit" until nothing fits.
    """
    batch, length = candidates.shape
    starts = word_starts | ~candidates
    starts[:, 1:] |= ~candidates[:, :-1]  # a word never continues across a special token or padding
    starts[:, 0] = True  # a row may begin mid-word (a block cut from a long sentence)
    word_id = starts.long().cumsum(1) - 1  # (B, L) index of each token's word
    word_len = torch.zeros(batch, length, dtype=torch.long).scatter_add_(1, word_id, candidates.long())
    scores = draws.uniform(CHOOSE, length)  # (B, L): the random rank of word w (column w)
    scores[word_len == 0] = 2.0  # not a word (or a non-candidate): sorted last, never taken
    order = scores.argsort(dim=1)  # (B, L) words in random order
    sorted_len = word_len.gather(1, order)
    taken = torch.zeros(batch, length, dtype=torch.bool)
    remaining = budget.clone()
    for _ in range(length):
        fits = ~taken & (sorted_len > 0) & (sorted_len <= remaining[:, None])
        lengths = sorted_len * fits
        new = fits & (lengths.cumsum(1) <= remaining[:, None])
        if not new.any():
            break
        taken |= new
        remaining -= (lengths * new).sum(1)
    chosen_words = torch.zeros(batch, length, dtype=torch.bool).scatter_(1, order, taken)
    return chosen_words.gather(1, word_id) & candidates


@dataclass
class DataCollatorForMaskedLM(Treatment, WordStartLookup, ExampleSeeded):
    """Pads features and masks an exact number of tokens per sequence for masked language modelling.

    Per sequence, `n = min(max_predictions_per_seq, max(1, round(num_real_tokens * mlm_probability)))` positions
    are chosen uniformly without replacement among the real, non-special tokens (the count includes the special
    tokens, as in BERT). Of the chosen tokens, each independently becomes the mask token with probability
    `mask_replace_prob`, a random token from the non-special vocabulary with `random_replace_prob`, and stays
    unchanged otherwise. Expected statistics: the masked count is exact; the split is 0.80/0.10/0.10 by default;
    special tokens and padding are never chosen; a new mask is drawn on every call (dynamic masking).

    Randomness (`RandomSource`): features with an `example_id` are masked as a pure function of (seed, epoch,
    example id, position), so an example's mask changes from epoch to epoch (`set_epoch`) but not with the batch
    it lands in; features without one get new draws on every call.

    With `whole_word_mask=True`, whole words are chosen (word starts from the features' `word_starts`, else from the
    tokenizer's vocabulary) until the count is met; words that would overflow are skipped, so the count can fall
    short by less than one word. 80/10/10 is still drawn per token, as in BERT.

    With `masking_draw="bernoulli"` every candidate is chosen independently with probability `mlm_probability`
    instead (no exact count, no cap, token-level only): ModernBERT's official packer (AnswerDotAI/ModernBERT
    `src/sequence_packer.py:mlm_masking`, pretraining_documentation branch, `rand < mask_prob`).

    Input features: dicts with `input_ids` (list of ints, special tokens included) and optionally `token_type_ids`,
    `word_starts`, `example_id` (not passed on), and per-example labels (`next_sentence_label`, ...) that are passed through.
    Output: `input_ids`, `attention_mask`, `labels` (-100 where nothing is predicted), and the pass-through keys.
    With `return_sample_keys=True` (set by `from_config` for replaced-token detection), also `sample_keys` `(B, L)`
    int64: a key per token from the same (seed, epoch, example id, position) draws, from which the model hashes each
    target's sampling uniform (inverse CDF), so that two processes sample what one process would for the same
    examples.
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    max_predictions_per_seq: int | None = None
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    masking_draw: str = "exact"  # "exact" (a count per sequence) | "bernoulli" (independent per token)
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    return_tensors: str = "pt"
    return_sample_keys: bool = False
    _random: RandomSource = field(init=False, repr=False)

    def __post_init__(self):
        require_tokens(self.tokenizer, "mask", "pad")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if min(self.mask_replace_prob, self.random_replace_prob) < 0 or (
            self.mask_replace_prob + self.random_replace_prob > 1
        ):
            raise ValueError("mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1")
        if self.max_predictions_per_seq is not None and self.max_predictions_per_seq < 1:
            raise ValueError("max_predictions_per_seq must be >= 1 or None")
        if self.masking_draw not in ("exact", "bernoulli"):
            raise ValueError(f"masking_draw must be 'exact' or 'bernoulli', got {self.masking_draw!r}")
        if self.masking_draw == "bernoulli" and (self.whole_word_mask or self.max_predictions_per_seq is not None):
            raise ValueError("masking_draw='bernoulli' draws single tokens with no cap: no whole_word_mask, no cap")
        if self.return_tensors != "pt":
            raise ValueError("only return_tensors='pt' is supported")
        self._random = RandomSource(self.seed)
        self._special = special_ids(self.tokenizer)
        self._replacements = non_special_vocab(self.tokenizer)

    @classmethod
    def from_config(cls, config, tokenizer: PreTrainedTokenizerBase, **overrides) -> DataCollatorForMaskedLM:
        """Build the collator a config's recipe describes (`mlm_probability`, `max_predictions_per_seq`, ...)."""
        names = ("mlm_probability", "max_predictions_per_seq", "mask_replace_prob", "random_replace_prob")
        names += ("whole_word_mask", "masking_draw")
        kwargs = {name: getattr(config, name) for name in names if hasattr(config, name)}
        # a generator that samples in the model (two networks: ELECTRA, DeBERTa-v3, a cell with a generator): its
        # noise is keyed too
        kwargs["return_sample_keys"] = bool(getattr(config, "writes_joint_type", False))
        kwargs.update(overrides)
        return cls(tokenizer=tokenizer, **kwargs)

    def _special_at(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`(B, L)` bool: the special ids among `input_ids` (`isin` accepts any id, even one past the vocabulary)."""
        return torch.isin(input_ids, self._special)

    def num_to_predict(self, num_real: torch.Tensor, num_candidates: torch.Tensor) -> torch.Tensor:
        """`min(max_predictions, max(1, round(n * rate)))`, never more than the candidates."""
        count = torch.round(num_real.double() * self.mlm_probability).long().clamp(min=1)
        if self.max_predictions_per_seq is not None:
            count = count.clamp(max=self.max_predictions_per_seq)
        return torch.minimum(count, num_candidates)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = pad_features(features, self.tokenizer.pad_token_id, self.pad_to_multiple_of)
        draws = self._random.draws(features)
        input_ids, attention, candidates, word_starts = prediction_inputs(batch, self._special_at)
        chosen = self.choose(input_ids, attention, candidates, word_starts, draws)
        batch["labels"] = torch.where(chosen, input_ids, -100)
        batch["input_ids"] = self.corrupt(input_ids, chosen, draws)
        if self.return_sample_keys:
            batch["sample_keys"] = draws.token_keys(SAMPLING, input_ids.shape[1])
        return batch

    def choose(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        candidates: torch.Tensor,
        word_starts: torch.Tensor | None = None,
        draws: Draws | None = None,
    ) -> torch.Tensor:
        """`(B, L)` bool: the positions to predict."""
        draws = self._draws_or_fresh(draws, len(input_ids))
        if self.masking_draw == "bernoulli":
            return candidates & (draws.uniform(CHOOSE, input_ids.shape[1]) < self.mlm_probability)
        budget = self.num_to_predict(attention.sum(1), candidates.sum(1))
        if self.whole_word_mask:
            return choose_whole_words(candidates, self._word_starts(input_ids, word_starts).bool(), budget, draws)
        scores = draws.uniform(CHOOSE, input_ids.shape[1])
        scores[~candidates] = 2.0  # non-candidates rank last
        return rank_within_rows(scores) < budget[:, None]

    def corrupt(self, input_ids: torch.Tensor, chosen: torch.Tensor, draws: Draws | None = None) -> torch.Tensor:
        """Replace the chosen positions: mask token / random non-special token / unchanged (draws made at the chosen
        positions only)."""
        draws = self._draws_or_fresh(draws, len(input_ids))
        rows, columns = chosen.nonzero(as_tuple=True)
        draw = draws.uniform_at(TREATMENT, rows, columns)
        return self.treat(input_ids, rows, columns, draw, partial(self._random_tokens, draws))

    def _random_tokens(self, draws: Draws, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """`(N,)` replacement ids for the positions `(rows, columns)`, uniform over the non-special vocabulary."""
        picks = (draws.uniform_at(REPLACEMENT, rows, columns) * len(self._replacements)).long()
        return self._replacements[picks]
