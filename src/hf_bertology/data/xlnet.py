"""XLNet's examples: `[reuse part] A <sep> B <sep> <cls>` cut from a continuous token stream.

Follows zihangdai/xlnet `data_utils.py: create_tfrecords` (docs/recipes/xlnet.md). The documents of each `map` batch
(1,000 documents) are one stream, with `<eod>` after every document when the tokenizer has one. Example k starts at
`k * reuse_len`, so its reuse part continues example k-1's and the hidden states the model caches from it
(`cache_mem`) are the memory example k+1 needs; the rest is cut at a random sentence end into A and B. Segment ids:
0 for the reuse part, A and its `<sep>`; 1 for B and its `<sep>`; 2 for `<cls>`. B always continues A (the official
random B fed only a label no loss reads). `stream_position` numbers the examples in stream order, which the XLNet
Trainer restores after any shuffle. A stream shorter than one example still yields one short example.
"""

from __future__ import annotations

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError

XLNET_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
        "stream_position": datasets.Value("int64"),
    }
)
EXAMPLES_PER_BATCH_LIMIT = 10**9  # stream_position = first document index * limit + example index


def xlnet_batch(
    batch: dict[str, list],
    indices: list[int],
    sep_id: int,
    cls_id: int,
    eod_id: int | None,
    max_seq_length: int,
    reuse_len: int,
    seed: int,
) -> dict[str, list]:
    rng = np.random.default_rng([seed, indices[0]])
    ids: list[int] = []
    starts: list[int] = []
    sentence_end: list[bool] = []
    for doc_ids, doc_starts in zip(batch["input_ids"], batch["word_starts"]):
        for sentence, sentence_starts in zip(doc_ids, doc_starts):
            ids.extend(sentence)
            starts.extend(sentence_starts)
            sentence_end.extend([False] * (len(sentence) - 1) + [True])
        if eod_id is not None:
            ids.append(eod_id)
            starts.append(1)
            sentence_end.append(True)
    ids_array, starts_array, ends_array = np.array(ids), np.array(starts), np.array(sentence_end, dtype=bool)
    total = max_seq_length - reuse_len - 3  # tokens of A + B
    step = reuse_len or total
    out: dict[str, list] = {name: [] for name in XLNET_FEATURES}

    def emit(begin: int, reuse: int, body: int) -> None:
        a_begin = begin + reuse
        # cut A | B at a sentence end strictly inside the body (else anywhere)
        cuts = np.flatnonzero(ends_array[a_begin : a_begin + body - 1]) + 1
        cut = int(rng.choice(cuts)) if len(cuts) else (int(rng.integers(1, body)) if body > 1 else body)
        a_end, b_end = a_begin + cut, a_begin + body
        out["input_ids"].append([*ids_array[begin:a_end], sep_id, *ids_array[a_end:b_end], sep_id, cls_id])
        out["token_type_ids"].append([0] * (reuse + cut + 1) + [1] * (body - cut + 1) + [2])
        out["word_starts"].append([*starts_array[begin:a_end], 1, *starts_array[a_end:b_end], 1, 1])
        out["stream_position"].append(indices[0] * EXAMPLES_PER_BATCH_LIMIT + len(out["stream_position"]))

    begin = 0
    while begin + reuse_len + total <= len(ids):
        emit(begin, reuse_len, total)
        begin += step
    if not out["input_ids"] and ids:
        emit(0, 0, min(len(ids), max_seq_length - 3))
    return out


def build_xlnet_segments(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    reuse_len: int = 0,
    seed: int = 42,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """XLNet examples of exactly `max_seq_length` tokens (see the module docstring) from a tokenized corpus."""
    if tokenizer.sep_token_id is None or tokenizer.cls_token_id is None:
        raise BertologyError(f"the tokenizer ({type(tokenizer).__name__}) has no <sep>/<cls> token for XLNet")
    if max_seq_length < reuse_len + 5:
        raise BertologyError(
            f"max_seq_length {max_seq_length} leaves no room for A and B after reuse_len {reuse_len} "
            "(need at least reuse_len + 5); lower reuse_len with --config_overrides reuse_len=N"
        )
    eod_id = tokenizer.convert_tokens_to_ids("<eod>") if "<eod>" in tokenizer.get_vocab() else None
    kwargs = {
        "batched": True,
        "batch_size": 1000,
        "with_indices": True,
        "remove_columns": tokenized.column_names,
        "features": XLNET_FEATURES,
        "fn_kwargs": {
            "sep_id": tokenizer.sep_token_id,
            "cls_id": tokenizer.cls_token_id,
            "eod_id": eod_id,
            "max_seq_length": max_seq_length,
            "reuse_len": reuse_len,
            "seed": seed,
        },
    }
    if isinstance(tokenized, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc="XLNet segments")
    return tokenized.map(xlnet_batch, **kwargs)
