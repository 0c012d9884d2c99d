"""DataCollatorForSpanMasking: SpanBERT's geometric spans and ALBERT's n-grams (docs/recipes/spanbert.md, albert.md).

Statistics use fixed seeds and synthetic blocks of whole words (1-3 pieces each), with stated tolerances.
"""

from __future__ import annotations

import random

import pytest
import torch

import hf_bertology as hb
from hf_bertology.collators import DataCollatorForSpanMasking
from hf_bertology.collators.spans import mean_span_length, span_length_distribution
from hf_bertology.data.vocab import train_tokenizer

WORDS = "the a of river bridge city music summer people sleep memory park dog fox lazy quick brown day".split()


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    texts = [
        " ".join(rng.choice(WORDS) + rng.choice(["", "ing", "ness", "ed"]) for _ in range(30)) for _ in range(200)
    ]
    return train_tokenizer(texts, "wordpiece", 300)


def make_features(tokenizer, rows: int, length: int, seed: int, ragged: bool = False) -> list[dict]:
    """Blocks `[CLS] words [SEP]` of non-special ids; words of 1-3 pieces; ragged lengths exercise padding."""
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    features = []
    for _ in range(rows):
        n = rng.randint(length // 2, length) - 2 if ragged else length - 2
        ids, starts = [], []
        while len(ids) < n:
            pieces = min(rng.choice([1, 1, 2, 3]), n - len(ids))
            ids += [rng.choice(vocab) for _ in range(pieces)]
            starts += [1] + [0] * (pieces - 1)
        features.append(
            {"input_ids": [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id], "word_starts": [1, *starts, 1]}
        )
    return features


def spans_of(collator, features):
    from hf_bertology.collators.base import pad_features

    batch = pad_features(features, collator.tokenizer.pad_token_id)
    attention = batch["attention_mask"].bool()
    candidates = attention & ~torch.isin(batch["input_ids"], collator._special)
    masked, spans = collator.sample_spans(attention, candidates, batch["word_starts"].bool(), return_spans=True)
    return batch, candidates, masked, spans


def runs(mask_row: torch.Tensor) -> list[tuple[int, int]]:
    """Maximal runs of True as (start, end_exclusive)."""
    out, start = [], None
    for i, flag in enumerate(mask_row.tolist() + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i))
            start = None
    return out


def test_length_distributions():
    assert abs(mean_span_length("geometric", 1, 10, 0.2) - 3.797) < 5e-4
    ngram = span_length_distribution("ngram", 1, 3)
    assert torch.allclose(ngram, torch.tensor([6 / 11, 3 / 11, 2 / 11], dtype=torch.float64))


def test_spanbert_span_statistics(tokenizer):
    collator = DataCollatorForSpanMasking(tokenizer, seed=1)
    lengths, share_masked, share_real = [], 0, 0
    for seed in range(7):
        features = make_features(tokenizer, 512, 256, seed)
        batch, candidates, masked, spans = spans_of(collator, features)
        lengths.append(spans[:, 3])
        share_masked += int(masked.sum())
        share_real += int(batch["attention_mask"].sum())
        word_starts = batch["word_starts"].bool() | ~candidates
        # Every span starts at a word start; all but each row's last (which the budget may cut) end at one.
        assert word_starts[spans[:, 0], spans[:, 1]].all()
        order = torch.argsort(spans[:, 0], stable=True)
        sorted_spans = spans[order]
        last_of_row = torch.ones(len(spans), dtype=torch.bool)
        last_of_row[:-1] = sorted_spans[1:, 0] != sorted_spans[:-1, 0]
        whole = sorted_spans[~last_of_row]
        ends_at_boundary = word_starts[whole[:, 0], whole[:, 2].clamp(max=word_starts.shape[1] - 1)]
        assert ends_at_boundary.all()
        # Budget: exactly ceil(0.15 * maskable) per row.
        assert torch.equal(masked.sum(1), torch.ceil(candidates.sum(1).double() * 0.15).long())
        assert not (masked & ~candidates).any()
    lengths = torch.cat(lengths)
    assert len(lengths) >= 20_000
    assert abs(lengths.float().mean().item() - 3.797) < 0.1
    observed = torch.bincount(lengths, minlength=11)[1:].double() / len(lengths)
    expected = span_length_distribution("geometric", 1, 10, 0.2)
    assert (observed - expected).abs().max() < 0.01, (observed, expected)  # ≥ 3 sigma at 20k spans
    assert abs(share_masked / share_real - 0.15) < 0.01


