"""What the collators put in the batch, measured on the batch itself (issue 30), against references written here.

- SpanBERT's geometric spans and ALBERT's n-grams: the runs of masked whole words in the returned `labels`,
  compared with the same runs from a plain-Python transcription of the official loop on the same rows (merged
  neighbours and budget cuts included, since both sides have them). Measured on what was masked, not on the lengths
  the collator drew: a collator that masks one word per span fails.
- Random replacements (the 10% of BERT, RoBERTa and ModernBERT's masking): a chi-square test that they are uniform
  over the non-special vocabulary.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats

from hf_bertology.collators import DataCollatorForSpanMasking
from hf_bertology.recipes import get_recipe

CLS, SEP = 2, 3


class _Tokenizer:
    """The few tokenizer attributes the span collator reads: ids 0-4 special, 5..VOCAB-1 words."""

    pad_token_id, unk_token_id, cls_token_id, sep_token_id, mask_token_id = 0, 1, CLS, SEP, 4
    all_special_ids = [0, 1, 2, 3, 4]
    vocab = 200

    def __len__(self):
        return self.vocab

    def get_vocab(self):
        return {f"w{i}": i for i in range(self.vocab)}


def _rows(n_rows: int, words: int, seed: int) -> list[dict]:
    """Rows `[CLS] w... [SEP]` of `words` words of 1 to 3 tokens (60% one token), with their word starts."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n_rows):
        ids, starts = [CLS], [1]
        for _ in range(words):
            pieces = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
            ids += [rng.randrange(5, _Tokenizer.vocab) for _ in range(pieces)]
            starts += [1] + [0] * (pieces - 1)
        rows.append({"input_ids": ids + [SEP], "word_starts": starts + [1]})
    return rows


def _word_runs(masked: list[bool], starts: list[int]) -> list[int]:
    """Lengths in words (word starts inside) of the maximal runs of masked tokens of one row."""
    runs, current = [], None
    for is_masked, start in zip(masked, starts, strict=True):
        if is_masked:
            current = (current or 0) + start
        elif current is not None:
            runs.append(current)
            current = None
    if current is not None:
        runs.append(current)
    return runs


def _words(starts: list[int]) -> list[list[int]]:
    """The token positions of each word of a row, special tokens left out (first and last position)."""
    words: list[list[int]] = []
    for position in range(1, len(starts) - 1):
        if starts[position]:
            words.append([])
        words[-1].append(position)
    return words


def _official_spanbert(row: dict, rng: random.Random, p: float = 0.2, upper: int = 10) -> list[bool]:
    """facebookresearch/SpanBERT `PairWithSpanMaskingScheme.mask` on one block (its tokens between [CLS]/[SEP]):
    budget ceil(0.15 n); a length from the truncated geometric, an anchor uniform over the tokens (re-drawn when
    already masked), back to its word start, that many whole words forward, stopping at the budget."""
    words = _words(row["word_starts"])
    word_of = {position: w for w, tokens in enumerate(words) for position in tokens}
    tokens = sorted(word_of)
    budget = int(np.ceil(len(tokens) * 0.15))
    weights = [p * (1 - p) ** (length - 1) for length in range(1, upper + 1)]
    mask: set[int] = set()
    while len(mask) < budget:
        length = rng.choices(range(1, upper + 1), weights=weights)[0]
        anchor = rng.choice(tokens)
        if anchor in mask:
            continue
        first = word_of[anchor]
        for word in words[first : first + length]:
            for position in word:
                if len(mask) >= budget:
                    break
                mask.add(position)
    return [i in mask for i in range(len(row["input_ids"]))]


def _official_albert(row: dict, rng: random.Random, max_n: int = 3) -> list[bool]:
    """google-research/albert `create_masked_lm_predictions` (whole words, n-grams p(n) ∝ 1/n, shorter n-grams
    when the longer overflow the budget, skipped when overlapping) on one row; budget round(0.15 tokens), tokens
    counting [CLS] and [SEP]."""
    words = _words(row["word_starts"])
    budget = max(1, round(len(row["input_ids"]) * 0.15))
    weights = [1 / n for n in range(1, max_n + 1)]
    order = list(range(len(words)))
    rng.shuffle(order)
    covered: set[int] = set()
    for start in order:
        if len(covered) >= budget:
            break
        n = rng.choices(range(1, max_n + 1), weights=weights)[0]
        chosen = None
        for m in range(n, 0, -1):  # the longest n-gram from here that still fits
            tokens = [t for word in words[start : start + m] for t in word]
            if len(covered) + len(tokens) <= budget:
                chosen = tokens
                break
        if chosen is None or covered.intersection(chosen):
            continue
        covered.update(chosen)
    return [i in covered for i in range(len(row["input_ids"]))]


