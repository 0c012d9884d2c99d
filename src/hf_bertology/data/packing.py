"""Packing sentences into `max_seq_length` blocks: RoBERTa's FULL-SENTENCES and DOC-SENTENCES (Liu et al. §4.2).

- FULL-SENTENCES: contiguous whole sentences, which may cross document boundaries, with an extra separator token
  between documents (fairseq `TokenBlockDataset`, `sample_break_mode: complete`). Documents are carried across
  within one `map` batch (1,000 documents); a block never spans two batches.
- DOC-SENTENCES: the same, but a block never crosses a document; the last block of a document may be short.

A sentence longer than a block is cut into block-sized pieces. Each block is `[CLS] ... [SEP]` (`<s> ... </s>`).

Also the token stream (`pack_tokens`, DeBERTa) and packed documents (`pack_documents`, ModernBERT: whole documents
best-fit into rows, kept apart by the padding-free batch).
"""

from __future__ import annotations

import bisect

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError

PACKED_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
    }
)


def block_tokens(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int]:
    """(start, end) special ids of a single-segment block: [CLS]/[SEP] or <s>/</s>."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or end is None:
        raise BertologyError(f"the tokenizer ({type(tokenizer).__name__}) has no [CLS]/<s> or [SEP]/</s> token")
    return start, end


def pack_batch(
    batch: dict[str, list], start_id: int, end_id: int, max_seq_length: int, cross_documents: bool
) -> dict[str, list]:
    capacity = max_seq_length - 2
    out_ids: list[list[int]] = []
    out_starts: list[list[int]] = []
    ids: list[int] = []
    starts: list[int] = []

    def flush():
        if ids:
            out_ids.append([start_id, *ids, end_id])
            out_starts.append([1, *starts, 1])
            ids.clear()
            starts.clear()

    for doc_ids, doc_starts in zip(batch["input_ids"], batch["word_starts"]):
        for sentence, sentence_starts in zip(doc_ids, doc_starts):
            for begin in range(0, len(sentence), capacity):
                piece = sentence[begin : begin + capacity]
                if len(ids) + len(piece) > capacity:
                    flush()
                ids.extend(piece)
                starts.extend(sentence_starts[begin : begin + capacity])
        if not cross_documents:
            flush()
        elif ids:
            if len(ids) + 1 > capacity:
                flush()  # the block's own end token already separates the documents
            else:
                ids.append(end_id)  # the extra separator between documents
                starts.append(1)
    flush()
    return {"input_ids": out_ids, "word_starts": out_starts}


def pack_sentences(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    cross_documents: bool = True,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """Blocks of at most `max_seq_length` tokens (specials included) from a tokenized corpus."""
    desc = "FULL-SENTENCES" if cross_documents else "DOC-SENTENCES"
    return _map_blocks(
        tokenized,
        tokenizer,
        max_seq_length,
        num_proc,
        pack_batch,
        PACKED_FEATURES,
        desc,
        cross_documents=cross_documents,
    )


def pack_token_batch(batch: dict[str, list], start_id: int, end_id: int, max_seq_length: int) -> dict[str, list]:
    """One token stream (documents joined by an end token), cut every `max_seq_length - 2` tokens, even mid-sentence."""
    capacity = max_seq_length - 2
    ids: list[int] = []
    starts: list[int] = []
    for doc_ids, doc_starts in zip(batch["input_ids"], batch["word_starts"]):
        if ids:
            ids.append(end_id)  # the separator between documents
            starts.append(1)
        for sentence, sentence_starts in zip(doc_ids, doc_starts):
            ids.extend(sentence)
            starts.extend(sentence_starts)
    blocks = range(0, len(ids), capacity)
    return {
        "input_ids": [[start_id, *ids[i : i + capacity], end_id] for i in blocks],
        "word_starts": [[1, *starts[i : i + capacity], 1] for i in blocks],
    }


def pack_tokens(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """Full blocks of exactly `max_seq_length` tokens (the last of each 1,000-document batch may be short): sequence
    packing without padding (ModernBERT), and DeBERTa's `prepare_data.py` (the corpus cut every 510 tokens)."""
    return _map_blocks(
        tokenized, tokenizer, max_seq_length, num_proc, pack_token_batch, PACKED_FEATURES, "packed token stream"
    )


