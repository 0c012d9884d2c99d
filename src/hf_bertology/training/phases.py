"""A later pretraining phase started from the previous phase's Trainer checkpoint (ModernBERT's context extension
and decay, AnswerDotAI/ModernBERT `main.py` `restart_override`; the yamls' `load_weights_only: false`,
`reset_time: true`): the weights and the whole optimizer state (moments, step, and what its groups hold, StableAdamW's
`max_lr` among them) come from `checkpoint-N`; the learning rate, its schedule (from step 0) and the weight decay
are the new phase's; the Trainer's step count and data order start afresh. docs/recipes/modernbert.md, "Three
phases"."""

from __future__ import annotations

from pathlib import Path

import torch

from ..utils import BertologyError, logger
from .checkpoints import verify

OPTIMIZER_FILE = "optimizer.pt"  # what the Trainer writes into every checkpoint-N


def check_phase_start(checkpoint: str) -> None:
    """A phase that carries `checkpoint`'s optimizer state starts only from a checkpoint that verifies as resuming
    verifies it (`checkpoints.verify`: its completion marker, every file's size and digest): a damaged
    `optimizer.pt` is one error line naming it, before the run writes anything. A folder without an optimizer
    state (a run's final folder, a release) is not a Trainer checkpoint: `continue_phase` starts a fresh optimizer."""
    if not (Path(checkpoint) / OPTIMIZER_FILE).is_file():
        return
    reason = verify(checkpoint)
    if reason is not None:
        raise BertologyError(
            f"{checkpoint}: {reason}; a phase starts from a complete checkpoint-N of the previous phase (pass an "
            "earlier one, or the previous run's final folder to start with a fresh optimizer)"
        )


def continue_phase(trainer, checkpoint: str) -> bool:
    """Have `trainer` start from the optimizer state of `checkpoint` (a Trainer `checkpoint-N` of the previous
    phase) when it builds its optimizer; a folder without one (a run's final output folder) starts a fresh optimizer,
    with a warning. Returns whether the state is carried."""
    if not (Path(checkpoint) / OPTIMIZER_FILE).is_file():
        logger.warning(
            "%s holds no %s: the phase starts with a fresh optimizer; pass the previous phase's checkpoint-N to carry "
            "its optimizer state, as the official phases do",
            checkpoint,
            OPTIMIZER_FILE,
        )
        return False
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        raise BertologyError(
            f"{checkpoint}: carrying a phase's optimizer state works with one process or DDP (not DeepSpeed or FSDP, "
            "whose optimizer states are sharded)"
        )
    trainer.phase_start = Path(checkpoint)
    return True


def restart_override(optimizer: torch.optim.Optimizer, checkpoint: Path, learning_rate: float, weight_decay: float):
    """Load `checkpoint`'s optimizer state into `optimizer` (built for the same model), then set what the official
    `restart_override` sets: each group's lr and the scheduler's base to `learning_rate`, its weight decay to
    `weight_decay` where it had any. Everything else in the groups (`max_lr`, betas, the step) stays the checkpoint's."""
    state = torch.load(checkpoint / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError) as err:
        raise BertologyError(
            f"{checkpoint}: its optimizer state does not fit this model and optimizer ({err})"
        ) from None
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
        group.pop("initial_lr", None)  # the new scheduler takes the new lr as its base (LRScheduler's setdefault)
        group["weight_decay"] = weight_decay if group["weight_decay"] > 0 else 0.0
    logger.info("optimizer state carried from %s (restart_override: lr %g, weight decay %g)", checkpoint,
                learning_rate, weight_decay)  # fmt: skip
