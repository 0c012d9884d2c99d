"""`XLNetTrainer`: `BertologyTrainer` plus XLNet's segment memory carried from batch to batch.

`StreamBatches` lays the training examples out as Transformer-XL's streams (batch slot s always continues stream s,
on every process); `XLNetTrainer.compute_loss` feeds each training step's `mems` into the next, restarts them at
every epoch and when the batch shape changes, and evaluates without them; a checkpoint holds each process's memory
(`xlnet_mems_<rank>.safetensors`), restored when resuming mid-epoch. With `mem_len == 0` or a streamed corpus it
trains without memory, in the usual shuffled order. Why, and the official code it follows: docs/training.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.utils.data import Dataset, SequentialSampler

from ..collators.base import EXAMPLE_ID
from ..utils import BertologyError, logger
from .optimizers import OfficialOptimizers
from .trainer import BertologyTrainer, is_map_style

MEMS_FILE = "xlnet_mems_{rank}.safetensors"  # one per process: each carries the memory of its own streams


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

    @staticmethod
    def get_optimizer_cls_and_kwargs(args, model=None):
        """zihangdai/xlnet `model_utils.py:130-139`: AdamWeightDecay, without bias correction, where weight decay is
        on; TF's `AdamOptimizer`, bias-corrected, at `weight_decay == 0`; `--optim_args bias_correction=` wins."""
        return OfficialOptimizers.get_optimizer_cls_and_kwargs(args, model, bias_correction=args.weight_decay == 0)

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
        checkpoint = kwargs.get("resume_from_checkpoint")
        resumed_mid_epoch = kwargs.get("epoch") == kwargs.get("epochs_trained") and bool(
            kwargs.get("steps_trained_in_current_epoch")
        )
        if self.uses_memory and checkpoint is not None and resumed_mid_epoch:
            self._mems = self._load_mems(Path(checkpoint))
        return super()._run_epoch(*args, **kwargs)

    def _mems_file(self, folder: Path) -> Path:
        return folder / MEMS_FILE.format(rank=self.args.process_index)

    def _save_extra_state(self, folder: Path) -> None:
        super()._save_extra_state(folder)
        if self.uses_memory and self._mems is not None and folder.is_dir():
            # the memory the next step attends to: without it a resumed run's first step sees none (issue 53)
            save_file({f"mems.{i}": m.contiguous().cpu() for i, m in enumerate(self._mems)}, self._mems_file(folder))

    def _load_mems(self, checkpoint: Path) -> tuple[torch.Tensor, ...] | None:
        path = self._mems_file(checkpoint)
        if not path.is_file():
            logger.warning("%s holds no XLNet memory (an older hf_bertology's?): the memory starts empty", checkpoint)
            return None
        saved = load_file(path, device=str(self.args.device))
        return tuple(saved[f"mems.{i}"] for i in range(len(saved)))

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
