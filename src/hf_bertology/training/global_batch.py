"""A recipe's batch is global (issue 51): the paper's batch in sequences, held on any number of processes as
per-device micro-batch x processes x gradient accumulation (fairseq's `--max-sentences` x GPUs x `--update-freq`,
Composer's `global_train_batch_size` over `device_train_microbatch_size`). `plan_batch` derives the split from the
flags before any work and refuses a global batch the product cannot reach exactly; `largest_micro_batch` is the
CUDA probe (forward and backward at the recipe's length, halving on out-of-memory, as Composer's
`device_train_microbatch_size: auto`). docs/pretraining.md, "Several processes", says which flag means what."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..recipes.base import Variant
from ..utils import BertologyError, logger
from .checkpoints import read_marker
from .input_checks import check_counts, check_range

BATCH_FLAGS = ("per_device_train_batch_size", "gradient_accumulation_steps", "global_batch_size")
DEFAULT_MICRO_BATCH = 8  # TrainingArguments' per_device_train_batch_size: a recipe that states no micro-batch


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('s') else 's'}"


@dataclass(frozen=True)
class BatchPlan:
    """One optimizer step's examples: `micro` per device and micro-batch, on `world` processes, `accumulation`
    micro-batches a step; `held`: the recipe's (or --global_batch_size's) global batch is what the product makes."""

    micro: int
    world: int
    accumulation: int
    held: bool = True
    note: str = ""

    @property
    def global_batch(self) -> int:
        return self.micro * self.world * self.accumulation

    def line(self) -> str:
        """The run's one line, e.g. `global batch 8192 = 32 per device x 8 processes x 32 accumulation steps`."""
        line = (
            f"global batch {self.global_batch} = {self.micro} per device x {_plural(self.world, 'process')} x "
            f"{_plural(self.accumulation, 'accumulation step')}"
        )
        return f"{line} ({self.note})" if self.note else line


