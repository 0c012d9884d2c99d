"""What every collator shares: padding list features into tensors, the random draws, word starts, the positions
that may be predicted, and BERT's treatment of the chosen ones ([MASK] / random token / unchanged).

Written here rather than taken from `DataCollatorWithPadding`: `tokenizer.pad` converts each feature through
Python objects and is the slowest part of transformers' MLM collator; one numpy fill per row is several times
faster (benchmarks/sparse_mlm.py measures the whole collator).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError

# The feature key of an example's id (see `RandomSource`): read by the collator, never passed to the model.
EXAMPLE_ID = "example_id"
# Per-token keys padded to the batch length, with their padding value (`None`: the tokenizer's pad id).
SEQUENCE_KEYS: dict[str, int | None] = {
    "input_ids": None,
    "token_type_ids": 0,
    "word_starts": 1,
    "special_tokens_mask": 1,
    "document_starts": 0,  # packed documents (data.packing.pack_documents): 1 at every document's first token
}


def pad_features(
    features: Sequence[dict[str, Any]],
    pad_token_id: int,
    pad_to_multiple_of: int | None = None,
    padding_side: str = "right",
) -> dict[str, torch.Tensor]:
    """Pad the per-token keys of `features` into `(batch, length)` tensors and stack the per-example scalars.

    Returns `attention_mask` too (1 on real tokens). Keys other than SEQUENCE_KEYS must be scalars or equal-length
    sequences (e.g. `next_sentence_label`); they are stacked as they are. `example_id` (for the random draws, see
    `RandomSource`) is left out: the model never sees it.
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
        if key not in SEQUENCE_KEYS and key != EXAMPLE_ID:
            batch[key] = torch.tensor([f[key] for f in features])
    return batch


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment: counters map to well-spread 64-bit states
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele et al. 2014, as in `java.util.SplittableRandom`): a bijective 64-bit hash."""
    x = x ^ (x >> np.uint64(30))
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    return x ^ (x >> np.uint64(31))


class Draws:
    """Counter-based random numbers for one batch: a pure function of each row's 64-bit key and a counter.

    Entry `(b, j)` of `uniform(stream, n)` is `hash(key[b] + (stream * 2^32 + j) * golden)` (SplitMix64 on a
    counter, the idea of Salmon et al. 2011 "Parallel random numbers: as easy as 1, 2, 3"), mapped to a float64
    in [0, 1) with 53 random bits. So a row's draws depend on its key and on the position or index they are for,
    never on the other rows of the batch, the padded length or the order of the calls, and the whole batch is one
    vectorised numpy pass (as fast as `torch.rand` on this machine). With keys from `(seed, epoch, example id)`
    every mask is reproducible from those three numbers (fairseq's `MaskTokensDataset` seeds each example from
    `(seed, epoch, index)` for the same reason).
    """

    def __init__(self, keys: torch.Tensor):
        self.keys = keys  # (B,) int64: the bits of each row's uint64 key

    @classmethod
    def for_examples(cls, seed: int, epoch: int, example_ids: Sequence[int] | np.ndarray) -> Draws:
        """Keys of the examples `example_ids` in `epoch` of a run seeded with `seed`."""
        ids = np.asarray(example_ids, dtype=np.int64).astype(np.uint64)
        head = _mix64(np.array([seed % 2**64], dtype=np.uint64) + _GOLDEN)
        head = _mix64(head ^ np.array([epoch % 2**64], dtype=np.uint64))
        return cls(torch.from_numpy(_mix64(head + ids * _GOLDEN).view(np.int64)))

    @classmethod
    def fresh(cls, rows: int, generator: torch.Generator | None = None) -> Draws:
        """Keys drawn from a torch generator (None: the global one): new numbers on every call."""
        base = torch.randint(-(2**63), 2**63 - 1, (1,), generator=generator).numpy().view(np.uint64)
        return cls(torch.from_numpy(_mix64(base + np.arange(rows, dtype=np.uint64) * _GOLDEN).view(np.int64)))

    def __getitem__(self, rows) -> Draws:
        """The draws of a subset of the rows (`rows`: an index or bool tensor)."""
        return Draws(self.keys[rows])

    def __len__(self) -> int:
        return len(self.keys)

    def uniform(self, stream: int, counters: int | torch.Tensor) -> torch.Tensor:
        """`(B, n)` float64 uniforms in [0, 1) for the counters `0..n-1` (`counters=n`) or a `(B, K)` tensor of them.

        `stream` (a small int) separates the uses (positions to mask, replacements, span lengths, ...) so that two
        uses of the same position are independent.
        """
        keys = self.keys.numpy().view(np.uint64)[:, None]  # (B, 1)
        if isinstance(counters, int):
            counter = np.arange(counters, dtype=np.uint64)[None, :]
        else:
            counter = counters.numpy().astype(np.uint64)
        bits = _mix64(keys + (counter + np.uint64(stream << 32)) * _GOLDEN)
        return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)

    def uniform_at(self, stream: int, rows: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
        """`(N,)` float64: `uniform(stream, n)[rows, counters]` computed for those N entries only (a collator that
        needs draws at its few masked positions hashes those, not the whole `(B, L)` batch)."""
        keys = self.keys.numpy().view(np.uint64)[rows.numpy()]
        bits = _mix64(keys + (counters.numpy().astype(np.uint64) + np.uint64(stream << 32)) * _GOLDEN)
        return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)

    def token_keys(self, stream: int, length: int) -> torch.Tensor:
        """`(B, length)` int64: the 64-bit key of each row and position that `uniform` maps to a float, handed to
        the model for draws it makes itself (ELECTRA's generator samples its replacements with noise keyed by
        them), so those too depend on (seed, epoch, example, position) only, not on the batch or the process."""
        keys = self.keys.numpy().view(np.uint64)[:, None]  # (B, 1)
        counter = np.arange(length, dtype=np.uint64)[None, :]
        return torch.from_numpy(_mix64(keys + (counter + np.uint64(stream << 32)) * _GOLDEN).view(np.int64))

    def integers(self, stream: int, counters: int | torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
        """`(B, n)` int64 uniform in `[0, high)` (`high`: an int or a tensor broadcast against the result)."""
        return (self.uniform(stream, counters) * high).long()


class RandomSource:
    """Where a collator's randomness comes from: `(seed, epoch, example id)` when the features carry an id.

    Features with an `example_id` (`BertologyTrainer` adds the dataset index; any dataset may carry its own) get
    keys from `(seed, epoch, example_id)`, where `seed` is the collator's `seed`, else the run's seed
    (`set_run_seed`: the Trainer passes `TrainingArguments.data_seed` or `seed`), and `epoch` is set with
    `set_epoch` (the Trainer does it at every epoch start). The masks of an example are then the same whatever
    the batch size, the dataloader workers, the processes, or an interruption and resumption.

    Features without ids get fresh keys on every call: `seed=None` from torch's global generator (seeded and
    checkpointed by the Trainer; a DataLoader worker's is seeded per epoch and worker), `seed=int` from a private
    generator seeded with `seed + 1_000_003 · worker id` the first time it is used in a process.
    """

    def __init__(self, seed: int | None):
        self.seed = seed
        self.run_seed = 0
        self.epoch = 0
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

    def draws(self, features: Sequence[dict[str, Any]]) -> Draws:
        """The batch's draws: keyed by the features' example ids if they have them, else fresh."""
        if EXAMPLE_ID in features[0]:
            seed = self.seed if self.seed is not None else self.run_seed
            return Draws.for_examples(seed, self.epoch, [f[EXAMPLE_ID] for f in features])
        return Draws.fresh(len(features), self.generator())

    def __getstate__(self):  # a generator does not pickle (DataLoader workers); re-seed in the worker
        return {**self.__dict__, "_generator": None, "_worker": None}


class ExampleSeeded:
    """What the Trainer calls on a collator whose draws are keyed by `(seed, epoch, example id)`."""

    _random: RandomSource

    @property
    def epoch(self) -> int:
        """The epoch whose masks the collator draws now."""
        return self._random.epoch

    def set_epoch(self, epoch: int) -> None:
        """Masks of epoch `epoch` from now on (`BertologyTrainer` calls it at every epoch start)."""
        self._random.epoch = int(epoch)

    def set_run_seed(self, seed: int) -> None:
        """The seed of example-keyed draws when the collator was built with `seed=None` (the Trainer's seed)."""
        self._random.run_seed = int(seed)

    def _draws_or_fresh(self, draws: Draws | None, rows: int) -> Draws:
        """`draws` when the caller has the batch's (keyed by example), else fresh ones for `rows` rows (a step
        called on its own: tests, `bertology show-mask`)."""
        return draws if draws is not None else Draws.fresh(rows, self._random.generator())


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


def id_table(tokenizer: PreTrainedTokenizerBase, ids) -> torch.Tensor:
    """`(vocab,)` bool, True at `ids`: one gather per batch instead of `isin` (the vocabulary is small next to
    B × L). Long enough for every id of the tokenizer and every id given."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    table = torch.zeros(max(len(tokenizer), int(ids.max()) + 1 if ids.numel() else 0), dtype=torch.bool)
    table[ids] = True
    return table


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


def prediction_inputs(
    batch: dict[str, torch.Tensor], is_special: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`(input_ids, attention, candidates, word_starts)` of a padded batch, whose `word_starts` and
    `special_tokens_mask` it pops (the model never sees them): candidates are the real tokens that neither
    `is_special(input_ids)` nor the features' special-tokens mask rule out, the positions a collator may predict."""
    word_starts = batch.pop("word_starts", None)
    special_mask = batch.pop("special_tokens_mask", None)
    input_ids, attention = batch["input_ids"], batch["attention_mask"].bool()
    candidates = attention & ~is_special(input_ids)
    if special_mask is not None:
        candidates &= ~special_mask.bool()
    return input_ids, attention, candidates, word_starts


class WordStartLookup:
    """Mixin of the collators that need word starts: the features' own, else the tokenizer's `word_start_table`."""

    tokenizer: PreTrainedTokenizerBase
    _word_start_table = None  # built on first use: features from hf_bertology.data carry their word starts

    def _word_starts(self, input_ids: torch.Tensor, word_starts: torch.Tensor | None) -> torch.Tensor:
        """`(B, L)`: `word_starts` if the features had them, else the vocabulary's guess for each of `input_ids`."""
        if word_starts is not None:
            return word_starts
        if self._word_start_table is None:
            self._word_start_table = word_start_table(self.tokenizer)
        return self._word_start_table[input_ids]


class Treatment:
    """Mixin of the masked-LM collators (fields `tokenizer`, `mask_replace_prob`, `random_replace_prob`): BERT's
    treatment of the positions to predict."""

    tokenizer: PreTrainedTokenizerBase
    mask_replace_prob: float
    random_replace_prob: float

    def treat(
        self,
        input_ids: torch.Tensor,
        rows: torch.Tensor,
        columns: torch.Tensor,
        draw: torch.Tensor,
        random_ids: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """`input_ids` with each position `(rows, columns)` replaced by its uniform `draw`: below `mask_replace_prob`
        the mask token, in the next `random_replace_prob` a token of `random_ids(rows, columns)` (called for those
        positions only), else unchanged."""
        to_mask = draw < self.mask_replace_prob
        to_random = (draw >= self.mask_replace_prob) & (draw < self.mask_replace_prob + self.random_replace_prob)
        corrupted = input_ids.clone()
        corrupted[rows[to_mask], columns[to_mask]] = self.tokenizer.mask_token_id
        if bool(to_random.any()):
            rows, columns = rows[to_random], columns[to_random]
            corrupted[rows, columns] = random_ids(rows, columns)
        return corrupted


class CollatorWrapper:
    """A collator around another: callers (the Trainer, `bertology show-mask`) read the wrapped one's settings
    (tokenizer, seed, `set_epoch`, ...) through it. Subclasses define `__call__`."""

    def __init__(self, collator):
        self.collator = collator

    def __getattr__(self, name):
        if "collator" not in self.__dict__:  # while unpickling (DataLoader workers under spawn)
            raise AttributeError(name)
        return getattr(self.__dict__["collator"], name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.collator!r})"
