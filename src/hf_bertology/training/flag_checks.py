"""The TrainingArguments flags transformers takes without a check, checked with the numbers (`input_checks`) before
any work, each refused in one `BertologyError` line (docs/bad_input.md):

- `--optim`: the package it needs is installed (transformers imports it only as it builds the optimizer);
- `--optim_args`: each key one the chosen optimizer reads, each value of its key's type (optim_choices.py; our own
  keys, optimizers.py and kernels.py): transformers ignores other keys, so a misspelt `bias_corection=False` trained
  torch's AdamW without a word;
- `--lr_scheduler_kwargs`: a mapping of keywords the schedule's function takes (transformers passes them on: a
  TypeError at the first step; `constant` drops them), a switch true or false (`"no"` read as true);
- `--torch_compile_backend`, `--torch_compile_mode`: names accelerate and torch know (a traceback as the model is
  prepared, outside the fallback of a failed compilation).
"""

from __future__ import annotations

import difflib
import inspect

import transformers

from ..utils import BertologyError
from .kernels import KERNEL_KEYS
from .optim_choices import EXPECTED, INSTALL, NEEDS, TRANSFORMERS_KEYS, pattern, switch
from .optimizers import ADAM_NAMES, official_optimizer, official_schedule, parse_optim_args

# our keys (optimizers.py: the official optimizers) on the optimizers they apply to
OUR_KEYS = {
    "bias_correction": switch,
    "layer_adaptation": switch,
    "exclude_from_weight_decay": pattern,
    "include_in_weight_decay": pattern,
}
OPTIMI_NAMES = ("stable_adamw",)  # transformers' optimizers from optimi, whose kernels kernels.py chooses
# Adam's settings tried as `--optim_args`: the flags that set them
FLAG_OF_KEY = {
    "lr": "--learning_rate",
    "learning_rate": "--learning_rate",
    "betas": "--adam_beta1 and --adam_beta2",
    "beta1": "--adam_beta1",
    "beta2": "--adam_beta2",
    "eps": "--adam_epsilon",
    "weight_decay": "--weight_decay",
}
SET_BY_THE_TRAINER = ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")


def optim_args_keys(optim: str) -> dict | None:
    """The `--optim_args` keys `optim` reads, each with its type; None for an optimizer this table does not know."""
    if optim not in TRANSFORMERS_KEYS:
        return None
    keys = dict(TRANSFORMERS_KEYS[optim])
    if optim in ADAM_NAMES:
        keys.update(OUR_KEYS)
    if optim in OPTIMI_NAMES:
        keys.update(dict.fromkeys(KERNEL_KEYS, switch))
    return keys


def schedule_keywords(schedule: str) -> dict | None:
    """The keywords `--lr_scheduler_type schedule` takes, each with its default; None: any (a function of
    `**kwargs`). Linear takes `official_schedule`'s (optimizers.py), the keys transformers' linear does not have."""
    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    parameters = dict(inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(schedule)]).parameters)
    if schedule == "linear":
        parameters.update(inspect.signature(official_schedule).parameters)
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None
    return {name: p.default for name, p in parameters.items() if name not in SET_BY_THE_TRAINER}


def _refuse_unknown(flag: str, unknown: list[str], known, choice: str, readers) -> None:
    """One line naming the `unknown` keys of `flag`, the keys the `choice` (`--optim adamw_torch`) takes, and for each
    key a close match, the flag that sets it (`FLAG_OF_KEY`, for `--optim_args`) or the choices that read it
    (`readers(key)`)."""
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(known), n=1)
        others = readers(key)
        if flag == "--optim_args" and key in FLAG_OF_KEY:
            hints.append(f"{key} is set by {FLAG_OF_KEY[key]}")
        elif close:
            hints.append(f"did you mean {close[0]!r}?")
        elif others:
            more = ", ..." if len(others) > 3 else ""
            hints.append(f"{key} is read by {choice.split()[0]} {', '.join(others[:3])}{more}")
    names = ", ".join(repr(key) for key in unknown)
    takes = f"it takes {', '.join(known)}" if known else "it takes none"
    raise BertologyError(f"{flag} {names}: not read by {choice} ({takes}){''.join('; ' + h for h in hints)}")


