"""ELECTRA's pretraining examples: packed sentences of one document, split into one or two segments (no NSP).

Follows google-research/electra `build_pretraining_dataset.py: ExampleBuilder`:

- Sentences of a document are gathered until their length reaches the target length (or the document ends);
  examples never cross documents. The target is `max_seq_length`, except that after each example, with
  probability 0.05, the next one gets a random target in [5, max_seq_length].
- With probability 0.1 the example is a single segment (`[CLS] A [SEP]`). Otherwise A aims at
  `(target - 3) // 2` tokens: a sentence joins A if A is empty or it fits under that length; a sentence that would
  overflow it still joins A with probability 0.5 while B is empty; every later sentence goes to B.
- A is cut to `max_seq_length - 2` tokens and B to what is left after `[CLS] A [SEP] ... [SEP]`; the cut tokens
  are dropped, as officially. Segment ids are 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`.

One seeded generator per `map` batch (1,000 documents), so the dataset can be built in parallel and streamed.
"""

from __future__ import annotations

import random

import datasets
from transformers import PreTrainedTokenizerBase

from .pairs import map_segment_pairs

SEGMENT_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
    }
)

SINGLE_SEGMENT_PROB = 0.1  # "small chance to only have one segment as in classification tasks"
RANDOM_LENGTH_PROB = 0.05  # "small chance for random-length instead of max_length-length example"


def split_segments(
    sentences: list[tuple[list[int], list[int]]], target: int, max_seq_length: int, rng: random.Random
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(A ids, A word starts, B ids, B word starts) from the gathered `(ids, starts)` sentences."""
    first_target = float("inf") if rng.random() < SINGLE_SEGMENT_PROB else (target - 3) // 2
    a, a_starts, b, b_starts = [], [], [], []
    for ids, starts in sentences:
        if not a or len(a) + len(ids) < first_target or (not b and len(a) < first_target and rng.random() < 0.5):
            a += ids
            a_starts += starts
        else:
            b += ids
            b_starts += starts
    a, a_starts = a[: max_seq_length - 2], a_starts[: max_seq_length - 2]
    room = max(0, max_seq_length - len(a) - 3)
    return a, a_starts, b[:room], b_starts[:room]


def electra_batch(
    batch: dict[str, list], indices: list[int], cls_id: int, sep_id: int, max_seq_length: int, seed: int
) -> dict[str, list]:
    rng = random.Random(seed * 1_000_003 + (indices[0] if indices else 0))
    out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "word_starts": []}
    target = max_seq_length

    def emit(sentences):
        nonlocal target
        a, a_starts, b, b_starts = split_segments(sentences, target, max_seq_length, rng)
        ids, types, starts = [cls_id, *a, sep_id], [0] * (len(a) + 2), [1, *a_starts, 1]
        if b:
            ids += [*b, sep_id]
            types += [1] * (len(b) + 1)
            starts += [*b_starts, 1]
        out["input_ids"].append(ids)
        out["token_type_ids"].append(types)
        out["word_starts"].append(starts)
        target = rng.randint(5, max_seq_length) if rng.random() < RANDOM_LENGTH_PROB else max_seq_length

    for doc_ids, doc_starts in zip(batch["input_ids"], batch["word_starts"]):
        sentences, length = [], 0
        for ids, starts in zip(doc_ids, doc_starts):
            if not ids:
                continue
            sentences.append((list(ids), list(starts)))
            length += len(ids)
            if length >= target:
                emit(sentences)
                sentences, length = [], 0
        if sentences:  # the document ends: never carried into the next one
            emit(sentences)
    return out


def build_electra_segments(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    seed: int = 42,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """ELECTRA examples (`input_ids`, `token_type_ids`, `word_starts`) from a tokenized corpus."""
    return map_segment_pairs(
        tokenized, tokenizer, electra_batch, SEGMENT_FEATURES, "ELECTRA segments", max_seq_length, num_proc, seed=seed
    )
