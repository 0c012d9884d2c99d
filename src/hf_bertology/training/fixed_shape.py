"""Fixed-shape token-budget steps in a Trainer (`bertology pretrain --fixed_shape_batches`).

`collators.fixed_shape` builds the batches; this module puts them into a `BertologyTrainer` already built for
padding-free batches: the training dataloader draws its steps from a `TokenBudgetBatchSampler` (through the
Trainer's own batch-sampler path, the one `transformers.trainer_pt_utils.BatchRebalanceSampler` takes), the
collator lays every step out in the budget's shape, and `--torch_compile` compiles with static shapes
(`dynamic=False`: one graph, which `--torch_compile_mode reduce-overhead` can replay as a CUDA graph).
Evaluation batches keep the padding-free layout (`FixedShapeCollator` falls back to it for a batch the sampler did
not make). Padded batches (DeBERTa-v3, XLNet: not packable) get static padded shapes instead (`use_static_padding`).
"""

from __future__ import annotations

import math

import datasets
import pyarrow.compute as pc
from transformers.trainer_pt_utils import BatchRebalanceSampler

from ..collators.fixed_shape import (
    FixedShapeCollator,
    StaticPaddedCollator,
    StaticShape,
    TokenBudget,
    TokenBudgetBatchSampler,
)
from ..collators.flatten import PaddingFreeCollator, TargetPositionsCollator
from ..utils import BertologyError, logger


class TrainerTokenBudgetSampler(TokenBudgetBatchSampler, BatchRebalanceSampler):
    """`TokenBudgetBatchSampler` (one process of `num_replicas`) as the Trainer's batch sampler, under a batch-size
    warmup too. It is a `BatchRebalanceSampler` only so that the Trainer passes it as the DataLoader's
    `batch_sampler` and does not shard it again."""

    def warm_up(self, warmup) -> None:
        """Fill each step's rows in proportion to `warmup`'s batch size at it (`training.batch_warmup`)."""
        self.warmup, self._warmup_sizes, self._epoch_starts = warmup, warmup.sizes(), {0: 0}
        self._batches = None

    def _epoch_start(self, epoch: int) -> int:
        """Steps planned in the epochs before `epoch` (planned again where not known: a run resumed later)."""
        while epoch not in self._epoch_starts:
            known = max(self._epoch_starts)
            saved, (self.epoch, self._batches) = (self.epoch, self._batches), (known, None)
            self._epoch_starts[known + 1] = self._epoch_starts[known] + len(self._plan())
            self.epoch, self._batches = saved
        return self._epoch_starts[epoch]

    def rows_at(self, index: int) -> int:
        warmup = getattr(self, "warmup", None)
        if warmup is None:
            return self.budget.rows
        micro_batch = (self._epoch_start(self.epoch) + index) // self.num_replicas  # this process's
        size = warmup.size_at(micro_batch, self._warmup_sizes)
        return max(1, math.ceil(self.budget.rows * size / warmup.full_size))


def example_lengths(dataset) -> list[int]:
    """Tokens of every example (`input_ids`), read from the Arrow column without decoding the rows (through the
    dataset's indices: a `select`ed dataset's `.data` is still the whole table)."""
    if isinstance(dataset, datasets.Dataset):
        column = dataset.select_columns(["input_ids"]).with_format("arrow")[:]["input_ids"]
        return pc.list_value_length(column).to_pylist()
    return [len(example["input_ids"]) for example in dataset]


def _static_compilation(trainer) -> None:
    plugin = getattr(trainer.accelerator.state, "dynamo_plugin", None)
    if trainer.args.torch_compile and plugin is not None:
        plugin.dynamic = False  # every step has one shape: a static graph (BertologyTrainer asks dynamic otherwise)


def use_static_padding(trainer, max_seq_length: int) -> StaticShape:
    """Give `trainer` (built with a padded `TargetPositionsCollator`: DeBERTa-v3, XLNet) static padded steps:
    `per_device_train_batch_size` rows of `max_seq_length` tokens, plus one all-padding row where the padded target
    positions need a slot (`collators.fixed_shape.pad_statically`); returns the shape."""
    collator = trainer.data_collator
    shape = StaticShape(trainer.args.per_device_train_batch_size, max_seq_length)
    try:
        trainer.data_collator = StaticPaddedCollator(collator.collator, shape)
    except ValueError as err:
        raise BertologyError(f"--fixed_shape_batches: {err}") from None
    _static_compilation(trainer)
    logger.info("static padded steps: %s", shape)
    return shape


def use_fixed_shape(
    trainer, max_seq_length: int, rows_per_example_length: int = 4, packable: bool = True
) -> TokenBudget | StaticShape:
    """Give `trainer` (built with a `PaddingFreeCollator` and a map-style training set) fixed-shape steps of about
    `per_device_train_batch_size` examples (`TokenBudget.for_lengths`); returns the budget. The padded batches of a
    recipe that cannot be packed (`packable=False`: `Recipe.padding_free`) get static padded steps instead
    (`use_static_padding`)."""
    collator = trainer.data_collator
    if not isinstance(collator, PaddingFreeCollator):
        if isinstance(collator, TargetPositionsCollator) and not packable:
            return use_static_padding(trainer, max_seq_length)
        raise BertologyError(
            "--fixed_shape_batches needs padding-free batches (a packable recipe, --padding_free, no --streaming), "
            "or padded ones of a recipe that cannot be packed (DeBERTa-v3, XLNet; no --streaming)"
        )
    if not hasattr(trainer.train_dataset, "__len__"):
        raise BertologyError("--fixed_shape_batches needs a map-style training set (not --streaming)")
    args = trainer.args
    lengths = example_lengths(trainer.train_dataset)
    budget = TokenBudget.for_lengths(
        lengths,
        args.per_device_train_batch_size,
        max_seq_length,
        rows_per_example_length=rows_per_example_length,
        target_fraction=getattr(collator, "mlm_probability", 0.15),  # the recipe's masking rate sizes the targets
    )
    trainer.data_collator = FixedShapeCollator(collator.collator, budget, collator.layout_keys)
    seed = args.data_seed if args.data_seed is not None else args.seed
    trainer.train_batch_sampler = TrainerTokenBudgetSampler(
        lengths, budget, seed=seed, num_replicas=args.world_size, rank=args.process_index
    )
    _static_compilation(trainer)
    logger.info("fixed-shape steps: %s", budget)
    return budget


__all__ = ["TrainerTokenBudgetSampler", "example_lengths", "use_fixed_shape", "use_static_padding"]
