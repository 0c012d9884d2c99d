"""Batch-size warmup (ModernBERT: AnswerDotAI/ModernBERT `src/sequence_packer.py` `BatchSizeWarmupScheduler`, yaml
`batch_size_warmup_min_size`, `batch_size_warmup_tokens`): a step's batch grows from one official micro-batch of
`min_size` examples, a `min_size` at a time, to the full batch of the step (every micro-batch of the gradient
accumulation) while the process has seen `tokens / world_size` tokens, each size held for as many steps as the next
(the official thresholds, transcribed in `official_rows`). The official packer emits a step's rows at once
(`sequence_packer.py:409,427`: `out_batch_size` = the device batch over the micro-batch, accumulation included); here
the Trainer's micro-batches share each step's examples as evenly as they can.

The sizes are a function of the micro-batch's index alone (tokens counted as full rows of `max_seq_length`: the
packed rows are ~99.9% full), so a resumed run, which skips the batches it trained on, continues the same schedule.
`WarmupBatchSampler` draws padded and padding-free steps (a seeded permutation per epoch, an epoch being as many
micro-batches as at the full batch); with `--fixed_shape_batches` the token-budget sampler fills only the warmup's
share of each step's rows, so every step keeps its one shape. docs/recipes/modernbert.md, "Batch-size warmup"."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers.trainer_pt_utils import BatchRebalanceSampler

from ..utils import BertologyError, logger


def official_rows(tokens_seen: int, min_rows: int, max_rows: int, warmup_tokens: int) -> int:
    """`BatchSizeWarmupScheduler.__call__` (with its `_calculate_step_thresholds`): the rows of the next batch after
    `tokens_seen` tokens; the tokens of each size are proportional to the size (equal steps per size)."""
    if tokens_seen >= warmup_tokens:
        return max_rows
    per_unit = warmup_tokens / sum(range(min_rows, max_rows))
    cumulative = 0
    for rows in range(min_rows, max_rows):
        cumulative += rows
        if tokens_seen < math.ceil(per_unit * cumulative):
            return rows
    return max_rows


@dataclass(frozen=True)
class BatchSizeWarmup:
    """The schedule of one process: `sizes()` examples per step, `size_at` a micro-batch's share of its step."""

    warmup_tokens: int  # over all processes, as the yaml gives it
    min_size: int  # examples: one official micro-batch (`device_train_microbatch_size`)
    full_size: int  # examples per micro-batch at the full batch (`per_device_train_batch_size`)
    max_seq_length: int
    accumulation: int = 1  # micro-batches per step
    world_size: int = 1

    def __post_init__(self):
        step = self.full_size * self.accumulation
        if not 0 < self.min_size <= step:
            raise BertologyError(
                f"--batch_size_warmup_min_size must be between 1 and the batch size of a step {step}, got {self.min_size}"
            )
        if self.min_size < self.accumulation:
            raise BertologyError(
                f"--batch_size_warmup_min_size {self.min_size} is below --gradient_accumulation_steps "
                f"{self.accumulation}: the first step's micro-batches need an example each"
            )

    @property
    def max_rows(self) -> int:
        """The official `out_batch_size`: the step's full batch in micro-batches of `min_size`."""
        return math.ceil(self.full_size * self.accumulation / self.min_size)

    def sizes(self) -> list[int]:
        """Examples of every step of the warmup, per process (after it: `full_size · accumulation`)."""
        per_process = math.ceil(self.warmup_tokens / self.world_size)
        row_tokens = self.min_size * self.max_seq_length  # one row: one official micro-batch
        sizes, seen = [], 0
        while seen < per_process and self.max_rows > 1:
            rows = official_rows(seen, 1, self.max_rows, per_process)
            sizes.append(min(rows * self.min_size, self.full_size * self.accumulation))
            seen += rows * row_tokens
        return sizes

    def size_at(self, micro_batch: int, sizes: list[int]) -> int:
        """Examples of `micro_batch`: its step's size shared by the step's micro-batches, the first ones taking the
        remainder (`full_size` after the warmup)."""
        step, slot = divmod(micro_batch, self.accumulation)
        if step >= len(sizes):
            return self.full_size
        share, remainder = divmod(sizes[step], self.accumulation)
        return share + (slot < remainder)


