"""What official optimizers do that torch and transformers do not offer, asked for through TrainingArguments' own
free-form fields and built by `BertologyTrainer` (docs/recipes/deberta_v3.md, "Optimizer and schedule"):

- `optim_args="bias_correction=False"` (with `optim` adamw_torch or adamw_torch_fused): `AdamWNoBiasCorrection`,
  Adam whose moments are not bias-corrected, as microsoft/DeBERTa's XAdam runs (`DeBERTa/optims/xadam.py`).
- `lr_scheduler_kwargs={"decay_from_start": True}` (with `lr_scheduler_type="linear"`): `warmup_linear_schedule`,
  DeBERTa's `warmup_linear` (`DeBERTa/optims/lr_schedulers.py`), whose decay is measured from step 0.
"""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..utils import BertologyError

ADAM_NAMES = ("adamw_torch", "adamw_torch_fused")  # the `optim` values `bias_correction=False` applies to


class AdamWNoBiasCorrection(torch.optim.Optimizer):
    """AdamW without bias correction (microsoft/DeBERTa `XAdam.update_param` calls `adamw(..., bias_correction=0)`):
    m = β1·m + (1-β1)·g, v = β2·v + (1-β2)·g², w -= lr·(m / (√v + ε) + wd·w). With a gradient of ones the first
    step moves a weight by lr·(1-β1)/√(1-β2) (3.16 lr at β 0.9, 0.999), where torch's AdamW moves it by lr."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError("AdamWNoBiasCorrection does not take sparse gradients")
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
            grads = [p.grad for p in params]
            exp_avg = [self.state[p]["exp_avg"] for p in params]
            exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
            beta1, beta2 = group["betas"]
            torch._foreach_lerp_(exp_avg, grads, 1 - beta1)  # β1·m + (1-β1)·g
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
            if group["weight_decay"]:  # decoupled, on the weight before this step's update (as XAdam's wd·w term)
                torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
            denominator = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denominator, group["eps"])  # ε outside the root (XAdam's eps_mode 1)
            torch._foreach_addcdiv_(params, exp_avg, denominator, value=-group["lr"])
        return loss


def warmup_linear_schedule(optimizer, num_warmup_steps: int, num_training_steps: int, last_epoch: int = -1):
    """microsoft/DeBERTa `warmup_linear` (`lr_schedulers.py`, `ends` 0): step/warmup while warming up, then
    1 - step/total, the decay measured from step 0 (transformers' linear: (total - step)/(total - warmup)). At step
    50 of 100 with 10 warmup steps: 0.5 (transformers': 0.556)."""

    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, 1.0 - step / max(1, num_training_steps))

    return LambdaLR(optimizer, factor, last_epoch)


def parse_optim_args(text: str | None) -> dict[str, str]:
    """`"a=1,b=False"` -> `{"a": "1", "b": "False"}` (transformers' format for `--optim_args`)."""
    pairs = [item.strip() for item in (text or "").replace(" ", "").split(",") if item.strip()]
    if any("=" not in pair for pair in pairs):
        raise BertologyError(f"--optim_args {text!r}: expected key=value pairs separated by commas")
    return dict(pair.split("=", 1) for pair in pairs)


def without_bias_correction(args) -> bool:
    """Whether TrainingArguments ask for Adam without bias correction (`--optim_args bias_correction=False`)."""
    value = parse_optim_args(args.optim_args).get("bias_correction")
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise BertologyError(f"--optim_args bias_correction={value}: expected True or False")
    if value.lower() == "true":
        return False
    optim = getattr(args.optim, "value", args.optim)
    if optim not in ADAM_NAMES:
        raise BertologyError(f"--optim_args bias_correction=False applies to --optim {' or '.join(ADAM_NAMES)}")
    return True


def decays_from_start(args) -> bool:
    """Whether TrainingArguments ask for DeBERTa's `warmup_linear` (`lr_scheduler_kwargs` `decay_from_start`)."""
    kwargs = args.lr_scheduler_kwargs or {}
    if not kwargs.get("decay_from_start", False):
        return False
    schedule = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    if schedule != "linear" or set(kwargs) != {"decay_from_start"}:
        raise BertologyError(
            f"--lr_scheduler_kwargs {kwargs}: decay_from_start applies to --lr_scheduler_type linear and takes no "
            "other keys"
        )
    return True
