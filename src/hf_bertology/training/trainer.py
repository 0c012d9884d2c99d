"""`BertologyTrainer`: the `transformers` Trainer with what pretraining objectives and long, resumed runs need.

What it adds to the stock Trainer (each with its reasons and sources in docs/training.md):

1. one loss count per objective, so accumulation and DDP give one large batch's gradients (`num_items_in_batch`);
2. every component loss and metric logged next to `loss` and `eval_loss`; metrics computed at logged steps only;
3. masks keyed by (seed, epoch, example id) (`ExampleIds`; evaluation draws from `EVAL_EPOCH`);
4. the collator's RNG states of the batches collated ahead, saved with a checkpoint and replayed on resuming;
5. checkpoints marked complete and rotated by step (`checkpoints.py`, docs/reliability.md);
6. no host sync in a training step: the tokens seen are counted on the device (`sync_tokens_seen`);
7. one compilation under `--torch_compile`: dynamic shapes from the start; a failed one goes on eager, in one line;
8. a joint model's parts clipped apart (`gradient_clipping_groups`);
9. the optimizers, decay sets and schedules a recipe names (`optimizers.py`) and a later phase's optimizer state (`phases.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from pathlib import Path

import datasets
import torch
from accelerate.utils import DistributedType
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy

from ..collators.base import EXAMPLE_ID, CollatorWrapper
from ..utils import logger
from .checkpoints import last_complete_checkpoint, mark_complete, prepare_folder, rotate, save_failed, write_failure
from .compilation import EagerFallback
from .kernels import choose_optimizer_kernels
from .optimizers import OfficialOptimizers
from .phases import restart_override

# Engines that clip inside themselves (sharded or compiled gradients): there the stock global clipping stays.
CLIP_WHOLE_TYPES = (DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.XLA, DistributedType.MEGATRON_LM)
EVAL_EPOCH = -1  # the collator's epoch while evaluating: one set of masks for every evaluation, none a training one


class ExampleIds(torch.utils.data.Dataset):
    """`dataset` whose examples carry their index as `example_id` (an example that has one keeps it)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        return {EXAMPLE_ID: int(index), **self.dataset[index]}

    def __getitems__(self, indices: list[int]) -> list[dict]:
        # `datasets.Dataset` reads a whole batch in one Arrow call (the DataLoader uses it when it is there)
        getitems = getattr(self.dataset, "__getitems__", None)
        rows = getitems(indices) if getitems is not None else [self.dataset[i] for i in indices]
        return [{EXAMPLE_ID: int(i), **row} for i, row in zip(indices, rows)]


def stream_position(example: dict, index: int, rank: int = 0, world_size: int = 1) -> dict:
    """A streamed example's id: its position in this epoch's stream. A DataLoader worker reads its own shards and
    counts from 0, so the position is interleaved with the worker's number; a process that reads its own share of
    the stream (`training/scale_out.py`) may count from 0 too, so it is interleaved with the process's rank as well:
    ids stay distinct across workers and processes."""
    worker = torch.utils.data.get_worker_info()
    position = index if worker is None else index * worker.num_workers + worker.id
    return {EXAMPLE_ID: position * world_size + rank}


def is_map_style(dataset) -> bool:
    """A dataset read by index (not a stream): its index is a stable example id."""
    if isinstance(dataset, datasets.IterableDataset | torch.utils.data.IterableDataset):
        return False
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


class RngRecordingCollator(CollatorWrapper):
    """Wraps a collator: records torch's RNG state before each call (the last few), and can replay states
    (`replay`: callables run one before each call) so that batches collated before a checkpoint are collated
    again with the same masks after resuming."""

    def __init__(self, collator, keep: int = 8):
        super().__init__(collator)
        self.history: deque[torch.Tensor] = deque(maxlen=keep)
        self.calls = 0
        self.replay: list = []

    def __call__(self, features):
        if self.replay:
            self.replay.pop(0)()
        self.history.append(torch.get_rng_state())
        self.calls += 1
        return self.collator(features)


def is_count_key(key: str) -> bool:
    return key == "labels" or key.endswith("_label") or key.endswith("_labels")


