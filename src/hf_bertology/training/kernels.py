"""Which implementation a library's optimizer runs, chosen from where its parameters are, not from what is installed.

torch-optimi (0.3.3) picks its Triton kernel whenever `triton` imports: `StableAdamW._init_group` calls
`_default_to_triton(params)` before it has gathered the group's parameters, and an empty list passes its device test.
torch's default (CUDA) wheel installs triton, so on a CPU the Triton kernel runs on CPU tensors and stops
(`RuntimeError: 0 active drivers`). `choose_optimizer_kernels` decides for every group of an optimi optimizer
(those whose groups carry `triton`): Triton only where every parameter is on a CUDA device with bf16 (optimi's own
device test, `optimi/utils.py` `_triton_kernels_supported_device`), else torch's own foreach rule
(`_default_to_fused_or_foreach`: foreach on CUDA, the plain loop on a CPU). A `--optim_args triton=...` or
`foreach=...` the user gave wins (transformers does not pass those keys to StableAdamW).
"""

from __future__ import annotations

import importlib

import torch
from torch.optim.optimizer import _default_to_fused_or_foreach

from ..utils import BertologyError
from .optimizers import parse_optim_args

KERNEL_KEYS = ("triton", "foreach")  # optimi's per-group switches


def triton_runs_on(params: list[torch.Tensor]) -> bool:
    """optimi's Triton kernels run on `params`: triton imports (optimi's `HAS_TRITON`) and every parameter is on a
    CUDA device that has bf16. An empty list is not a device that runs them."""
    has_triton = importlib.import_module("optimi.utils").HAS_TRITON  # at call time: optimi imports triton
    return has_triton and bool(params) and all(p.is_cuda for p in params) and torch.cuda.is_bf16_supported()


def explicit_kernels(optim_args: str | None) -> dict[str, bool]:
    """The `triton=`/`foreach=` the user named in `--optim_args`, as booleans."""
    chosen = {}
    for key, value in parse_optim_args(optim_args).items():
        if key in KERNEL_KEYS:
            if value.lower() not in ("true", "false"):
                raise BertologyError(f"--optim_args {key}={value}: expected True or False")
            chosen[key] = value.lower() == "true"
    return chosen


def choose_group_kernels(group: dict, explicit: dict[str, bool]) -> None:
    params = list(group["params"])
    # optimi 0.3.3 defaults to Triton when triton imports, testing the devices of an empty list: we test the params
    group["triton"] = explicit.get("triton", triton_runs_on(params))
    foreach = bool(params) and _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)[1]
    group["foreach"] = explicit.get("foreach", not group["triton"] and foreach)


def choose_optimizer_kernels(optimizer: torch.optim.Optimizer, optim_args: str | None) -> torch.optim.Optimizer:
    """Set `triton` and `foreach` of every group of an optimi `optimizer` from its parameters' devices (the
    docstring above); also after a checkpoint's state is loaded, whose groups carry the devices they were saved on.
    Other optimizers are returned as they are."""
    # optimi's gradient release steps one parameter at a time, never foreach: its choice is left to optimi
    if not type(optimizer).__module__.startswith("optimi") or optimizer.defaults.get("gradient_release"):
        return optimizer
    explicit = explicit_kernels(optim_args)
    for group in optimizer.param_groups:
        choose_group_kernels(group, explicit)
    optimizer.register_load_state_dict_post_hook(lambda loaded: leave_triton_where_it_cannot_run(loaded, explicit))
    return optimizer


def leave_triton_where_it_cannot_run(optimizer: torch.optim.Optimizer, explicit: dict[str, bool]) -> None:
    """A loaded group saved with Triton (on a GPU) whose parameters are here on a device Triton cannot run on takes
    the foreach rule; a group saved without Triton keeps its choice (its state has no Triton scratch)."""
    for group in optimizer.param_groups:
        if group.get("triton") and "triton" not in explicit and not triton_runs_on(list(group["params"])):
            choose_group_kernels(group, explicit)
