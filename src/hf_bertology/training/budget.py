"""Training compute, counted from what the model really runs on real tokens, and a budget that stops training.

`FlopCounter`: training FLOPs = 3 × forward FLOPs, the forward's measured with forward hooks: 2 · rows · d_in · d_out
for every weight matrix each time it is applied (rows: the real tokens, the predicted positions or the sequences it
runs on), plus 4 · d_attn · Σᵢ nᵢ² per attention layer. `ComputeBudgetCallback`: stops training once the FLOPs (or
the wall time) are spent, optionally makes the learning-rate schedule a function of the budget spent, and records
the training curve. What is counted and left out, and why: docs/compare.md ("How FLOPs are counted").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..utils import BertologyError

# Local names of query projections: BERT/RoBERTa/ELECTRA `attention.self.query`, ALBERT `attention.query`, XLNet's
# `rel_attn.q` parameter, and the `q_proj`/`q_lin` of other transformers models.
QUERY_NAMES = ("query", "q", "q_proj", "q_lin", "query_proj")
COUNTS = ("forward_flops", "tokens", "predicted", "sequences")  # what a FlopCounter has summed
FLOP_UNITS = ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"))  # progress-bar units


class FlopCounter:
    """Counts a model's training FLOPs batch by batch with forward hooks (see the module docstring).

    counter = FlopCounter(model)
    with counter:
        loss = model(**batch).loss
        loss.backward()
    counter.training_flops, counter.tokens

    `training_only=True` skips forward passes run in eval mode (the Trainer's evaluation): they are not training.
    """

    def __init__(self, model: nn.Module, training_only: bool = False):
        self.model = model
        self.training_only = training_only
        self._counting = True  # False during a forward pass `training_only` skips
        self.forward_flops = 0
        self.tokens = 0  # real (non-pad) tokens seen
        self.predicted = 0  # positions with a label
        self.sequences = 0
        self._handles: list = []
        self._batch: tuple[int, list[int]] | None = None  # (padded rows, real tokens per sequence)

    @property
    def training_flops(self) -> int:
        return 3 * self.forward_flops

    # -- hooks ----------------------------------------------------------------------------------------------------
    def attach(self) -> FlopCounter:
        if self._handles:
            return self
        self._handles.append(self.model.register_forward_pre_hook(self._on_batch, with_kwargs=True))
        for name, module in self.model.named_modules():
            local = name.rsplit(".", 1)[-1]
            if isinstance(module, nn.Linear):
                width = module.out_features if local in QUERY_NAMES else 0
                self._handles.append(module.register_forward_hook(self._linear_hook(module.in_features, width)))
            elif not isinstance(module, nn.Embedding):
                weights = {n: p for n, p in module.named_parameters(recurse=False) if p.dim() >= 2}
                if weights:
                    macs = sum(p.numel() for p in weights.values())
                    query = next((p for n, p in weights.items() if n in QUERY_NAMES), None)
                    width = query.numel() // query.shape[0] if query is not None else 0
                    self._handles.append(module.register_forward_hook(self._param_hook(macs, width)))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> FlopCounter:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    def _on_batch(self, module, args, kwargs):
        self._counting = module.training or not self.training_only
        if not self._counting:
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:
            raise BertologyError("FlopCounter needs input_ids to count tokens")
        mask = kwargs.get("attention_mask")
        cu_seqlens = kwargs.get("cu_seq_lens_q")
        if cu_seqlens is not None:  # a padding-free row: every token is real, examples end at cu_seqlens
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        elif mask is None:
            lengths = [input_ids.shape[-1]] * (input_ids.numel() // input_ids.shape[-1])
        else:
            lengths = mask.reshape(-1, mask.shape[-1]).sum(-1).tolist()  # one host sync per micro-batch
        labels = kwargs.get("labels")
        self._batch = (input_ids.numel(), [int(n) for n in lengths])
        self.tokens += sum(self._batch[1])
        self.sequences += len(lengths)
        if labels is not None:
            self.predicted += int(labels.ne(-100).sum())

    def _rows(self, x: torch.Tensor, width: int) -> int:
        """Vectors a matmul is applied to; all positions of a padded batch count as its real tokens only."""
        rows = x.numel() // width
        padded, lengths = self._batch or (None, None)
        return sum(lengths) if rows == padded else rows

    def _attention(self, width: int) -> int:
        lengths = self._batch[1] if self._batch else []
        return 4 * width * sum(n * n for n in lengths)

    def _linear_hook(self, in_features: int, query_width: int):
        def hook(module, inputs, output):
            if not self._counting:
                return
            flops = 2 * self._rows(inputs[0], in_features) * in_features * module.out_features
            self.forward_flops += flops + (self._attention(query_width) if query_width else 0)

        return hook

    def _param_hook(self, macs_per_row: int, query_width: int):
        def hook(module, inputs, output):
            first = next((t for t in inputs if torch.is_tensor(t)), None)
            if first is None or not self._counting:
                return
            self.forward_flops += 2 * self._rows(first, first.shape[-1]) * macs_per_row
            if query_width:
                self.forward_flops += self._attention(query_width)

        return hook


def budget_schedule(fraction: float, warmup_fraction: float) -> float:
    """Learning-rate factor after `fraction` of the budget: linear warmup, then linear decay to 0 at the budget."""
    if fraction < warmup_fraction:
        return fraction / warmup_fraction
    return max(0.0, (1.0 - fraction) / max(1e-12, 1.0 - warmup_fraction))


class ComputeBudgetCallback(TrainerCallback, ExportableState):
    """Stops training once `budget_flops` training FLOPs (counted by :class:`FlopCounter`) or `budget_seconds` of
    wall time are spent (evaluation left out of both), and records the curve of the logged losses against FLOPs,
    tokens and seconds.

    With `schedule=True` the Trainer's scheduler must be a `LambdaLR` (e.g. ``lr_scheduler_type="constant"``): its
    factor is replaced by :func:`budget_schedule` of the budget spent, so warmup and decay follow compute, not steps.

    Resumable: as an `ExportableState` its counts, seconds and curve are written into every checkpoint's
    `trainer_state.json` (atomically with the weights), and a run resumed from that checkpoint continues the same
    budget, schedule and curve instead of starting a new one.
    """

    def __init__(
        self,
        budget_flops: float | None = None,
        budget_seconds: float | None = None,
        schedule: bool = True,
        warmup_fraction: float = 0.06,
        progress: bool = True,
        description: str = "pretraining",
    ):
        if (budget_flops is None) == (budget_seconds is None):
            raise BertologyError("give exactly one budget: FLOPs or seconds")
        if (budget_flops or budget_seconds) <= 0:
            raise BertologyError("the compute budget must be positive")
        self.budget_flops, self.budget_seconds = budget_flops, budget_seconds
        self.schedule, self.warmup_fraction = schedule, warmup_fraction
        self.progress, self.description = progress, description
        self.counter: FlopCounter | None = None
        self.start: float | None = None
        self.end: float | None = None
        self.curve: list[dict[str, float]] = []
        self.steps = 0
        self._bar = None
        self._scale = 1.0
        self._seconds_before = 0.0  # spent by the run(s) this one resumes
        self._eval_seconds = 0.0  # spent evaluating: not training time

    # -- checkpointed state ---------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        spent = {k: getattr(self.counter, k) if self.counter else 0 for k in COUNTS}
        return {
            "args": {
                "budget_flops": self.budget_flops,
                "budget_seconds": self.budget_seconds,
                "schedule": self.schedule,
                "warmup_fraction": self.warmup_fraction,
                "progress": self.progress,
                "description": self.description,
            },
            "attributes": {"spent_before": {**spent, "seconds": self.seconds, "curve": self.curve}},
        }

    def _restore(self, state) -> None:
        """Continue the budget of the checkpoint the Trainer resumed from: its `trainer_state.json` holds our state
        whether or not `restore_callback_states_from_checkpoint` is set, so we read it from there ourselves."""
        if state.global_step == 0:
            return
        stored = (state.stateful_callbacks or {}).get(type(self).__name__)
        stored = stored[0] if isinstance(stored, list) else stored
        saved = (stored or {}).get("attributes", {}).get("spent_before")
        if not saved:
            return
        for key in COUNTS:
            setattr(self.counter, key, int(saved[key]))
        self._seconds_before = float(saved["seconds"])
        self.curve = list(saved["curve"])

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def flops(self) -> int:
        return self.counter.training_flops if self.counter else 0

    @property
    def tokens(self) -> int:
        return self.counter.tokens if self.counter else 0

    @property
    def seconds(self) -> float:
        if self.start is None:
            return 0.0
        return self._seconds_before + (self.end or time.perf_counter()) - self.start - self._eval_seconds

    @property
    def spent(self) -> float:
        """Fraction of the budget used so far."""
        if self.budget_flops is not None:
            return self.flops / self.budget_flops
        return self.seconds / self.budget_seconds

    # -- events ---------------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, lr_scheduler=None, **kwargs):
        self.counter = FlopCounter(model, training_only=True).attach()  # evaluations are not training compute
        self.start = time.perf_counter()
        self._restore(state)
        if self.schedule:
            scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate may wrap it
            if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                raise BertologyError(
                    f"the budget schedule needs a LambdaLR scheduler (lr_scheduler_type constant), got {scheduler}"
                )
            factor = lambda _step: budget_schedule(self.spent, self.warmup_fraction)  # noqa: E731
            scheduler.lr_lambdas = [factor] * len(scheduler.optimizer.param_groups)
            for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
                group["lr"] = base * factor(0)
            scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
        if self.progress and state.is_world_process_zero:
            from tqdm.auto import tqdm

            if self.budget_flops:
                self._scale, unit = next((s, u) for s, u in FLOP_UNITS if self.budget_flops >= s or s == 1e9)
                total = self.budget_flops / self._scale
            else:
                self._scale, unit, total = 1.0, "s", self.budget_seconds
            self._bar = tqdm(total=total, unit=unit, unit_scale=True, desc=self.description, dynamic_ncols=True)
            self._bar.update(min(self.spent * total, total))  # a resumed run starts where its checkpoint stopped

    def on_step_end(self, args, state, control, **kwargs):
        self.steps = state.global_step
        if self._bar is not None:
            done = self.flops / self._scale if self.budget_flops else self.seconds
            self._bar.update(min(done, self._bar.total) - self._bar.n)
        if self.spent >= 1.0:
            control.should_training_stop = True
            control.should_log = True  # the final losses at the budget go into the curve
        return control

    def on_log(self, args, state, control, logs: Mapping | None = None, **kwargs):
        if logs and "loss" in logs:
            point = {"step": state.global_step, "flops": self.flops, "tokens": self.tokens, "seconds": self.seconds}
            point.update({k: float(v) for k, v in logs.items() if k.endswith("loss") or k == "learning_rate"})
            self.curve.append(point)
            if self._bar is not None:
                self._bar.set_postfix(loss=f"{logs['loss']:.3f}", step=state.global_step)

    def on_evaluate(self, args, state, control, metrics: Mapping | None = None, **kwargs):
        self._eval_seconds += float((metrics or {}).get("eval_runtime", 0.0))

    def on_train_end(self, args, state, control, **kwargs):
        self.end = time.perf_counter()
        if self.counter is not None:
            self.counter.detach()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def summary(self) -> dict[str, float]:
        return {
            "flops": self.flops,
            "tokens": self.tokens,
            "predicted_positions": self.counter.predicted if self.counter else 0,
            "sequences": self.counter.sequences if self.counter else 0,
            "seconds": round(self.seconds, 2),
            "steps": self.steps,
            "flops_per_token": self.flops / self.tokens if self.tokens else 0.0,
        }
