"""What official optimizers do that torch and transformers do not offer, asked for through TrainingArguments' own
free-form fields and built by `BertologyTrainer` (docs/training.md; each family page's optimizer row):

- `optim_args` (with `optim` adamw_torch or adamw_torch_fused):
  - `bias_correction=False`: `AdamWNoBiasCorrection`, the update of google-research/bert's
    `AdamWeightDecayOptimizer` (`optimization.py:87-157`; also ELECTRA's, XLNet's with weight decay) and of
    microsoft/DeBERTa's XAdam (`DeBERTa/optims/xadam.py`);
  - `layer_adaptation=True` (with `bias_correction=False`): `Lamb`, google-research/albert `lamb_optimizer.py:32-140`;
  - `exclude_from_weight_decay=A|B` and `include_in_weight_decay=C|D`: which parameters decay, by a regular
    expression searched in each parameter's name, as the official optimizers' lists (`none`: every parameter
    decays, as fairseq's param groups); unset: transformers' rule (no decay on biases and norms).
- `lr_scheduler_kwargs` (with `lr_scheduler_type="linear"`): `official_schedule`, the TF/fairseq linear schedules
  (`decay_from_start`, `warmup_scales_decay`, `min_lr_ratio`).
"""

from __future__ import annotations

import re

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..utils import BertologyError
from .optim_choices import read_as_text

ADAM_NAMES = ("adamw_torch", "adamw_torch_fused")  # the `optim` values our `optim_args` keys apply to
OPTIM_KEYS = ("bias_correction", "layer_adaptation", "exclude_from_weight_decay", "include_in_weight_decay")
SCHEDULE_KEYS = ("decay_from_start", "warmup_scales_decay", "min_lr_ratio")
# The official optimizers' `exclude_from_weight_decay` (bert optimization.py:65, electra model/optimization.py:56,
# albert optimization.py:81,90, xlnet model_utils.py:138), searched in a parameter's name (torch's names keep them).
OFFICIAL_NO_DECAY = "LayerNorm|layer_norm|bias"


