"""`XLNetTrainer`: `BertologyTrainer` plus XLNet's segment memory carried from batch to batch.

transformers 5 removed `TrainingArguments.past_index`, the Trainer's only way of carrying `mems`, and its default
order shuffles examples, so no batch continues the text of the previous one. XLNet (§2.4 of the paper, after
Transformer-XL; zihangdai/xlnet `train_gpu.py`) trains on consecutive segments of the same text streams and
attends to the cached hidden states of the previous segment. Two pieces do that here:

- `StreamBatches` orders the training examples as Transformer-XL's `batchify`: the examples (in stream order, by
  their `stream_position`) are cut into `batch_size * num_processes` contiguous streams, and batch slot s of step k
  holds example k of stream s. Under DDP, accelerate gives process p every `num_processes`-th batch, so the batches
  are laid out so that process p's slots always continue the same streams. An epoch ends all streams at once.
- `XLNetTrainer.compute_loss` feeds the `mems` returned by one training step into the next (they are already
  detached: `XLNetModel.cache_mem`), starts without them at every epoch (where every stream starts again; known on
  the host, so no step reads a device flag) or when the batch shape changes, and runs
  evaluation without memory (evaluation examples are not laid out as streams); the training memory is kept across
  an evaluation, as the streams go on after it. Micro-batches of one optimizer step are consecutive segments too,
  so gradient accumulation just works. After resuming from a checkpoint the memory starts empty.

With `config.mem_len == 0` (or a streaming dataset, whose length is unknown) training runs without memory, in the
Trainer's usual shuffled order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, SequentialSampler

from ..collators.base import EXAMPLE_ID
from ..utils import BertologyError, logger
from .trainer import BertologyTrainer, is_map_style


class StreamBatches(Dataset):
    """`dataset` re-ordered so that consecutive batches of `batch_size` continue the same streams slot by slot."""

    def __init__(self, dataset, batch_size: int, num_processes: int = 1):
        self.dataset = dataset
        self.num_streams = batch_size * num_processes
        columns = getattr(dataset, "column_names", None) or []
        if "stream_position" in columns:
            order = np.argsort(np.asarray(dataset["stream_position"]), kind="stable")  # undo any shuffle
        else:
            order = np.arange(len(dataset))
        self.steps = len(dataset) // self.num_streams
        if self.steps == 0:
            raise BertologyError(
                f"training with memory needs at least {self.num_streams} examples (batch size x processes), got "
                f"{len(dataset)}; use a larger corpus, a smaller batch, or --config_overrides mem_len=0"
            )
        streams = order[: self.steps * self.num_streams].reshape(self.num_streams, self.steps)  # (S, steps)
        self.index = streams.T.reshape(-1)  # position k * S + s -> example k of stream s

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, position: int) -> dict[str, Any]:
        index = int(self.index[position])
        # the id of the example itself (not of its slot), so its masks do not depend on the batch layout
        return {EXAMPLE_ID: index, **self.dataset[index]}


class XLNetTrainer(BertologyTrainer):
    """`BertologyTrainer` that carries XLNet's `mems` across consecutive training batches (see the module doc)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.accelerator.unwrap_model(self.model).config
        self.uses_memory = bool(getattr(config, "mem_len", 0))
        self._mems: tuple[torch.Tensor, ...] | None = None
        if self.uses_memory and self.train_dataset is not None:
            if not is_map_style(self.train_dataset):
                logger.warning("a streaming dataset cannot be laid out as memory streams: training without memory")
                self.uses_memory = False
            elif not isinstance(self.train_dataset, StreamBatches):
                self.train_dataset = StreamBatches(
                    self.train_dataset, self.args.train_batch_size, self.args.world_size
                )

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if isinstance(dataset, StreamBatches):
            return SequentialSampler(dataset)  # the order is the point
        return super()._get_train_sampler(train_dataset)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        # with remove_unused_columns=True, keep what the collator and this trainer read
        extra = [name for name in ("word_starts",) if name not in self._signature_columns]
        self._signature_columns = [*self._signature_columns, *extra]

    def _run_epoch(self, *args, **kwargs):
        self._mems = None  # every stream starts again with the epoch (`StreamBatches`)
        return super()._run_epoch(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        carry = model.training and self.uses_memory
        if carry:
            batch_size = inputs["input_ids"].shape[0]
            if self._mems is not None and self._mems[0].shape[1] == batch_size:
                inputs["mems"] = self._mems
        inputs["use_mems"] = carry
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if carry:
            mems = outputs.get("mems")
            self._mems = tuple(m.detach() for m in mems) if mems is not None else None
        return (loss, outputs) if return_outputs else loss
