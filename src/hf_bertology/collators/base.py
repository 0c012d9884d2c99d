"""What every collator shares: padding list features into tensors, the random generator, word starts.

Written here rather than taken from `DataCollatorWithPadding`: `tokenizer.pad` converts each feature through
Python objects and is the slowest part of transformers' MLM collator; one numpy fill per row is several times
faster (benchmarks/sparse_mlm.py measures the whole collator).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError

# Per-token keys padded to the batch length, with their padding value (`None`: the tokenizer's pad id).
SEQUENCE_KEYS: dict[str, int | None] = {
    "input_ids": None,
    "token_type_ids": 0,
    "word_starts": 1,
    "special_tokens_mask": 1,
}


def pad_features(
    features: Sequence[dict[str, Any]],
    pad_token_id: int,
    pad_to_multiple_of: int | None = None,
    padding_side: str = "right",
) -> dict[str, torch.Tensor]:
    """Pad the per-token keys of `features` into `(batch, length)` tensors and stack the per-example scalars.

    Returns `attention_mask` too (1 on real tokens). Keys other than SEQUENCE_KEYS must be scalars or equal-length
    sequences (e.g. `next_sentence_label`); they are stacked as they are.
    """
    if not features:
        raise BertologyError("cannot collate an empty list of features")
    lengths = np.fromiter((len(f["input_ids"]) for f in features), dtype=np.int64, count=len(features))
    length = int(lengths.max())
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    positions = np.arange(length)[None, :]
    if padding_side == "right":
        attention = positions < lengths[:, None]
    else:
        attention = positions >= (length - lengths)[:, None]
    total = int(lengths.sum())
    batch: dict[str, torch.Tensor] = {}
    for key, pad_value in SEQUENCE_KEYS.items():
        if key not in features[0]:
            continue
        fill = pad_token_id if pad_value is None else pad_value
        # One flat conversion of every row's list, then one masked write: ~2x faster than a fill per row.
        flat = np.fromiter(itertools.chain.from_iterable(f[key] for f in features), dtype=np.int64, count=total)
        out = np.full((len(features), length), fill, dtype=np.int64)
        out[attention] = flat
        batch[key] = torch.from_numpy(out)
    batch["attention_mask"] = torch.from_numpy(attention.astype(np.int64))
    for key in features[0]:
        if key not in SEQUENCE_KEYS:
            batch[key] = torch.tensor([f[key] for f in features])
    return batch


class RandomSource:
    """Where a collator draws its randomness from.

    `seed=None` (the default under `Trainer`): torch's global generator. The Trainer seeds it, saves it in every
    checkpoint and restores it on resume, and a DataLoader worker's global generator is seeded from the main one
    per epoch and worker, so masks are new every pass, differ between workers, and resume exactly.
    `seed=int`: a private generator, seeded with `seed + worker id` the first time it is used in a process
    (reproducible stand-alone use, e.g. tests and benchmarks).
    """

    def __init__(self, seed: int | None):
        self.seed = seed
        self._generator: torch.Generator | None = None
        self._worker: int | None = None

    def generator(self) -> torch.Generator | None:
        if self.seed is None:
            return None
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else -1
        if self._generator is None or worker != self._worker:
            self._generator = torch.Generator().manual_seed(self.seed + max(worker, 0) * 1_000_003)
            self._worker = worker
        return self._generator

    def __getstate__(self):  # a generator does not pickle (DataLoader workers); re-seed in the worker
        return {"seed": self.seed, "_generator": None, "_worker": None}


def require_tokens(tokenizer: PreTrainedTokenizerBase, *names: str) -> None:
    """One clear error when the tokenizer lacks a special token the objective needs (`"mask"`, `"pad"`, ...)."""
    for name in names:
        if getattr(tokenizer, f"{name}_token_id", None) is None:
            hint = (
                ": masked language modelling needs one (set `tokenizer.mask_token`, or train a family tokenizer on the "
                "corpus by omitting --tokenizer_name)"
                if name == "mask"
                else ""
            )
            raise BertologyError(f"the tokenizer ({type(tokenizer).__name__}) has no {name} token{hint}")


def special_ids(tokenizer: PreTrainedTokenizerBase, keep_unk: bool = True) -> torch.Tensor:
    """Ids never chosen for prediction: every special token except `[UNK]` (BERT masks unknown words too)."""
    ids = set(tokenizer.all_special_ids)
    if keep_unk and tokenizer.unk_token_id is not None:
        ids.discard(tokenizer.unk_token_id)
    return torch.tensor(sorted(ids), dtype=torch.long)


def non_special_vocab(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """Ids random replacements are drawn from: the vocabulary without special tokens (fairseq RoBERTa)."""
    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special], dtype=torch.long)


def word_start_table(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """`(vocab,)` bool: does this token start a word? Used when features carry no `word_starts`.

    WordPiece marks continuations ("##"); byte-level BPE ("Ġ") and Unigram/SentencePiece ("▁") mark starts. A token
    right after a special token is a start in any case (the collator adds that), which covers a sentence's first
    word that BPE writes without "Ġ". Features made by `hf_bertology.data` carry exact `word_starts` from
    `word_ids()`, which is preferred.
    """
    vocab = tokenizer.get_vocab()
    table = torch.zeros(len(tokenizer), dtype=torch.bool)
    tokens = [""] * len(tokenizer)
    for token, index in vocab.items():
        if index < len(tokens):
            tokens[index] = token
    model = type(tokenizer.backend_tokenizer.model).__name__ if hasattr(tokenizer, "backend_tokenizer") else ""
    if model == "WordPiece" or any(t.startswith("##") for t in tokens[:2000]):
        prefix = getattr(getattr(tokenizer.backend_tokenizer, "model", None), "continuing_subword_prefix", "##")
        table[:] = torch.tensor([not t.startswith(prefix or "##") for t in tokens])
    else:
        table[:] = torch.tensor([t.startswith(("Ġ", "▁")) or not t for t in tokens])
    table[special_ids(tokenizer, keep_unk=False)] = True
    return table
