"""Segment builders use each sentence once per pass: NSP (BERT), SOP (ALBERT) and ELECTRA's segments.

google-research/bert `create_instances_from_document` puts back only the `len(chunk) - a_end` sentences that did not
go into segment A when B is drawn from another document (none for a one-sentence chunk), so every sentence feeds
segment A at most once per pass; a random next segment B may reuse another document's sentences.
"""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import datasets
import pytest

from hf_bertology.data import build_electra_segments, build_nsp_pairs, build_sop_pairs

TOK = SimpleNamespace(cls_token_id=2, sep_token_id=3)
STRIDE = 1000  # token = STRIDE * (sentence + 1) + position: every token names its sentence


def corpus(n_docs: int, seed: int, max_sentences: int, min_tokens: int = 1, max_tokens: int = 30) -> datasets.Dataset:
    """Documents of 1..max_sentences sentences whose token ids name the sentence they come from."""
    rng = random.Random(seed)
    rows, sentence = {"input_ids": [], "word_starts": []}, 0
    for _ in range(n_docs):
        ids, starts = [], []
        for _ in range(rng.randint(1, max_sentences)):
            n = rng.randint(min_tokens, max_tokens)
            ids.append([STRIDE * (sentence + 1) + k for k in range(n)])
            starts.append([int(k % 3 == 0) for k in range(n)])  # words of up to three pieces
            sentence += 1
        rows["input_ids"].append(ids)
        rows["word_starts"].append(starts)
    return datasets.Dataset.from_dict(rows)


def segments(ids: list[int]) -> tuple[list[int], list[int]]:
    """`[CLS] A [SEP] (B [SEP])` -> (A, B)."""
    sep = ids.index(TOK.sep_token_id)
    return ids[1:sep], ids[sep + 1 : -1]


def sentences_of(tokens: list[int]) -> set[int]:
    return {token // STRIDE - 1 for token in tokens}


def a_counts(examples: datasets.Dataset) -> Counter:
    """How many examples each sentence feeds segment A of."""
    return Counter(s for ids in examples["input_ids"] for s in sentences_of(segments(ids)[0]))


@pytest.mark.parametrize("seed", range(6))
def test_nsp_one_sentence_documents_feed_segment_a_once(seed):
    docs = corpus(1500, seed, max_sentences=1, min_tokens=2)
    pairs = build_nsp_pairs(docs, TOK, max_seq_length=64, seed=seed)
    counts = a_counts(pairs)
    assert max(counts.values()) == 1  # before the fix: 2 to 12 on most seeds (the sentence was put back)
    assert len(pairs) == len(docs)  # one example per document: a negative or the sentence split into A, B
    labels = pairs["next_sentence_label"]
    assert sum(labels) / len(labels) == pytest.approx(0.5, abs=0.04)  # 3 sigma at n = 1500


@pytest.mark.parametrize("seed", range(3))
def test_nsp_mixed_documents_feed_segment_a_at_most_once(seed):
    docs = corpus(1200, 100 + seed, max_sentences=8)
    pairs = build_nsp_pairs(docs, TOK, max_seq_length=64, seed=seed)
    counts = a_counts(pairs)
    assert max(counts.values()) == 1
    labels = pairs["next_sentence_label"]
    assert len(labels) > 2000
    assert sum(labels) / len(labels) == pytest.approx(0.5, abs=0.03)  # 3 sigma at n = 2500
    for ids, label in zip(pairs["input_ids"], labels):
        a, b = segments(ids)
        if label == 0:  # B continues A: sentences of one document, in order
            assert min(sentences_of(b)) >= max(sentences_of(a))


@pytest.mark.parametrize("max_sentences", [1, 8])
def test_sop_and_electra_use_each_sentence_once(max_sentences):
    docs = corpus(1000, 7, max_sentences=max_sentences)
    for examples in (
        build_sop_pairs(docs, TOK, max_seq_length=64, seed=0),
        build_electra_segments(docs, TOK, max_seq_length=64, seed=0),
    ):
        counts = Counter(s for ids in examples["input_ids"] for s in sentences_of([t for t in ids if t >= STRIDE]))
        assert max(counts.values()) == 1
