"""Segment pairs for sentence-level objectives: BERT's next-sentence prediction (NSP), ALBERT's sentence order (SOP).

Follows google-research/bert `create_pretraining_data.py: create_instances_from_document`: a target length per
document (`max_seq_length - 3`, or with `short_seq_prob` a random one in [2, max]); sentences are gathered into a
chunk until it reaches the target; A is the chunk's first `randint(1, len-1)` sentences; with probability 0.5 B starts
at a random sentence of another document and the `len(chunk) - a_end` sentences that did not go into A are put back
(none for a one-sentence chunk), else B is the rest of the chunk; `truncate_seq_pair` trims the longer side from the
front or the back. So every sentence feeds segment A at most once per pass. Label 0 = B follows A, 1 = B is random.
One deliberate difference: BERT always makes a one-sentence chunk a random-next negative (with the whole sentence as
A), so negatives exceed 50% on short documents; we do so only when the coin says "random", and otherwise split the
sentence at a random word start into A and B, which keeps the labels balanced (a one-token sentence is always a
negative). The "other document" is drawn from the same `map` batch (1,000 documents) rather than the whole corpus,
so the dataset can be built in parallel and streamed; each batch has its own seeded generator.
"""

from __future__ import annotations

import random

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError

PAIR_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
        "next_sentence_label": datasets.Value("int8"),
    }
)


def truncate_seq_pair(a: list, b: list, a_starts: list, b_starts: list, max_tokens: int, rng: random.Random):
    """Trim the longer segment, from the front or the back at random, until both fit (BERT's truncate_seq_pair)."""
    while len(a) + len(b) > max_tokens:
        ids, starts = (a, a_starts) if len(a) > len(b) else (b, b_starts)
        if rng.random() < 0.5:
            del ids[0], starts[0]
        else:
            ids.pop()
            starts.pop()


def _concat(sentences: list[list[int]]) -> list[int]:
    return [token for sentence in sentences for token in sentence]


def _split_single(sentence: list[int], starts: list[int], rng: random.Random):
    """Cut a one-sentence chunk into two consecutive segments, at a random word start if it has two words."""
    cuts = [i for i in range(1, len(sentence)) if starts[i]] or list(range(1, len(sentence)))
    if not cuts:
        return None
    cut = rng.choice(cuts)
    return sentence[:cut], sentence[cut:], starts[:cut], starts[cut:]


def pair_layout(a: list[int], b: list[int], a_starts: list[int], b_starts: list[int], cls_id: int, sep_id: int):
    """`[CLS] A [SEP] B [SEP]` with segment ids 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`."""
    return (
        [cls_id, *a, sep_id, *b, sep_id],
        [0] * (len(a) + 2) + [1] * (len(b) + 1),
        [1, *a_starts, 1, *b_starts, 1],
    )