class WarmupBatchSampler(BatchRebalanceSampler):
    """Micro-batches of dataset indices whose sizes follow `warmup` (one process of `num_replicas`: every process
    reads the same seeded permutation and takes its slice of each micro-batch). A `BatchRebalanceSampler` only so
    that the Trainer passes it as the DataLoader's `batch_sampler` and does not shard it again."""

    def __init__(self, num_examples: int, warmup: BatchSizeWarmup, seed: int = 0, rank: int = 0):
        self.num_examples, self.warmup, self.seed, self.rank = num_examples, warmup, seed, rank
        self.epoch = 0
        self.sizes = warmup.sizes()
        if len(self) == 0:
            raise BertologyError(f"{num_examples} training examples are fewer than one full batch of all processes")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_examples // (self.warmup.full_size * self.warmup.world_size)

    def __iter__(self):
        order = torch.randperm(self.num_examples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        start, world = 0, self.warmup.world_size
        for index in range(self.epoch * len(self), (self.epoch + 1) * len(self)):
            size = self.warmup.size_at(index, self.sizes)
            yield order[start + self.rank * size : start + (self.rank + 1) * size].tolist()
            start += size * world


def use_batch_size_warmup(trainer, recipe, data_args) -> BatchSizeWarmup | None:
    """Give `trainer` (built, with `use_fixed_shape` already applied where asked) steps whose batch warms up, as
    `--batch_size_warmup_tokens` / `--batch_size_warmup_min_size` or else the recipe asks. The recipe's warmup
    is left out, with a warning, where it cannot apply (`--streaming`, a batch no larger than its first size);
    the same asked for on the command line is an error."""
    tokens, min_size = recipe.batch_size_warmup or (0, None)
    asked = data_args.batch_size_warmup_tokens is not None
    tokens = data_args.batch_size_warmup_tokens if asked else tokens
    if data_args.batch_size_warmup_min_size is not None:
        min_size = data_args.batch_size_warmup_min_size
    if not tokens:  # its range is checked with the other sizes (`arguments.check_sizes`)
        return None
    args = trainer.args
    reason = None
    if min_size is None:
        reason = "needs --batch_size_warmup_min_size (the first batch, in examples)"
    elif not hasattr(trainer.train_dataset, "__len__"):
        reason = "needs a map-style training set (not --streaming)"
    elif args.per_device_train_batch_size * args.gradient_accumulation_steps <= min_size:
        reason = f"needs a step's batch larger than its first size {min_size} (--per_device_train_batch_size)"
    if reason is not None:
        if asked:
            raise BertologyError(f"batch-size warmup {reason}")
        logger.warning("the recipe's batch-size warmup is left out: it %s; every step has the full batch", reason)
        return None
    warmup = BatchSizeWarmup(
        tokens, min_size, args.per_device_train_batch_size, recipe.max_seq_length,
        args.gradient_accumulation_steps, args.world_size,
    )  # fmt: skip
    seed = args.data_seed if args.data_seed is not None else args.seed
    fixed = getattr(trainer, "train_batch_sampler", None)
    if fixed is not None:  # fixed-shape steps: fill only the warmup's share of each step's rows
        fixed.warm_up(warmup)
    else:
        trainer.train_batch_sampler = WarmupBatchSampler(len(trainer.train_dataset), warmup, seed, args.process_index)
    sizes = warmup.sizes()
    logger.info(
        "batch-size warmup: %d steps from %d to %d examples per step and process (%s tokens)",
        len(sizes), sizes[0] if sizes else warmup.full_size, warmup.full_size * warmup.accumulation, f"{tokens:,}",
    )  # fmt: skip
    return warmup