def test_spanbert_replacement_per_span_and_specials(tokenizer):
    collator = DataCollatorForSpanMasking(tokenizer, seed=2, sbo_max_targets=15)
    counts = {"mask": 0, "random": 0, "kept": 0}
    for seed in range(6):
        features = make_features(tokenizer, 256, 256, 100 + seed, ragged=True)
        batch = collator(features)
        original = torch.full_like(batch["input_ids"], tokenizer.pad_token_id)
        for row, f in enumerate(features):
            original[row, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        labels = batch["labels"]
        special = torch.isin(original, torch.tensor(tokenizer.all_special_ids)) | ~batch["attention_mask"].bool()
        assert (labels[special] == -100).all()  # specials and padding never masked
        assert torch.equal(labels[labels != -100], original[labels != -100])
        for row in range(len(features)):
            for start, end in runs(labels[row] != -100):
                got, was = batch["input_ids"][row, start:end], original[row, start:end]
                is_mask = got == tokenizer.mask_token_id
                assert is_mask.all() or not is_mask.any()  # never mixed inside a span
                if is_mask.all():
                    counts["mask"] += 1
                elif torch.equal(got, was):
                    counts["kept"] += 1
                else:
                    counts["random"] += 1
    total = sum(counts.values())
    assert total > 6000  # std of the 0.8 share ≈ 0.005
    assert abs(counts["mask"] / total - 0.8) < 0.02
    assert abs(counts["random"] / total - 0.1) < 0.02
    assert abs(counts["kept"] / total - 0.1) < 0.02


def test_sbo_targets(tokenizer):
    collator = DataCollatorForSpanMasking(tokenizer, seed=3, sbo_max_targets=15, mlm_probability=0.3)
    features = make_features(tokenizer, 64, 64, 7, ragged=True)
    batch = collator(features)
    labels, sbo = batch["labels"], batch["sbo_labels"]
    masked = labels != -100
    attention = batch["attention_mask"].bool()
    assert ((sbo != -100) <= masked).all()
    checked_edge = 0
    for row in range(len(features)):
        n = int(attention[row].sum())
        for start, end in runs(masked[row]):
            targets = sbo[row, start:end] != -100
            if start == 1 or end == n - 1:  # touches [CLS] or [SEP]: no SBO target
                assert not targets.any()
                checked_edge += 1
                continue
            assert targets[:15].all() and not targets[15:].any()
            assert torch.equal(sbo[row, start:end][targets], labels[row, start:end][targets])
            for i in range(start, min(end, start + 15)):
                assert batch["sbo_boundaries"][row, i].tolist() == [start - 1, end]
                assert batch["sbo_relative_positions"][row, i].item() == i - start
    assert checked_edge > 0
    assert (batch["sbo_boundaries"][sbo == -100] == 0).all()


def test_albert_ngram_statistics(tokenizer):
    collator = DataCollatorForSpanMasking(
        tokenizer, scheme="albert", span_distribution="ngram", span_upper=3, replacement_level="token", seed=4
    )
    lengths, share_masked, share_real, tokens, replaced = [], 0, 0, 0, {"mask": 0, "random": 0, "kept": 0}
    for seed in range(8):
        features = make_features(tokenizer, 512, 128, 200 + seed)
        batch, candidates, masked, spans = spans_of(collator, features)
        lengths.append(spans[:, 3])
        share_masked += int(masked.sum())
        share_real += int(batch["attention_mask"].sum())
        boundary = batch["word_starts"].bool() | ~candidates
        assert boundary[spans[:, 0], spans[:, 1]].all()  # whole words: start and end at word boundaries
        assert boundary[spans[:, 0], spans[:, 2].clamp(max=boundary.shape[1] - 1)].all()
        budget = torch.round(batch["attention_mask"].sum(1) * 0.15).long()
        assert (masked.sum(1) <= budget).all() and not (masked & ~candidates).any()
        # n-grams never overlap: their token counts add up to the mask.
        assert int((spans[:, 2] - spans[:, 1]).sum()) == int(masked.sum())
    for seed in range(2):
        features = make_features(tokenizer, 256, 128, 300 + seed)
        out = collator(features)
        chosen = out["labels"] != -100
        got, was = out["input_ids"][chosen], out["labels"][chosen]
        replaced["mask"] += int((got == tokenizer.mask_token_id).sum())
        replaced["kept"] += int((got == was).sum())
        tokens += int(chosen.sum())
    lengths = torch.cat(lengths)
    observed = torch.bincount(lengths, minlength=4)[1:].double() / len(lengths)
    assert (observed - torch.tensor([6 / 11, 3 / 11, 2 / 11], dtype=torch.float64)).abs().max() < 0.02, observed
    assert abs(share_masked / share_real - 0.15) < 0.01
    assert abs(replaced["mask"] / tokens - 0.8) < 0.02  # per token
    assert abs(replaced["kept"] / tokens - 0.1) < 0.02


def test_unigram_replacement_and_from_config(tokenizer):
    frequencies = torch.zeros(len(tokenizer))
    frequencies[[10, 11]] = 1.0
    collator = DataCollatorForSpanMasking(
        tokenizer,
        random_token_distribution="unigram",
        token_frequencies=frequencies,
        random_replace_prob=1.0,
        mask_replace_prob=0.0,
        seed=5,
    )
    batch = collator(make_features(tokenizer, 16, 64, 9))
    assert set(batch["input_ids"][batch["labels"] != -100].tolist()) <= {10, 11}

    spanbert = DataCollatorForSpanMasking.from_config(hb.get_recipe("spanbert-tiny").config, tokenizer)
    assert (spanbert.scheme, spanbert.geometric_p, spanbert.span_upper, spanbert.sbo_max_targets) == (
        "spanbert",
        0.2,
        10,
        15,
    )
    assert spanbert.replacement_level == "span"
    albert = hb.get_recipe("albert-tiny").build_collator(tokenizer)
    assert (albert.scheme, albert.span_distribution, albert.span_upper, albert.replacement_level) == (
        "albert",
        "ngram",
        3,
        "token",
    )
    assert albert.sbo_max_targets is None and "sbo_labels" not in albert(make_features(tokenizer, 2, 32, 1))


def test_word_starts_from_vocabulary(tokenizer):
    """Without `word_starts` the "##" table decides the words: on real text, where it agrees with the tokenizer's
    `word_ids()`, the spans are exactly those made with the words given, and every chosen piece's word is chosen."""
    rng = random.Random(1)
    # the vocabulary's own words, and made-up ones it splits into pieces
    made_up = ["".join(rng.choice(["qu", "zo", "xi", "va", "ky"]) for _ in range(3)) for _ in range(20)]
    texts = [" ".join(rng.choice(WORDS + made_up) for _ in range(40)) for _ in range(8)]
    encoded = tokenizer(texts, truncation=True, max_length=64)
    given = []
    for row, ids in enumerate(encoded["input_ids"]):
        words = encoded.word_ids(row)
        given.append(
            {"input_ids": ids, "word_starts": [int(w is None or w != p) for w, p in zip(words, [None, *words])]}
        )
    with_words = DataCollatorForSpanMasking(tokenizer, seed=6)(given)
    from_vocab = DataCollatorForSpanMasking(tokenizer, seed=6)([{"input_ids": f["input_ids"]} for f in given])
    assert torch.equal(from_vocab["labels"], with_words["labels"])
    assert torch.equal(from_vocab["input_ids"], with_words["input_ids"])
    chosen = from_vocab["labels"] != -100
    pieces = tokenizer.convert_ids_to_tokens(with_words["labels"].where(chosen, 0).flatten().tolist())
    continuation = torch.tensor([p.startswith("##") for p in pieces]).view_as(chosen) & chosen
    assert continuation.sum() >= 10  # multi-piece words were chosen
    rows, cols = continuation.nonzero(as_tuple=True)
    assert chosen[rows, cols - 1].all()  # a chosen continuation's preceding piece is chosen: whole words


def _one_by_one(collator, input_ids, candidates, word_starts, key) -> list[bool]:
    """The official loops run one anchor at a time in plain Python on one row, with the collator's own draws (the
    anchor order from `ANCHOR_ORDER`, each anchor's length from `SPAN_LENGTH`): the reference for the vectorised
    rounds, which try many anchors at once."""
    from hf_bertology.collators.base import Draws
    from hf_bertology.collators.spans import ANCHOR_ORDER

    length = len(input_ids)
    draws = Draws(torch.tensor([key]))
    order = draws.uniform(ANCHOR_ORDER, length)[0].tolist()
    cand = candidates.tolist()
    starts = [
        bool(w) or not c or (i > 0 and not cand[i - 1]) for i, (w, c) in enumerate(zip(word_starts.tolist(), cand))
    ]
    word_start_positions = [i for i in range(length) if starts[i]] + [length]
    word_of = [sum(starts[: i + 1]) - 1 for i in range(length)]

    def segment_end(i):
        while i < length and cand[i]:
            i += 1
        return i

    def gram_end(start, words):  # `words` whole words from `start`, cut at the next special token or padding
        return min(
            word_start_positions[min(word_of[start] + words, len(word_start_positions) - 1)], segment_end(start)
        )

    def drawn_length(anchor):
        return int(collator.sample_lengths(draws, torch.tensor([[anchor]]))[0, 0])

    budget = int(collator.budget(torch.ones(1, length, dtype=torch.bool), candidates[None])[0])
    if collator.scheme == "albert":  # ALBERT's budget counts every real token of the row
        real = int((input_ids != collator.tokenizer.pad_token_id).sum())
        budget = int(collator.budget(torch.arange(length)[None] < real, candidates[None])[0])
    masked = [False] * length
    if collator.scheme == "spanbert":
        for anchor in sorted((i for i in range(length) if cand[i]), key=lambda i: order[i]):
            if budget == 0:
                break
            if masked[anchor]:
                continue  # the official loop draws again
            start = word_start_positions[word_of[anchor]]
            for position in range(start, gram_end(start, drawn_length(anchor))):
                if budget and not masked[position]:
                    masked[position], budget = True, budget - 1
    else:
        for anchor in sorted((i for i in range(length) if cand[i] and starts[i]), key=lambda i: order[i]):
            if budget == 0:
                break
            ends = [gram_end(anchor, m) for m in range(drawn_length(anchor), 0, -1)]  # longest first
            fitting = [end for end in ends if end - anchor <= budget]
            if not fitting or any(masked[anchor : fitting[0]]):
                continue
            masked[anchor : fitting[0]] = [True] * (fitting[0] - anchor)
            budget -= fitting[0] - anchor
    return masked


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"mlm_probability": 0.5},  # many spans per row: several rounds, spans that merge
        {"scheme": "albert", "span_distribution": "ngram", "span_upper": 3},
        {"scheme": "albert", "span_distribution": "ngram", "span_upper": 3, "mlm_probability": 0.4},
        {"scheme": "albert", "span_distribution": "geometric", "span_upper": 10, "max_predictions_per_seq": 9},
        {"mlm_probability": 0.5, "max_anchors": 5},  # many small rounds
        {"scheme": "albert", "span_distribution": "ngram", "span_upper": 3, "max_anchors": 5},
        {"scheme": "albert", "span_distribution": "ngram", "span_upper": 1},  # single words: nothing can overlap
    ],
)
def test_rounds_mask_exactly_as_one_anchor_at_a_time(tokenizer, overrides, monkeypatch):
    """The vectorised rounds (many anchors per round, the taken ones found as the fixed point of the sequential
    rule) give exactly the masks of the official one-anchor-at-a-time loop on the same draws, row by row."""
    from hf_bertology.collators import span_rounds
    from hf_bertology.collators.base import Draws, pad_features

    overrides = dict(overrides)
    monkeypatch.setattr(
        span_rounds, "MAX_ANCHORS_PER_ROUND", overrides.pop("max_anchors", span_rounds.MAX_ANCHORS_PER_ROUND)
    )
    collator = DataCollatorForSpanMasking(tokenizer, seed=0, **overrides)
    features = make_features(tokenizer, 40, 160, 11, ragged=True)
    batch = pad_features(features, tokenizer.pad_token_id)
    attention = batch["attention_mask"].bool()
    candidates = attention & ~torch.isin(batch["input_ids"], collator._special)
    draws = Draws.for_examples(0, 0, range(len(features)))
    masked, _ = collator.sample_spans(attention, candidates, batch["word_starts"].bool(), draws=draws)
    for row in range(len(features)):
        expected = _one_by_one(
            collator, batch["input_ids"][row], candidates[row], batch["word_starts"][row], int(draws.keys[row])
        )
        assert masked[row].tolist() == expected, row