def _map_blocks(tokenized, tokenizer, max_seq_length: int, num_proc, function, features, desc: str, **options):
    """`tokenized` mapped by `function` in batches of 1,000 documents, given the tokenizer's block ids, the length and
    `options`; a `Dataset` in `num_proc` processes with a progress bar, a stream lazily."""
    if max_seq_length < 3:
        raise BertologyError(f"max_seq_length must be at least 3, got {max_seq_length}")
    start_id, end_id = block_tokens(tokenizer)
    kwargs = {
        "batched": True,
        "batch_size": 1000,
        "remove_columns": tokenized.column_names,
        "features": features,
        "fn_kwargs": {"start_id": start_id, "end_id": end_id, "max_seq_length": max_seq_length, **options},
    }
    if isinstance(tokenized, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc=desc)
    return tokenized.map(function, **kwargs)


DOCUMENT_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "word_starts": datasets.Sequence(datasets.Value("int8")),
        "document_starts": datasets.Sequence(datasets.Value("int8")),
    }
)


def document_units(batch: dict[str, list], start_id: int, end_id: int, max_seq_length: int) -> tuple[list, list]:
    """Every document as `[CLS] doc [SEP]` units of at most `max_seq_length` tokens: (ids, word starts) lists.

    The official loader tokenizes a document with `truncation=True, max_length=max_seq_len` (AnswerDotAI/ModernBERT
    `src/text_data.py:491`, pretraining_documentation branch), dropping the rest; here the rest of a long document
    becomes further units, each `[CLS] piece [SEP]` with its own positions, so a small corpus is not mostly thrown
    away (docs/recipes/modernbert.md).
    """
    capacity = max_seq_length - 2
    units_ids, units_starts = [], []
    for doc_ids, doc_starts in zip(batch["input_ids"], batch["word_starts"]):
        ids = [token for sentence in doc_ids for token in sentence]
        starts = [flag for sentence in doc_starts for flag in sentence]
        for begin in range(0, len(ids), capacity):
            units_ids.append([start_id, *ids[begin : begin + capacity], end_id])
            units_starts.append([1, *starts[begin : begin + capacity], 1])
    return units_ids, units_starts


def best_fit_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Unit indices grouped into rows of at most `capacity` tokens: best-fit decreasing (each unit, longest first,
    goes to the open row it fills most tightly), the packing the official `GreedyBestFitSequencePacker`
    (`src/sequence_packer.py:find_best_fit`) does over its buffer."""
    rows: list[list[int]] = []
    spaces: list[tuple[int, int]] = []  # (remaining space, row index), sorted
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        at = bisect.bisect_left(spaces, (lengths[index], -1))
        if at == len(spaces):
            rows.append([index])
            space, row = capacity - lengths[index], len(rows) - 1
        else:
            space, row = spaces.pop(at)
            rows[row].append(index)
            space -= lengths[index]
        if space > 0:
            bisect.insort(spaces, (space, row))
    return rows


def pack_document_batch(batch: dict[str, list], start_id: int, end_id: int, max_seq_length: int) -> dict[str, list]:
    units_ids, units_starts = document_units(batch, start_id, end_id, max_seq_length)
    out: dict[str, list] = {"input_ids": [], "word_starts": [], "document_starts": []}
    for row in best_fit_rows([len(u) for u in units_ids], max_seq_length):
        out["input_ids"].append([token for i in row for token in units_ids[i]])
        out["word_starts"].append([flag for i in row for flag in units_starts[i]])
        out["document_starts"].append([int(j == 0) for i in row for j in range(len(units_ids[i]))])
    return out


def pack_documents(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """Rows of at most `max_seq_length` tokens, each holding whole documents (`[CLS] doc [SEP]` units, see
    `document_units`) packed best-fit within each 1,000-document batch, with `document_starts` (1 at every unit's
    first token). A padding-free batch (`collators.flatten`) then attends and counts positions per document, as
    ModernBERT's official unpadded sequence packing (`src/sequence_packer.py`, cu_seqlens per document)."""
    return _map_blocks(
        tokenized, tokenizer, max_seq_length, num_proc, pack_document_batch, DOCUMENT_FEATURES, "packed documents"
    )
