"""What an objective is: an `nn.Module` with a declared contract, and the batch it reads.

An objective names the batch keys it reads (`reads`; its labels among them, which the Trainer counts), says which
rows of the backbone's last layer it needs (`rows`: flat `(M,)` positions, `EVERY_ROW`, or None for none), and
returns its loss and diagnostics (`forward`: `{"loss": ..., "<name>_loss": ..., "<name>_accuracy": ..., logits}`).
It may also change the backbone's input first (`corrupt`: RTD's generator). Its heads are the model's, registered
under the plain transformers names; the objective holds none, so a checkpoint's keys do not depend on it.
`step.pretraining_step` runs a model's objectives; `Batch` answers "where are the labelled positions" once.
"""

from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import nn

from .outputs import step_mean

EVERY_ROW = "every row"  # `Objective.rows`: the whole `(B, T, H)` output (no last-layer subset)
# label key -> its flat positions' key, computed on the host by our collators (`collators/flatten.py`)
POSITIONS = {"labels": "target_positions", "sbo_labels": "sbo_target_positions"}


class Labelled(NamedTuple):
    """A label key's labelled tokens: their flat positions `at` (`(M,)`) and labels `targets` (`(M,)`)."""

    at: torch.Tensor
    targets: torch.Tensor


def labelled(labels: torch.Tensor, target_positions: torch.Tensor | None) -> Labelled:
    """The flat positions of the labelled tokens (the collator's `target_positions`, computed on the host, else a
    boolean index, which makes the host wait) and their labels."""
    at = labels.flatten().ne(-100).nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
    return Labelled(at, labels.take(at))  # `take` reads labels as flat: no view first


class Batch:
    """One step's batch as the objectives read it: its keys (labels and positions), the Trainer's counts, the packed
    layout, and each label key's labelled tokens and local count, computed once and shared."""

    def __init__(self, keys: dict, num_items_in_batch, return_metrics: bool, return_logits, cu_seq_lens, input_ids):
        self.keys = keys
        self.num_items_in_batch = num_items_in_batch
        self.return_metrics = return_metrics
        self.return_logits = return_logits  # BERT's fused head: True always returns the logits
        self.cu_seq_lens = cu_seq_lens  # a padding-free row's example boundaries, else None
        self.input_ids = input_ids  # (B, T): the backbone's input as the collator made it
        self.outputs: dict = {}  # what an objective leaves for a later one (the generator's samples)
        self.pooler_output = None  # the backbone's own pooler on each padded row's first token, where it ran
        self._labelled: dict = {}
        self._counts: dict = {}

    def get(self, key: str):
        return self.keys.get(key)

    def labelled(self, key: str = "labels") -> Labelled:
        if key not in self._labelled:
            self._labelled[key] = labelled(self.keys[key], self.keys.get(POSITIONS.get(key, "")))
        return self._labelled[key]

    def count(self, key: str = "labels") -> torch.Tensor:
        """This micro-batch's labelled tokens of `key` (`(,)`, on the device)."""
        if key not in self._counts:
            self._counts[key] = self.keys[key].ne(-100).sum()
        return self._counts[key]

    def counted(self, key: str) -> bool:
        """Whether the Trainer's counts (a dict per objective) hold `key`'s step count."""
        return isinstance(self.num_items_in_batch, Mapping) and key in self.num_items_in_batch

    def step_mean(self, key: str, local, tokens=None):
        """`outputs.step_mean` for `key`: the count that makes a summed loss the mean over the optimizer step."""
        return step_mean(self.num_items_in_batch, key, local, local if tokens is None else tokens)

    def first_tokens(self) -> torch.Tensor:
        """Flat positions of each example's first token (NSP / SOP read them): `cu_seq_lens[:-1]` in a padding-free
        row, the first column of every padded row."""
        if self.cu_seq_lens is not None:
            return self.cu_seq_lens[:-1]  # int32 is promoted by the `cat` with the targets
        ids = self.input_ids
        return torch.arange(0, ids.numel(), ids.shape[1], device=ids.device)


class Objective(nn.Module):
    """The contract. `name`: its outputs' prefix; `reads`: the batch keys it reads (labels by name); `weight`: its
    term in `loss`. `rows(batch)`: the last layer's rows it reads; `forward(model, states, batch)`: its outputs,
    `states` being those rows `(M, H)` in the order asked (or `(B, T, H)` for `EVERY_ROW`); `corrupt(model, batch,
    input_ids, inputs)`: the backbone's input ids, and outputs, before the backbone runs (default: unchanged)."""

    name: str = ""
    reads: tuple[str, ...] = ()
    weight: float = 1.0
    # ELECTRA's two-stage training (`model.training_stage`): the stages this objective runs in, and those where its
    # term counts in `loss`
    stages: tuple[str, ...] = ("joint", "generator", "discriminator")
    counted_in: tuple[str, ...] = ("joint", "generator", "discriminator")
    corrupts: bool = False  # whether `corrupt` changes the input ids
    reads_every_row: bool = False  # whether `rows` is always `EVERY_ROW` (its backbone then needs no subset)

    def rows(self, batch: Batch):
        return None

    def corrupt(self, model, batch: Batch, input_ids: torch.Tensor, inputs: dict):
        return input_ids, {}

    def forward(self, model, states, batch: Batch) -> dict:
        raise NotImplementedError