def nsp_batch(
    batch: dict[str, list],
    indices: list[int],
    cls_id: int,
    sep_id: int,
    max_seq_length: int,
    short_seq_prob: float,
    random_next_prob: float,
    seed: int,
) -> dict[str, list]:
    rng = random.Random(seed * 1_000_003 + (indices[0] if indices else 0))
    docs, doc_starts = batch["input_ids"], batch["word_starts"]
    out = {"input_ids": [], "token_type_ids": [], "word_starts": [], "next_sentence_label": []}
    max_tokens = max_seq_length - 3
    for d, (document, starts) in enumerate(zip(docs, doc_starts)):
        target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        chunk, chunk_starts, length, i = [], [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            chunk_starts.append(starts[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a, a_st = _concat(chunk[:a_end]), _concat(chunk_starts[:a_end])
                b, b_st = _concat(chunk[a_end:]), _concat(chunk_starts[a_end:])  # empty for one sentence
                is_random = len(docs) > 1 and rng.random() < random_next_prob
                if len(chunk) == 1 and not is_random:
                    # BERT makes every one-sentence chunk a negative, which skews the labels towards 1 on short
                    # documents: when the coin says "next", the sentence is cut into A and its continuation B.
                    pieces = _split_single(a, a_st, rng)
                    if pieces is None:  # one token: only a random next segment can use it, as officially
                        is_random = len(docs) > 1
                    else:
                        a, b, a_st, b_st = pieces
                if is_random:
                    other = d
                    for _ in range(10):  # BERT tries 10 times to find another document
                        other = rng.randrange(len(docs))
                        if other != d:
                            break
                    b, b_st = [], []
                    begin = rng.randrange(len(docs[other]))
                    for sentence, sentence_starts in zip(docs[other][begin:], doc_starts[other][begin:]):
                        b.extend(sentence)
                        b_st.extend(sentence_starts)
                        if len(b) >= target - len(a):
                            break
                    i -= len(chunk) - a_end  # put back the sentences that did not go into A (none for one)
                truncate_seq_pair(a, b, a_st, b_st, max_tokens, rng)
                if a and b:
                    ids, types, word_starts = pair_layout(a, b, a_st, b_st, cls_id, sep_id)
                    out["input_ids"].append(ids)
                    out["token_type_ids"].append(types)
                    out["word_starts"].append(word_starts)
                    out["next_sentence_label"].append(int(is_random))
                chunk, chunk_starts, length = [], [], 0
            i += 1
    return out


def map_segment_pairs(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    batch_function,
    features: datasets.Features,
    name: str,
    max_seq_length: int,
    num_proc: int | None = None,
    **options,
) -> datasets.Dataset | datasets.IterableDataset:
    """Run a `[CLS] A [SEP] B [SEP]` example builder over a tokenized corpus: batched `map` of 1,000 documents,
    with indices (each batch seeds its own generator), cached and parallel for a `Dataset`, lazy for a stream."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise BertologyError(f"{name} need [CLS] and [SEP] tokens; {type(tokenizer).__name__} lacks one")
    if max_seq_length < 5:
        raise BertologyError(f"max_seq_length must be at least 5 for {name}, got {max_seq_length}")
    kwargs = {
        "batched": True,
        "batch_size": 1000,
        "with_indices": True,
        "remove_columns": tokenized.column_names,
        "features": features,
        "fn_kwargs": {
            "cls_id": tokenizer.cls_token_id,
            "sep_id": tokenizer.sep_token_id,
            "max_seq_length": max_seq_length,
            **options,
        },
    }
    if isinstance(tokenized, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc=name)
    return tokenized.map(batch_function, **kwargs)


def build_nsp_pairs(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    short_seq_prob: float = 0.1,
    random_next_prob: float = 0.5,
    seed: int = 42,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """NSP examples (`input_ids`, `token_type_ids`, `word_starts`, `next_sentence_label`) from a tokenized corpus."""
    return map_segment_pairs(
        tokenized,
        tokenizer,
        nsp_batch,
        PAIR_FEATURES,
        "NSP segment pairs",
        max_seq_length,
        num_proc,
        short_seq_prob=short_seq_prob,
        random_next_prob=random_next_prob,
        seed=seed,
    )


# -- ALBERT: sentence-order prediction ---------------------------------------------------------------------------

SOP_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
        "sentence_order_label": datasets.Value("int8"),
    }
)


def sop_batch(
    batch: dict[str, list],
    indices: list[int],
    cls_id: int,
    sep_id: int,
    max_seq_length: int,
    short_seq_prob: float,
    swap_prob: float,
    seed: int,
) -> dict[str, list]:
    rng = random.Random(seed * 1_000_003 + (indices[0] if indices else 0) + 7)
    out = {"input_ids": [], "token_type_ids": [], "word_starts": [], "sentence_order_label": []}
    max_tokens = max_seq_length - 3
    for document, starts in zip(batch["input_ids"], batch["word_starts"]):
        target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        chunk, chunk_starts, length = [], [], 0
        for i, (sentence, sentence_starts) in enumerate(zip(document, starts)):
            chunk.append(sentence)
            chunk_starts.append(sentence_starts)
            length += len(sentence)
            if i < len(document) - 1 and length < target:
                continue
            if len(chunk) >= 2:
                a_end = rng.randint(1, len(chunk) - 1)
                a, a_st = _concat(chunk[:a_end]), _concat(chunk_starts[:a_end])
                b, b_st = _concat(chunk[a_end:]), _concat(chunk_starts[a_end:])
            else:  # the official code falls back to a random document here (NSP-style); we split the sentence
                pieces = _split_single(list(chunk[0]), list(chunk_starts[0]), rng)
                chunk, chunk_starts, length = [], [], 0
                if pieces is None:
                    continue
                a, b, a_st, b_st = pieces
            chunk, chunk_starts, length = [], [], 0
            truncate_seq_pair(a, b, a_st, b_st, max_tokens, rng)
            if not a or not b:
                continue
            swapped = rng.random() < swap_prob  # label 1: B then A (truncated first, so it is the pair reversed)
            if swapped:
                a, b, a_st, b_st = b, a, b_st, a_st
            ids, types, word_starts = pair_layout(a, b, a_st, b_st, cls_id, sep_id)
            out["input_ids"].append(ids)
            out["token_type_ids"].append(types)
            out["word_starts"].append(word_starts)
            out["sentence_order_label"].append(int(swapped))
    return out


def build_sop_pairs(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    short_seq_prob: float = 0.1,
    swap_prob: float = 0.5,
    seed: int = 42,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """ALBERT's sentence-order pairs (google-research/albert `create_instances_from_document`, SOP branch).

    Chunks of sentences are gathered as for NSP; A is the chunk's first `randint(1, len-1)` sentences and B the
    rest, so A and B are consecutive segments of one document (never another document); with probability
    `swap_prob` they are swapped (label 1, as `sentence_order_label` in transformers). `[CLS] A [SEP] B [SEP]`,
    token types 0/1. Two deviations, both on purpose: a one-sentence chunk is split at a random word start instead
    of the official random-document negative, so every pair is a true SOP pair; and the pair is truncated before
    the swap, so a swapped example is exactly its unswapped pair reversed.
    """
    return map_segment_pairs(
        tokenized,
        tokenizer,
        sop_batch,
        SOP_FEATURES,
        "SOP segment pairs",
        max_seq_length,
        num_proc,
        short_seq_prob=short_seq_prob,
        swap_prob=swap_prob,
        seed=seed,
    )
