"""`--torch_compile` that never stops a run: a compilation that fails says so in one line and the step runs eager.

The Trainer compiles through accelerate (`TrainingArguments.torch_compile` -> `TorchDynamoPlugin` ->
`torch.compile(model)` in `Accelerator.prepare_model`), and compilation is lazy: dynamo traces and Inductor
generates code at the model's first call, inside the training step. So the fallback sits at the call
(`EagerFallback.call`, used by `BertologyTrainer.compute_loss`): the first compiled call runs with the backward
lowered at once (`force_non_lazy_backward_lowering`, AOTAutograd's switch; by default the backward compiles at the
first `backward()`, outside this call, or with dynamic shapes compiles early and only logs a failure with its
traceback), so that every compilation of a step happens, and fails, inside it. On a failure the same step runs on the
model under the compiled wrapper (`_orig_mod`), from the random state it started with, and so does every later step:
an error of the inputs then raises from eager as it would have without compilation, and a compilation error prints
one line, never a traceback. torch does not offer this (`torch._dynamo.config.suppress_errors` falls back per frame,
logging each failure with its traceback).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch._functorch.config

from ..utils import logger


def compiled_inner(model) -> torch.nn.Module | None:
    """The module `torch.compile` wrapped (`OptimizedModule._orig_mod`), or None if `model` is not compiled."""
    return getattr(model, "_orig_mod", None) if isinstance(model, torch._dynamo.eval_frame.OptimizedModule) else None


def error_line(err: BaseException) -> str:
    """The error that made a compilation fail, as one line: the innermost cause (dynamo wraps the backend's error in
    `BackendCompilerFailed`), its type and the first line of its message."""
    seen = set()
    while id(err) not in seen:
        seen.add(id(err))
        inner = getattr(err, "inner_exception", None) or err.__cause__
        if inner is None:
            break
        err = inner
    message = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    line = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def _lowered_at_once():
    """AOTAutograd compiles the backward with the forward (within the call), where this torch has the switch."""
    config = torch._functorch.config
    if hasattr(config, "force_non_lazy_backward_lowering"):  # ~20 µs a call
        return config.patch(force_non_lazy_backward_lowering=True)
    return contextlib.nullcontext()


def random_state() -> tuple:
    """torch's CPU random state and, where CUDA is in use, every device's (host copies: no device sync)."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None


def set_random_state(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class EagerFallback:
    """Runs a step on a compiled model; on a failed compilation, on the model it wraps, from then on (docstring)."""

    def __init__(self):
        self.failed: str | None = None  # the one line said, once compilation failed
        self.compiled_once = False

    def call(self, model, run: Callable[[Any], Any]):
        """`run(model)`, or `run(eager)` where `model` is compiled and its compilation failed (now or before)."""
        eager = compiled_inner(model)
        if eager is None:
            return run(model)
        if self.failed is not None:
            return run(eager)
        # the first call's random state, for its eager retry: the attempt may have drawn (dropout) before it failed
        rng = None if self.compiled_once else random_state()
        try:
            with _lowered_at_once():
                out = run(model)
        except Exception as err:
            # after a compiled step ran, only a recompilation's failure (dynamo's errors) is one; the rest raise
            if self.compiled_once and not isinstance(err, torch._dynamo.exc.TorchDynamoException):
                raise
            if rng is not None:
                set_random_state(rng)
            out = run(eager)  # an error of the step itself raises here, from eager
            self.failed = error_line(err)
            logger.warning("torch.compile failed (%s): training goes on eager", self.failed)
            return out
        self.compiled_once = True
        return out


__all__ = ["EagerFallback", "compiled_inner", "error_line"]
