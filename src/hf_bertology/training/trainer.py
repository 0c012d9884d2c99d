"""`BertologyTrainer`: the `transformers` Trainer with exact multi-objective loss scaling and component logs.

Two things the stock Trainer does not do for pretraining objectives:

1. **One count per objective.** The stock Trainer counts `labels != -100` over the micro-batches of an optimizer
   step (and across processes) and passes that one `num_items_in_batch` to the model. An objective with a
   sequence-level loss (NSP, SOP) or a loss over all tokens (ELECTRA's RTD) needs its own count. We pass a dict:
   every `labels`-like key (`labels`, `*_label`, `*_labels`) counted as `!= -100`, plus `attention_mask` (real
   tokens). The model divides each summed loss by its count, so gradient accumulation and DDP reproduce the
   gradients of one large batch exactly (tests/test_training.py checks 2N vs 2×N).
2. **Component losses in the logs.** Every scalar the model returns besides `loss` (`mlm_loss`, `nsp_loss`,
   `mlm_accuracy`, ...) is averaged over the logging window (over processes too) and logged next to `loss`, and
   next to `eval_loss` as `eval_<name>`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from transformers import Trainer


def is_count_key(key: str) -> bool:
    return key == "labels" or key.endswith("_label") or key.endswith("_labels")


class BertologyTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._components: dict[str, dict[str, list[torch.Tensor]]] = {"train": {}, "eval": {}}
        self._first_step: int | None = None

    # -- 1. counts per objective -----------------------------------------------------------------------------
    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device):
        if not batch_samples or not self.model_accepts_loss_kwargs or not isinstance(batch_samples[0], Mapping):
            return super()._get_num_items_in_batch(batch_samples, device)
        keys = [key for key in batch_samples[0] if is_count_key(key)]
        if "attention_mask" in batch_samples[0]:
            keys.append("attention_mask")
        if not keys:
            return None
        counts = torch.stack(
            [
                sum(
                    (batch[key].sum() if key == "attention_mask" else batch[key].ne(-100).sum())
                    for batch in batch_samples
                ).to(device)
                for key in keys
            ]
        )
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            counts = self.accelerator.gather(counts[None]).sum(0)
        return dict(zip(keys, counts))

    # -- 2. component losses ---------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        self._record(outputs, num_items_in_batch, model.training)
        return (loss, outputs) if return_outputs else loss

    def _record(self, outputs, num_items_in_batch, training: bool) -> None:
        if not isinstance(outputs, Mapping):
            return
        phase = "train" if training else "eval"
        # Same factor the Trainer applies to `loss` when it is normalised by counts gathered over processes.
        scaled = isinstance(num_items_in_batch, Mapping) and self.args.average_tokens_across_devices
        scale = self.accelerator.num_processes if scaled else 1
        if training and self._first_step is None:
            self._first_step = self.state.global_step
        store = self._components[phase]
        for key, value in outputs.items():
            if key == "loss" or not torch.is_tensor(value) or value.dim() != 0:
                continue
            value = value.detach().float()
            store.setdefault(key, []).append(value * scale if key.endswith("_loss") else value)

    def _summarise(self, phase: str) -> dict[str, float]:
        store = self._components[phase]
        if not store:
            return {}
        names = sorted(store)
        # Training losses are shares of an optimizer step's loss: their sum over the window / steps is the mean
        # step loss. Accuracies (and eval values, one per batch) are plain means over micro-batches.
        steps = max(1, self.state.global_step - (self._first_step or 0))
        values = torch.stack(
            [
                torch.stack(store[name]).sum() / steps
                if phase == "train" and name.endswith("_loss")
                else torch.stack(store[name]).mean()
                for name in names
            ]
        ).to(self.args.device)
        if self.accelerator.num_processes > 1:
            values = self.accelerator.gather(values[None]).mean(0)
        store.clear()
        if phase == "train":
            self._first_step = None
        prefix = "eval_" if phase == "eval" else ""
        return {f"{prefix}{name}": round(float(v), 4) for name, v in zip(names, values)}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs.update(self._summarise("train"))
        if any(key.startswith("eval_") for key in logs):
            logs.update(self._summarise("eval"))
        super().log(logs, start_time)