def check_optimizer(args) -> None:
    """`--optim`'s packages are installed and `--optim_args` are keys it reads, with values of their types."""
    optim = getattr(args.optim, "value", args.optim)
    missing = [
        package for name, package in NEEDS.get(optim, ()) if not getattr(transformers.utils, f"is_{name}_available")()
    ]
    if missing:
        pip = [package for package in missing if package not in INSTALL]
        install = "; ".join(
            [f"pip install {' '.join(pip)}"] * bool(pip) + [INSTALL[p] for p in missing if p in INSTALL]
        )
        are = "is" if len(missing) == 1 else "are"
        raise BertologyError(f"--optim {optim} needs {' and '.join(missing)}, which {are} not installed: {install}")
    options = parse_optim_args(args.optim_args)
    keys = optim_args_keys(optim)
    if keys is None:
        return  # an optimizer newer than the table: transformers reads what it reads
    unknown = [key for key in options if key not in keys]
    if unknown:

        def readers(key):
            return [other for other in TRANSFORMERS_KEYS if key in optim_args_keys(other)]

        _refuse_unknown("--optim_args", unknown, keys, f"--optim {optim}", readers)
    for key, value in options.items():
        try:
            keys[key](value)
        except ValueError:
            raise BertologyError(f"--optim_args {key}={value}: expected {EXPECTED[keys[key]]}") from None
    official_optimizer(args)  # how our keys combine (LAMB takes bias_correction=False)


def check_lr_scheduler_kwargs(args) -> None:
    """`--lr_scheduler_kwargs` is a mapping of keywords the schedule takes, each of its default's type."""
    kwargs = args.lr_scheduler_kwargs
    if not kwargs:
        return
    if not isinstance(kwargs, dict):
        raise BertologyError(f"--lr_scheduler_kwargs must be a JSON object ('{{\"key\": value}}'), got {kwargs!r}")
    schedule = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    keywords = schedule_keywords(schedule)
    if keywords is None:
        return  # passed on to a class of torch's (reduce_lr_on_plateau)
    unknown = [key for key in kwargs if key not in keywords]
    if unknown:
        from transformers.trainer_utils import SchedulerType

        def readers(key):
            return [s.value for s in SchedulerType if key in (schedule_keywords(s.value) or {})]

        _refuse_unknown("--lr_scheduler_kwargs", unknown, keywords, f"--lr_scheduler_type {schedule}", readers)
    for key, value in kwargs.items():
        default = keywords[key]
        if isinstance(default, bool):
            expected, fits = "true or false", isinstance(value, bool)
        elif isinstance(default, int | float):
            expected, fits = "a number", isinstance(value, int | float) and not isinstance(value, bool)
        elif isinstance(default, str):
            expected, fits = "a string", isinstance(value, str)
        else:
            continue  # no default to tell its type
        if not fits:
            raise BertologyError(f"--lr_scheduler_kwargs {key} must be {expected}, got {value!r}")


def check_compile(args) -> None:
    """`--torch_compile_backend` is one of accelerate's `DynamoBackend`s, `--torch_compile_mode` one of torch's."""
    backend, mode = args.torch_compile_backend, args.torch_compile_mode
    if backend is not None:
        from accelerate.utils import DynamoBackend

        known = [b.value for b in DynamoBackend]
        if backend.upper() not in known:
            names = ", ".join(name.lower() for name in known)
            raise BertologyError(f"--torch_compile_backend {backend!r} is not a backend accelerate knows ({names})")
    if mode is not None:
        import torch._inductor

        modes = list(torch._inductor.list_mode_options())
        if mode not in modes:
            raise BertologyError(f"--torch_compile_mode {mode!r} is not a mode of torch.compile ({', '.join(modes)})")


def check_flags(args) -> None:
    """Every check of this module on `args` (TrainingArguments)."""
    check_optimizer(args)
    check_lr_scheduler_kwargs(args)
    check_compile(args)