def divisors(number: int) -> list[int]:
    """The divisors of `number`, ascending."""
    small = [d for d in range(1, int(number**0.5) + 1) if number % d == 0]
    return sorted({*small, *(number // d for d in small)})


def _either(flag: str, values: list[int]) -> str:
    return f"{flag} {' or '.join(str(v) for v in values)}"


def exact_choices(global_batch: int, world: int, micro: int) -> str:
    """The nearest exact choices to a micro-batch that cannot make `global_batch` on `world` processes: the
    micro-batches (divisors of the per-process batch) either side of it, and the global batches it can make."""
    options = []
    if global_batch % world == 0:
        fitting = divisors(global_batch // world)
        near = [*[d for d in fitting if d < micro][-1:], *[d for d in fitting if d > micro][:1]]
        options.append(_either("--per_device_train_batch_size", near))
    step = micro * world
    batches = [b for b in dict.fromkeys(((global_batch // step) * step, -(-global_batch // step) * step)) if b > 0]
    return ", ".join([*options, _either("--global_batch_size", batches)])


def plan_batch(
    global_batch: int,
    world: int,
    micro: int | None,
    accumulation: int | None,
    recipe_micro: int = DEFAULT_MICRO_BATCH,
) -> BatchPlan:
    """Split `global_batch` (sequences an optimizer step; 0: none, the per-device meaning) over `world` processes.

    `micro`, `accumulation`: what the user set (None: not given). Both given: their product is the global batch.
    `micro` alone: accumulation follows, or the global batch cannot be reached exactly (a one-line refusal naming
    the nearest exact choices). Neither: the largest divisor of the per-process batch up to `recipe_micro` (the
    preset's micro-batch; on CUDA the probe then looks for a larger one that fits). With `global_batch` 0:
    `micro` or else `recipe_micro` per device, `accumulation` or 1, as a per-device batch always meant."""
    check_range("--global_batch_size", global_batch, 0, hint=" (0: the batch is per device)")
    check_counts({"--per_device_train_batch_size": micro, "--gradient_accumulation_steps": accumulation})
    if global_batch == 0:
        micro = micro or recipe_micro
        return BatchPlan(micro, world, accumulation or 1, held=False, note="per device: no global batch held")
    if micro is not None and accumulation is not None:
        plan = BatchPlan(micro, world, accumulation, held=micro * world * accumulation == global_batch)
        if plan.held:
            return plan
        return BatchPlan(
            micro, world, accumulation, held=False,
            note=f"--per_device_train_batch_size x --gradient_accumulation_steps, not the recipe's {global_batch}",
        )  # fmt: skip
    if global_batch % world:
        raise BertologyError(
            f"global batch {global_batch} cannot be shared by {_plural(world, 'process')} exactly: choose "
            f"{exact_choices(global_batch, world, micro or 1)}, or --global_batch_size 0 to keep the per-device "
            "batch"
        )
    per_process = global_batch // world
    if micro is not None:
        if per_process % micro:
            raise BertologyError(
                f"global batch {global_batch} cannot be made of micro-batches of {micro} on "
                f"{_plural(world, 'process')}: choose {exact_choices(global_batch, world, micro)}, or set "
                "--gradient_accumulation_steps too (their product is then the global batch)"
            )
        return BatchPlan(micro, world, per_process // micro)
    if accumulation is not None:
        if per_process % accumulation:
            fitting = divisors(per_process)
            near = [*[d for d in fitting if d < accumulation][-1:], *[d for d in fitting if d > accumulation][:1]]
            raise BertologyError(
                f"global batch {global_batch} cannot be made in {accumulation} accumulation steps on "
                f"{_plural(world, 'process')}: choose {_either('--gradient_accumulation_steps', near)}, or set "
                "--per_device_train_batch_size too (their product is then the global batch)"
            )
        return BatchPlan(per_process // accumulation, world, accumulation)
    micro = max(d for d in divisors(per_process) if d <= max(1, recipe_micro))
    return BatchPlan(micro, world, per_process // micro)


def largest_micro_batch(step: Callable[[int], None], per_process: int, start: int | None = None) -> int:
    """The largest micro-batch, a divisor of `per_process` up to `start`, for which `step(size)` (one forward and
    backward) runs out of no memory: halving on each out-of-memory error (Composer's
    `device_train_microbatch_size: auto`, composer/trainer/trainer.py `_adjust_device_train_microbatch_size`), to
    the largest divisor at or below the half so that accumulation stays exact."""
    fitting = divisors(per_process)
    size = max(d for d in fitting if d <= (start or per_process))
    while True:
        try:
            step(size)
            return size
        except torch.cuda.OutOfMemoryError:
            if torch.cuda.is_available():  # the failed step's tensors, held by its traceback until collected
                gc.collect()
                torch.cuda.empty_cache()
            smaller = [d for d in fitting if d <= size // 2]
            if not smaller:
                raise BertologyError(
                    "one example of the recipe's length does not fit in the device's memory: use a shorter "
                    "--max_seq_length or a smaller model"
                ) from None
            logger.info("micro-batch %d does not fit: trying %d", size, smaller[-1])
            size = smaller[-1]


def will_probe(args) -> bool:
    """Whether a run whose micro-batch nobody chose looks for the largest that fits: on CUDA (not `--use_cpu`),
    not under DeepSpeed, whose config reads the batch sizes when the arguments are built."""
    return torch.cuda.is_available() and not args.use_cpu and not args.deepspeed


def probe_step(model, collator, dataset, args) -> Callable[[int], None]:
    """One forward and backward of `size` training examples at the run's precision (the first examples, repeated
    where the set is smaller), gradients dropped after: what a micro-batch of training holds in memory."""
    iterable = not hasattr(dataset, "__len__")
    pool = list(itertools.islice(iter(dataset), 256)) if iterable else None

    def step(size: int) -> None:
        source = pool if pool is not None else dataset
        # keyed draws (an id each), and the RNGs restored: the probe leaves the run's random streams untouched
        features = [{**source[i % len(source)], "example_id": i} for i in range(size)]
        dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        with torch.random.fork_rng(devices=[args.device] if args.device.type == "cuda" else []):
            batch = {k: v.to(args.device) if torch.is_tensor(v) else v for k, v in collator(features).items()}
            try:
                with torch.autocast(args.device.type, dtype=dtype, enabled=dtype is not None):
                    loss = model(**batch).loss
                loss.backward()
            finally:
                model.zero_grad(set_to_none=True)
                del batch

    return step


def probe_micro_batch(model, collator, dataset, args) -> BatchPlan:
    """On CUDA: the largest micro-batch that fits (`largest_micro_batch`) up to the per-process batch, the smallest
    of every process's (they must split the batch alike), with `args`' per-device batch and accumulation set to hold
    the global batch; says the run's line."""
    per_process = args.per_device_train_batch_size * args.gradient_accumulation_steps
    model.to(args.device).train()
    # the optimizer's state is not there yet: hold as much as Adam's two fp32 moments while probing
    moments = sum(p.numel() for p in model.parameters() if p.requires_grad)
    reserved = torch.empty(2 * moments, dtype=torch.float32, device=args.device)
    micro = largest_micro_batch(probe_step(model, collator, dataset, args), per_process)
    del reserved
    torch.cuda.empty_cache()
    if args.world_size > 1 and torch.distributed.is_initialized():
        smallest = torch.tensor(micro, device=args.device)
        torch.distributed.all_reduce(smallest, op=torch.distributed.ReduceOp.MIN)
        micro = int(smallest)
    args.per_device_train_batch_size, args.gradient_accumulation_steps = micro, per_process // micro
    plan = BatchPlan(micro, args.world_size, per_process // micro, note="micro-batch: the largest that fits")
    if args.process_index == 0:
        logger.info("%s", plan.line())
    return plan


def saved_global_batch(checkpoint: str | Path, world_size: int) -> int | None:
    """The global batch a checkpoint's run had, from its `training_args.bin` (ours record `global_batch_size`; an
    older one's is its per-device batch x processes x accumulation), or None where it cannot be read."""
    try:  # our own checkpoint's pickled arguments, as the Trainer wrote them
        saved = torch.load(Path(checkpoint) / "training_args.bin", weights_only=False)
    except Exception:
        return None
    recorded = getattr(saved, "global_batch_size", None)
    return recorded or saved.per_device_train_batch_size * world_size * saved.gradient_accumulation_steps


def check_process_count(checkpoint: str | Path, args, recipe, data_args) -> None:
    """A checkpoint saved by another number of processes resumes where the run holds its global batch: step s then
    trains the s-th global batch of the same seeded order whatever the split (accelerate gives process i the
    micro-batches i, i+N, ... of one sequence; the Trainer skips s x accumulation of them on each), with masks and
    sampling keyed by example. One line refuses it where the examples, or state carried between steps, would
    differ (docs/reliability.md, "Limits"), naming the count to resume with."""
    saved_world = (read_marker(checkpoint) or {}).get("world_size")
    if saved_world is None or saved_world == args.world_size:
        return
    batch = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    saved = saved_global_batch(checkpoint, saved_world)
    warmup = data_args.batch_size_warmup_tokens
    warmup = (recipe.batch_size_warmup or (0, None))[0] if warmup is None else warmup
    reasons = [
        (saved is None, "its training_args.bin, which holds its global batch, cannot be read"),
        (saved is not None and saved != batch, f"its global batch was {saved} and this run's is {batch} (pass "
         f"--global_batch_size {saved})"),
        (data_args.streaming, "a stream is shared out by process (each reads its own shards or batches, its "
         "examples' ids interleave the ranks), so another count reads other examples"),
        (recipe.variant.trainer_class != Variant.trainer_class, "its Trainer carries state from step to step on "
         "each process (XLNet's memory), which another split cannot continue"),
        (bool(warmup), "the batch-size warmup sizes its steps per process"),
        (bool(data_args.fixed_shape_batches), "fixed-shape steps fill each process's own token budget"),
    ]  # fmt: skip
    refused = [reason for failed, reason in reasons if failed]
    if refused:
        raise BertologyError(
            f"{checkpoint} was saved by a run of {_plural(saved_world, 'process')} and this run has "
            f"{args.world_size}: {'; '.join(refused)}. Resume it with {saved_world} (torchrun --nproc_per_node "
            f"{saved_world}), or start a new run from its weights (--model_name_or_path {checkpoint})"
        )
    logger.warning(
        "resuming %s, saved by %s, on %s: the global batch %d is held (%s)",
        checkpoint, _plural(saved_world, "process"), _plural(args.world_size, "process"), batch,
        BatchPlan(args.per_device_train_batch_size, args.world_size, args.gradient_accumulation_steps).line(),
    )  # fmt: skip