def _counts(runs: list[int], top: int = 12) -> np.ndarray:
    """Runs of 1, 2, ..., `top`-or-more words."""
    return np.bincount(np.minimum(runs, top), minlength=top + 1)[1:]


@pytest.mark.parametrize(
    "scheme, reference",
    [("spanbert", _official_spanbert), ("albert", _official_albert)],
)
def test_masked_runs_match_the_official_procedure(scheme, reference):
    """Run lengths (in whole words) of what was masked: the collator's against the official loop's on the same
    rows (300 rows of 250 words: ~2.9k SpanBERT / ~6.5k ALBERT runs a side). Tolerance: a chi-square test of
    homogeneity of the two histograms at p > 1e-3, and means within 5% (the two samples' own noise is ~2%)."""
    rows = _rows(300, words=250, seed=0)
    overrides = dict(scheme=scheme, seed=0)
    if scheme == "albert":
        overrides.update(span_distribution="ngram", span_upper=3, replacement_level="token")
    collator = DataCollatorForSpanMasking(tokenizer=_Tokenizer(), **overrides)
    ours, theirs = [], []
    pieces = np.zeros((2, 3), dtype=np.int64)  # masked words by their number of tokens (1, 2, 3): ours, official
    rng = random.Random(1)
    for first in range(0, len(rows), 50):
        chunk = rows[first : first + 50]
        labels = collator(chunk)["labels"]
        for row, row_labels in zip(chunk, labels, strict=True):
            real = len(row["input_ids"])
            masked = row_labels[:real].ne(-100).tolist()
            assert not masked[0] and not masked[-1]  # [CLS] and [SEP] never
            starts = row["word_starts"]
            edges = [i for i in range(1, real) if masked[i] != masked[i - 1]]  # run starts and run ends
            assert all(starts[i] for i in edges if masked[i]), "a run starts inside a word"
            if scheme == "albert":  # whole words only (SpanBERT's last span may stop inside a word)
                assert all(starts[i] for i in edges if not masked[i]), "a run ends inside a word"
            official = reference(row, rng)
            ours += _word_runs(masked, row["word_starts"])
            theirs += _word_runs(official, row["word_starts"])
            for side, mask in enumerate((masked, official)):
                for word in _words(starts):
                    pieces[side, len(word) - 1] += mask[word[0]]
    table = np.stack([_counts(ours), _counts(theirs)])
    table = table[:, table.sum(0) > 0]
    p_value = stats.chi2_contingency(table).pvalue
    assert p_value > 1e-3, (p_value, table)
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.05)
    # which words: SpanBERT's anchors are uniform over tokens (long words favoured), ALBERT's over words
    assert stats.chi2_contingency(pieces).pvalue > 1e-3, pieces
    if scheme == "spanbert":  # geometric(0.2) on 1..10 words: mean 3.8 drawn; merges lengthen, cuts shorten
        assert 3.3 < np.mean(ours) < 4.6, np.mean(ours)
    else:  # 1/n on 1..3: 6/11, 3/11, 2/11 drawn; abutting n-grams merge into longer runs
        assert 1.6 < np.mean(ours) < 2.3, np.mean(ours)


@pytest.mark.parametrize("recipe_name", ["bert-tiny", "roberta-tiny", "modernbert-tiny"])
def test_random_replacements_are_uniform_over_the_non_special_vocabulary(recipe_name, texts):
    """Chi-square over the replacement ids of many batches: uniform over the non-special ids, never a special one.
    Every chosen token is made random here (split 0/100/0), so the test sees ~6k replacements."""
    recipe = get_recipe(recipe_name)
    tokenizer = recipe.train_tokenizer(texts * 3, vocab_size=300)
    collator = recipe.build_collator(tokenizer, seed=0)
    assert (collator.mask_replace_prob, collator.random_replace_prob) == pytest.approx((0.8, 0.1))
    collator.mask_replace_prob, collator.random_replace_prob = 0.0, 1.0
    encoded = [tokenizer(text, truncation=True, max_length=64)["input_ids"] for text in texts]
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for _ in range(10):
        batch = collator([{"input_ids": ids} for ids in encoded])
        chosen = batch["labels"].ne(-100)
        counts += torch.bincount(batch["input_ids"][chosen], minlength=len(tokenizer))
    special = sorted(set(tokenizer.all_special_ids))
    assert counts[special].sum() == 0
    observed = np.delete(counts.numpy(), special)
    assert observed.sum() > 5000
    _, p_value = stats.chisquare(observed)  # H0: uniform over the non-special ids
    assert p_value > 1e-3, (p_value, observed.max(), observed.min())
