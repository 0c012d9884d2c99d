"""Streaming with several processes: each process reads and collates its own batches.

accelerate's default for an iterable dataset (`dispatch_batches=True`) has process 0 read one batch per process,
concatenate them and send each process its slice. Batches padded to their own longest example differ in length, and
the concatenation fails (`You can't use batches of different size with dispatch_batches=True`): WikiText-2 at step 6
with bert-mini, any corpus whose examples are not all full-length. With `dispatch_batches=False` accelerate gives
every process its own share of the stream instead (`datasets`' file shards when there are enough, else every
`num_processes`-th batch, `IterableDatasetShard`): disjoint data, any batch shapes, no broadcast.

A streamed example's masks are keyed by its id (`trainer.stream_position`: its position in the stream, interleaved
with the DataLoader worker and the process's rank, so that processes counting their own shares from 0 never share an
id). Draws that are not keyed by an example come from torch's global generator, which the Trainer seeds identically
on every process: `DistinctProcessDraws` reseeds it per process when training begins (before a resume restores each
process's own saved state), so two processes never draw the same of those either.
"""

from __future__ import annotations

import torch
from transformers import TrainerCallback

from ..utils import logger


class DistinctProcessDraws(TrainerCallback):
    """Process i's global torch generator is seeded with `seed + i` when training begins."""

    def on_train_begin(self, args, state, control, **kwargs):
        torch.manual_seed(args.seed + args.process_index)


def stream_per_process(training_args, streaming: bool, explicit: set[str]) -> list:
    """With `--streaming` and several processes: every process reads its own batches (`dispatch_batches=False`,
    unless `--accelerator_config` says otherwise); returns the callbacks that keeps their draws apart."""
    if not streaming or training_args.world_size <= 1:
        return []
    if "accelerator_config" not in explicit:
        training_args.accelerator_config.dispatch_batches = False
        logger.info("streaming with %d processes: each reads its own share of the stream", training_args.world_size)
    return [DistinctProcessDraws()]