class BertologyTrainer(OfficialOptimizers, Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._components: dict[str, dict[str, list[torch.Tensor]]] = {"train": {}, "eval": {}}
        self._first_step: int | None = None
        self._batches_trained = 0
        self._replaying = False  # resuming mid-epoch: the collator restores the RNG, the Trainer must not again
        self._tokens_pending: torch.Tensor | None = None  # real tokens seen since the last read (on the device)
        self._model_label_names = list(self.label_names)  # every label the model's forward takes
        self._compile_fallback = EagerFallback()  # 7.
        self._smooth_in_the_model()
        # The training dataloader's collator, wrapped (evaluation batches must not count).
        self._recorder = RngRecordingCollator(self.data_collator) if self.data_collator is not None else None
        if hasattr(self.data_collator, "set_run_seed"):  # masks keyed by (seed, epoch, example id)
            self.data_collator.set_run_seed(self.args.data_seed if self.args.data_seed is not None else self.args.seed)
            if self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0:
                logger.warning(
                    "--dataloader_persistent_workers keeps the collator of the first epoch in the workers: every epoch "
                    "would see the masks of the first; leave it off for new masks each epoch"
                )

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        if resume_from_checkpoint is True:  # the newest *complete* checkpoint, not merely the newest folder
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"No complete checkpoint found in output directory ({self.args.output_dir})")
        resume_from_checkpoint = str(resume_from_checkpoint) if resume_from_checkpoint else None
        self._resuming = resume_from_checkpoint is not None  # 10.: a resumed phase has its own optimizer state
        # a second `train` call starts its own log window: values left after the last call's last log are dropped
        self._components["train"].clear()
        self._first_step = None
        if resume_from_checkpoint and self._recorder is not None:
            self._arm_replay(resume_from_checkpoint)
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self.sync_tokens_seen()

    # -- 7. one compilation ------------------------------------------------------------------------------------
    def _build_accelerator_args(self, **kwargs):
        args = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if self.args.torch_compile and plugin is not None and plugin.dynamic is None:
            plugin.dynamic = True
        return args

    # -- 9. the official optimizers (`OfficialOptimizers`: optimizer, decay sets, schedule) ------------------------
    def create_optimizer(self, model=None):
        fresh = self.optimizer is None
        optimizer = super().create_optimizer(model)
        if fresh:  # StableAdamW's Triton kernel only where its parameters are (kernels.py)
            choose_optimizer_kernels(optimizer, self.args.optim_args)
        start = getattr(self, "phase_start", None)  # 10.
        if fresh and start is not None and not getattr(self, "_resuming", False):
            restart_override(optimizer, start, self.args.learning_rate, self.args.weight_decay)
        return optimizer

    # -- 8. parts clipped apart ----------------------------------------------------------------------------------
    def _clip_grad_norm(self, model):
        # Looked up once per wrapped model: `unwrap_model` asks importlib whether deepspeed is installed (a package
        # metadata parse, ~2 ms where it is) on every call, which at small shapes is a tenth of a step.
        cached = self.__dict__.get("_clipping_groups")
        if cached is None or cached[0] is not model:
            cached = self._clipping_groups = (
                model,
                getattr(self.accelerator.unwrap_model(model), "gradient_clipping_groups", None),
            )
        groups = cached[1]() if cached[1] is not None else None  # None: the model clips as a whole
        if (
            groups is None
            or self.accelerator.distributed_type in CLIP_WHOLE_TYPES
            or self._has_mixed_mesh_grads(model)
        ):
            return super()._clip_grad_norm(model)
        self.accelerator.unscale_gradients()  # fp16 loss scaling: once, before any norm
        norms = [torch.nn.utils.clip_grad_norm_(group, self.args.max_grad_norm) for group in groups if group]
        return torch.linalg.vector_norm(torch.stack(norms))  # (): the whole model's norm, as the stock log has it

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

    # -- 3. masks from (seed, epoch, example) ----------------------------------------------------------------
    def _get_dataloader(self, dataset, description, batch_size, sampler_fn=None, **kwargs):
        if is_map_style(dataset):
            inner, sampler = dataset, sampler_fn
            dataset = ExampleIds(dataset)
            if sampler is not None:  # the sampler sees the dataset itself (its columns, its class)
                sampler_fn = lambda _: sampler(inner)  # noqa: E731
        elif isinstance(dataset, datasets.IterableDataset) and EXAMPLE_ID not in (dataset.column_names or ()):
            # position in this epoch's (shuffled) stream, and this process's rank
            rank = dict(rank=self.args.process_index, world_size=self.args.world_size)
            dataset = dataset.map(stream_position, with_indices=True, fn_kwargs=rank)
        return super()._get_dataloader(dataset, description, batch_size, sampler_fn=sampler_fn, **kwargs)

    def _run_epoch(self, *args, **kwargs):
        epoch = kwargs.get("epoch")
        if epoch is not None and hasattr(self.data_collator, "set_epoch"):
            self.data_collator.set_epoch(epoch)  # before the epoch's dataloader iterator starts its workers
        return super()._run_epoch(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        collator = self.data_collator
        if not hasattr(collator, "set_epoch"):
            return super().evaluate(*args, **kwargs)
        epoch = collator.epoch
        collator.set_epoch(EVAL_EPOCH)  # before the eval dataloader starts its workers
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            collator.set_epoch(epoch)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        if self.args.label_names is None:  # 2.: the labels this batch carries
            self.label_names = [name for name in self._model_label_names if inputs.get(name) is not None]
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if EXAMPLE_ID not in self._signature_columns:  # with remove_unused_columns=True the collator still needs it
            self._signature_columns = [*self._signature_columns, EXAMPLE_ID]

    # -- 4. exact resumption ---------------------------------------------------------------------------------
    def _arm_replay(self, checkpoint: str) -> None:
        state_file = Path(checkpoint) / f"collator_rng_state_{self.args.process_index}.pth"
        pending = torch.load(state_file, weights_only=True) if state_file.is_file() else []
        actions = [lambda state=state: torch.set_rng_state(state) for state in pending]
        actions.append(lambda: Trainer._load_rng_state(self, checkpoint))
        self._recorder.replay = actions
        self._replaying = True

    def get_train_dataloader(self):
        if self._recorder is None or self._recorder.collator is not self.data_collator:
            self._recorder = RngRecordingCollator(self.data_collator) if self.data_collator is not None else None
        collator, self.data_collator = self.data_collator, self._recorder or self.data_collator
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = collator

    def _get_train_sampler(self, train_dataset=None):
        # a batch sampler set by `training.fixed_shape.use_fixed_shape` (fixed-shape token-budget steps)
        sampler = getattr(self, "train_batch_sampler", None)
        return sampler if sampler is not None else super()._get_train_sampler(train_dataset)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._batches_trained += len(batch_samples)
        return batch_samples, num_items

    def _load_rng_state(self, checkpoint) -> None:
        collator = self._recorder
        if self._replaying and collator is not None:
            self._replaying = False
            if not collator.replay:  # mid-epoch, after the first collation: the replay has restored it already
                return
            collator.replay = []  # at an epoch start, before any collation: the Trainer's restore is right
        super()._load_rng_state(checkpoint)

    def _save_extra_state(self, folder: Path) -> None:
        """This process's state that the stock checkpoint lacks, written before the marker (so its digests cover it)."""
        self._save_collator_rng(folder)

    def _save_collator_rng(self, folder: Path) -> None:
        collator = self._recorder
        if collator is None or self.args.dataloader_num_workers > 0 or not folder.is_dir():
            return
        ahead = collator.calls - self._batches_trained  # collated, not yet trained on
        pending = list(collator.history)[-ahead:] if 0 < ahead <= len(collator.history) else []
        torch.save(pending, folder / f"collator_rng_state_{self.args.process_index}.pth")

    # -- 5. complete checkpoints are marked -----------------------------------------------------------------
    def _save_checkpoint(self, model, trial) -> None:
        self.sync_tokens_seen()  # the checkpoint's trainer_state.json holds the count
        run_dir = Path(self._get_output_dir(trial=trial))
        folder = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:
            prepare_folder(folder)  # saved before (a resumed run reaching this step again): no old marker stays
        self.accelerator.wait_for_everyone()
        limit, self.args.save_total_limit = self.args.save_total_limit, None  # rotated below: by step, once marked
        try:
            super()._save_checkpoint(model, trial)
            self._save_extra_state(folder)
            # Every process has written its files (model shards, its RNG state) before the marker goes in.
            self.accelerator.wait_for_everyone()
            if self.args.should_save and folder.is_dir():
                mark_complete(folder, self.state.global_step, self.args.world_size)
        except Exception as err:  # disk full, quota, permissions: one line, the previous checkpoint untouched
            if write_failure(err) is None:
                raise
            raise save_failed(folder, err) from None
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save:
            rotate(run_dir, limit, keep=(self.state.best_model_checkpoint,), just_marked=folder)

    # -- 2. component losses ---------------------------------------------------------------------------------
    def _smooth_in_the_model(self) -> None:
        """`--label_smoothing_factor` goes into the model's loss hook (`models/token_loss.py`), in training
        and evaluation as transformers smooths: its `LabelSmoother` reads `outputs["logits"]` against the dense
        labels, which our sparse heads and their several losses do not return (it would fail), and it would smooth
        the sentence and RTD losses' total."""
        if self.label_smoother is not None and hasattr(self.model, "token_loss"):
            self.model.token_loss.label_smoothing = self.label_smoother.epsilon
            self.label_smoother = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training and self._takes_return_metrics():
            inputs = {**inputs, "return_metrics": self._logs_this_step()}
        # 7.: the compiled model's first call compiles; where that fails, this and every later step run eager
        loss, outputs = self._compile_fallback.call(
            model,
            lambda run: super(BertologyTrainer, self).compute_loss(
                run, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            ),
        )
        self._record(outputs, num_items_in_batch, model.training)
        return (loss, outputs) if return_outputs else loss

    def _takes_return_metrics(self) -> bool:
        return getattr(self.model, "takes_return_metrics", False)  # our pretraining models' steps (not XLNet's)

    def _logs_this_step(self) -> bool:
        """Whether the step now running will be logged (`DefaultFlowCallback.on_step_end`'s rule); by epoch: always
        (which step ends an epoch is not known here)."""
        args, step = self.args, self.state.global_step + 1
        if args.logging_strategy == IntervalStrategy.NO:
            return False
        if args.logging_strategy != IntervalStrategy.STEPS:
            return True
        return (step == 1 and args.logging_first_step) or step % max(1, self.state.logging_steps or 1) == 0

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
        # step loss; eval losses are means over batches. Other values (accuracies, AUC: one per micro-batch) are means
        # that leave out the micro-batches where they are undefined (NaN); a NaN loss must show, so not for losses.
        steps = max(1, self.state.global_step - (self._first_step or 0))

        def window_mean(name: str) -> torch.Tensor:
            values = torch.stack(store[name])
            if not name.endswith("_loss"):
                return values.nanmean()
            return values.sum() / steps if phase == "train" else values.mean()

        values = torch.stack([window_mean(name) for name in names]).to(self.args.device)
        if self.accelerator.num_processes > 1:
            gathered = self.accelerator.gather(values[None])
            is_loss = torch.tensor([name.endswith("_loss") for name in names], device=values.device)
            values = torch.where(is_loss, gathered.mean(0), gathered.nanmean(0))
        store.clear()
        if phase == "train":
            self._first_step = None
        prefix = "eval_" if phase == "eval" else ""
        return {f"{prefix}{name}": round(float(v), 4) for name, v in zip(names, values)}

    # -- 6. no host sync in a training step ----------------------------------------------------------------------
    def _track_num_input_tokens(self, inputs) -> None:
        if self.args.include_num_input_tokens_seen != "non_padding" or "attention_mask" not in inputs:
            return super()._track_num_input_tokens(inputs)  # counts from host-side shapes, or the stock fallback
        tokens = inputs["attention_mask"].sum()
        self._tokens_pending = tokens if self._tokens_pending is None else self._tokens_pending + tokens

    def sync_tokens_seen(self) -> int:
        """Add the device-side count to `state.num_input_tokens_seen` and return it (summed over processes: every
        process must call this at the same points; the Trainer does when it logs and saves). Between those points
        the state's count lags: a callback that reads it every step calls this first (one device read)."""
        pending, self._tokens_pending = self._tokens_pending, None
        if pending is not None:
            self.state.num_input_tokens_seen += int(self.accelerator.gather(pending.reshape(1).long()).sum())
        return self.state.num_input_tokens_seen

    # -- 8. host time per step ---------------------------------------------------------------------------------
    def floating_point_ops(self, inputs) -> int:
        """The stock count (6 x tokens x non-embedding parameters), with the parameter count read once: the stock
        method walks every parameter at every micro-batch (`num_parameters`), 5% of a tiny model's step on CPU
        (benchmarks/trainer_overhead.py)."""
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input not in inputs or not hasattr(self.model, "num_parameters"):
            return 0
        if getattr(self, "_flop_parameters", None) is None:
            self._flop_parameters = self.model.num_parameters(exclude_embeddings=True)
        return 6 * inputs[main_input].numel() * self._flop_parameters

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self.sync_tokens_seen()
        if "loss" in logs:
            logs.update(self._summarise("train"))
        if any(key.startswith("eval_") for key in logs):
            logs.update(self._summarise("eval"))
        super().log(logs, start_time)