class AdamWNoBiasCorrection(torch.optim.Optimizer):
    """Adam with decoupled weight decay and no bias correction, as google-research/bert's `AdamWeightDecayOptimizer`
    (`optimization.py:130-151`) and microsoft/DeBERTa's XAdam (`adamw(..., bias_correction=0)`):
    m = β1·m + (1-β1)·g, v = β2·v + (1-β2)·g², u = m / (√v + ε) + wd·w, w -= lr·u. With a gradient of ones the
    first step moves a weight by lr·(1-β1)/√(1-β2) (3.16 lr at β 0.9, 0.999), where torch's AdamW moves it by lr.
    Written with foreach kernels (one launch per operation for the whole group), as torch's own AdamW."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    def _moments(self, group) -> tuple[list, list, list] | None:
        """Updates the group's moments in place; returns (params, m, v) of the parameters that have gradients."""
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return None
        if any(p.grad.is_sparse for p in params):
            raise RuntimeError(f"{type(self).__name__} does not take sparse gradients")
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
        return params, exp_avg, exp_avg_sq

    def _update(self, group, params, exp_avg, exp_avg_sq) -> None:
        if group["weight_decay"]:  # lr·wd·w, on the weight before this step's update
            torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
        denominator = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denominator, group["eps"])  # ε outside the root
        torch._foreach_addcdiv_(params, exp_avg, denominator, value=-group["lr"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            moments = self._moments(group)
            if moments is not None:
                self._update(group, *moments)
        return loss


class Lamb(AdamWNoBiasCorrection):
    """LAMB as google-research/albert runs it (`lamb_optimizer.py:88-116`): the update u of
    `AdamWNoBiasCorrection` (weight decay inside u), scaled per tensor by the trust ratio ‖w‖/‖u‖ (1 where either
    norm is 0), w -= ratio·lr·u. A param group with `layer_adaptation` False takes no ratio (the official
    `exclude_from_layer_adaptation`, which defaults to the weight-decay exclusions). No bias correction, no clamp
    of the ratio (pytorch-optimizer's `Lamb` clamps ‖w‖ at 10 and divides by ‖u‖ + ε). Foreach kernels; the
    ratios stay on the device."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, lr, betas, eps, weight_decay)
        for group in self.param_groups:
            group.setdefault("layer_adaptation", True)

    def _update(self, group, params, exp_avg, exp_avg_sq) -> None:
        denominator = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denominator, group["eps"])
        update = torch._foreach_div(exp_avg, denominator)  # m / (√v + ε)
        if group["weight_decay"]:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])  # + wd·w
        if group["layer_adaptation"]:
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(update))
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(update, list(ratio.unbind()))
        torch._foreach_add_(params, update, alpha=-group["lr"])


def official_schedule(
    optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    decay_from_start: bool = False,
    warmup_scales_decay: bool = False,
    min_lr_ratio: float = 0.0,
    last_epoch: int = -1,
):
    """The linear schedules of the official code, as a factor of the peak rate at (0-based) step s, warmup W, total T:

    - decay: 1 - s/T (`decay_from_start`: tf.train.polynomial_decay from step 0, google-research/bert
      `optimization.py:32-38`, electra `model/optimization.py:36-42`, albert `optimization.py:37-43`; DeBERTa's
      `warmup_linear`; SpanBERT's fairseq `polynomial_decay_schedule.py:63`), else 1 - (s-W)/(T-W) (transformers',
      fairseq's RoBERTa, xlnet `model_utils.py:107-112`), floored at `min_lr_ratio` (xlnet's flag, default 0.001);
    - warmup s/W: replaces the decay while s < W (bert `optimization.py:42-54`), or multiplies it,
      min(1, s/W)·decay (`warmup_scales_decay`: electra `model/optimization.py:43-45`).

    At step 50 of 100 with 10 warmup steps: 0.5 from start, 0.556 from the warmup's end."""

    def factor(step: int) -> float:
        start = 0 if decay_from_start else num_warmup_steps
        decay = max(0.0, 1.0 - (step - start) / max(1, num_training_steps - start))
        decay = min_lr_ratio + (1.0 - min_lr_ratio) * decay
        warmup = min(1.0, step / num_warmup_steps) if num_warmup_steps > 0 else 1.0
        if warmup_scales_decay:
            return warmup * decay
        return warmup if step < num_warmup_steps else decay

    return LambdaLR(optimizer, factor, last_epoch)


def parse_optim_args(text: str | None) -> dict[str, str]:
    """`"a=1,b=False"` -> `{"a": "1", "b": "False"}` (transformers' format for `--optim_args`)."""
    pairs = [item.strip() for item in (text or "").replace(" ", "").split(",") if item.strip()]
    if any("=" not in pair for pair in pairs):
        raise BertologyError(f"--optim_args {text!r}: expected key=value pairs separated by commas")
    return dict(pair.split("=", 1) for pair in pairs)


def _flag(options: dict, key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise BertologyError(f"--optim_args {key}={value}: expected True or False")
    return value.lower() == "true"


def official_optimizer(args, bias_correction: bool = True) -> type | None:
    """The optimizer class TrainingArguments' `optim_args` ask for (`AdamWNoBiasCorrection`, `Lamb`), or None for
    the one `optim` names; `bias_correction`: where `optim_args` do not say."""
    options = parse_optim_args(args.optim_args)
    no_correction = not _flag(options, "bias_correction", bias_correction)
    lamb = _flag(options, "layer_adaptation", False)
    optim = getattr(args.optim, "value", args.optim)
    asked = [f"{key}={options[key]}" for key in OPTIM_KEYS if key in options]
    if asked and optim not in ADAM_NAMES:
        verb = "applies" if len(asked) == 1 else "apply"
        raise BertologyError(f"--optim_args {','.join(asked)} {verb} to --optim {' or '.join(ADAM_NAMES)}")
    if lamb and not no_correction:
        raise BertologyError("--optim_args layer_adaptation=True (LAMB) takes bias_correction=False, as the official")
    if lamb:
        return Lamb
    return AdamWNoBiasCorrection if no_correction else None


def decay_parameter_names(model, args, default: list[str]) -> list[str]:
    """The names of the parameters that decay: `default` (transformers' rule) unless `optim_args` give the official
    lists (`exclude_from_weight_decay`, `include_in_weight_decay`, `none`: nothing excluded)."""
    options = parse_optim_args(args.optim_args)
    if "exclude_from_weight_decay" not in options and "include_in_weight_decay" not in options:
        return default
    exclude = options.get("exclude_from_weight_decay", OFFICIAL_NO_DECAY)
    include = options.get("include_in_weight_decay", "")
    try:
        excluded, included = (re.compile(p) if p and p != "none" else None for p in (exclude, include))
    except re.error as err:
        raise BertologyError(f"--optim_args: not a regular expression ({err})") from None

    def decays(name: str) -> bool:  # the include list is read first (xlnet model_utils.py:370-382)
        if included is not None and included.search(name):
            return True
        return excluded is None or excluded.search(name) is None

    return [name for name, _ in model.named_parameters() if decays(name)]


def official_schedule_kwargs(args) -> dict | None:
    """`official_schedule`'s keywords where `lr_scheduler_kwargs` ask for it, else None (transformers' schedule)."""
    kwargs = dict(args.lr_scheduler_kwargs or {})
    schedule = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    ours = set(kwargs) & set(SCHEDULE_KEYS)
    # transformers' own schedules that take `min_lr_ratio` (warmup_stable_decay, cosine_with_min_lr) keep it
    if not ours or (schedule != "linear" and ours == {"min_lr_ratio"}):
        return None
    if schedule != "linear" or not set(kwargs) <= set(SCHEDULE_KEYS):
        raise BertologyError(
            f"--lr_scheduler_kwargs {kwargs}: {', '.join(SCHEDULE_KEYS)} apply to --lr_scheduler_type linear and "
            "take no other keys"
        )
    ratio = kwargs.get("min_lr_ratio", 0.0)
    if not isinstance(ratio, int | float) or not 0 <= ratio < 1:
        raise BertologyError(f"--lr_scheduler_kwargs min_lr_ratio must be in [0, 1), got {ratio!r}")
    return kwargs


class OfficialOptimizers:
    """A `transformers.Trainer` mixin building what `optim_args` and `lr_scheduler_kwargs` ask for (above); used by
    `BertologyTrainer` and GLUE fine-tuning."""

    @staticmethod
    def get_optimizer_cls_and_kwargs(args, model=None, bias_correction: bool = True):
        from transformers import Trainer

        optimizer_cls = official_optimizer(args, bias_correction)
        if optimizer_cls is None:
            optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
            optim = getattr(args.optim, "value", args.optim)  # keys transformers passes as text, with their types
            return optimizer_cls, {**kwargs, **read_as_text(optim, parse_optim_args(args.optim_args))}
        kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
        return optimizer_cls, kwargs

    def get_decay_parameter_names(self, model) -> list[str]:
        return decay_parameter_names(model, self.args, super().get_decay_parameter_names(model))

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if isinstance(optimizer, Lamb):  # the official: no layer adaptation where no weight decay (by name)
            decaying = set(self.get_decay_parameter_names(model if model is not None else self.model))
            names = {id(p): n for n, p in (model if model is not None else self.model).named_parameters()}
            for group in optimizer.param_groups:
                group["layer_adaptation"] = any(names.get(id(p)) in decaying for p in group["params"])
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        kwargs = official_schedule_kwargs(self.args)
        if self.lr_scheduler is not None or kwargs is None:
            return super().create_scheduler(num_training_steps, optimizer)
        warmup = self.args.get_warmup_steps(num_training_steps)
        self.lr_scheduler = official_schedule(optimizer or self.optimizer, warmup, num_training_steps, **kwargs)
        self._created_lr_scheduler = True
        return self.lr_scheduler
