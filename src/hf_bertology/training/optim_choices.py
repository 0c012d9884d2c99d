"""What each transformers `--optim` needs installed and reads from `--optim_args`, as transformers 5's handlers
(`transformers/trainer_optimizer.py`) read them: transformers imports an optimizer's package only when it builds
it (an ImportError traceback at the first step) and ignores any `--optim_args` key its handler does not read. Our
own keys (optimizers.py, kernels.py) are added to these by `flag_checks.optim_args_keys`.

A value is read with its key's type: True or False for a switch (transformers' handlers disagree on other spellings,
and `stable_adamw` takes `bool("False")`, True), a number, an integer, a torch dtype, a regular expression. The keys
transformers hands to the optimizer as text (`AS_TEXT`) are given to it with their type (`read_as_text`).
"""

from __future__ import annotations

import math
import re

import torch


def switch(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


def number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def integer(text: str) -> int:
    return int(text)


def dtype(text: str) -> torch.dtype:
    value = getattr(torch, text, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(text)
    return value


def pattern(text: str) -> str:
    """A regular expression searched in parameter names (`none`: no parameter), kept as text."""
    try:
        re.compile(text)
    except re.error as err:
        raise ValueError(text) from err
    return text


def word(text: str) -> str:
    return text


EXPECTED = {
    switch: "True or False",
    number: "a finite number",
    integer: "an integer",
    dtype: "a torch dtype (float32, bfloat16, ...)",
    pattern: "a regular expression",
    word: "a word",
}

BITSANDBYTES = ("bitsandbytes", "bitsandbytes")  # (transformers.utils' is_<name>_available, what pip installs)
BNB_ADAM_LION = (
    "adamw_bnb_8bit", "adamw_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit",
    "paged_lion_32bit", "paged_lion_8bit",
)  # fmt: skip
BNB_ADEMAMIX = ("ademamix", "ademamix_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit")
BNB_RMSPROP = ("rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")
GALORE = ("galore_adamw", "galore_adafactor", "galore_adamw_layerwise", "galore_adafactor_layerwise")
GALORE_8BIT = ("galore_adamw_8bit", "galore_adamw_8bit_layerwise")  # GaLoreAdamW8bit imports bitsandbytes too
APOLLO = ("apollo_adamw", "apollo_adamw_layerwise")
TORCHAO = ("adamw_torch_4bit", "adamw_torch_8bit")
SCHEDULE_FREE = ("schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd")

# optim -> the packages it needs, as (is_<name>_available, pip name)
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    **dict.fromkeys(BNB_ADAM_LION + BNB_ADEMAMIX + BNB_RMSPROP, (BITSANDBYTES,)),
    **dict.fromkeys(GALORE, (("galore_torch", "galore-torch"),)),
    **dict.fromkeys(GALORE_8BIT, (("galore_torch", "galore-torch"), BITSANDBYTES)),
    **dict.fromkeys(APOLLO, (("apollo_torch", "apollo-torch"),)),
    **dict.fromkeys(TORCHAO, (("torchao", "torchao"),)),
    **dict.fromkeys(SCHEDULE_FREE, (("schedulefree", "schedulefree"),)),
    "lomo": (("lomo", "lomo-optim"),),
    "adalomo": (("lomo", "lomo-optim"),),
    "grokadamw": (("grokadamw", "grokadamw"),),
    "stable_adamw": (("torch_optimi", "torch-optimi"),),
    "adamw_anyprecision": (("torchdistx", "torchdistx"),),
    "adamw_torch_xla": (("torch_xla", "torch_xla"),),
    "adamw_torch_npu_fused": (("torch_npu", "torch-npu"),),
}

# not on PyPI: transformers' own hint
INSTALL = {"torchdistx": "install its build for your torch (github.com/pytorch/torchdistx)"}

# optim -> the `--optim_args` keys its transformers handler reads, with their types
RMSPROP_KEYS = {**dict.fromkeys(("momentum", "alpha", "eps", "weight_decay"), number), "centered": switch}
ADEMAMIX_KEYS = {**dict.fromkeys(("beta1", "beta2", "beta3", "alpha", "eps"), number), "t_alpha": integer}
LOW_RANK_KEYS = {"rank": integer, "update_proj_gap": integer, "scale": number, "proj_type": word}
TRANSFORMERS_KEYS: dict[str, dict] = {
    **dict.fromkeys(("adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused"), {}),
    **dict.fromkeys(("adafactor", "lomo", "adalomo", *BNB_ADAM_LION), {}),
    "adamw_anyprecision": {
        "use_kahan_summation": switch,
        **dict.fromkeys(("momentum_dtype", "variance_dtype", "compensation_buffer_dtype"), dtype),
    },
    "sgd": {**dict.fromkeys(("momentum", "dampening", "weight_decay"), number), "nesterov": switch},
    "adagrad": dict.fromkeys(("lr_decay", "weight_decay", "eps"), number),
    "rmsprop": RMSPROP_KEYS,
    **dict.fromkeys(BNB_RMSPROP, RMSPROP_KEYS),
    **dict.fromkeys(BNB_ADEMAMIX, {**ADEMAMIX_KEYS, "t_beta3": integer}),
    "grokadamw": dict.fromkeys(
        ("alpha_init", "lamb", "gamma", "grokking_signal_decay_rate", "gradient_clipping"), number
    ),
    "stable_adamw": {"max_lr": number, "kahan_sum": switch, "decouple_lr": switch},
    **dict.fromkeys(GALORE + GALORE_8BIT, LOW_RANK_KEYS),
    **dict.fromkeys(APOLLO, {**LOW_RANK_KEYS, "proj": word, "scale_type": word}),
    **dict.fromkeys(TORCHAO, {"block_size": integer, "bf16_stochastic_round": switch}),
    **dict.fromkeys(SCHEDULE_FREE, {"weight_lr_power": number, "r": number}),
}

# the keys transformers gives the optimizer as the text itself (or its `bool`, true for "False")
AS_TEXT: dict[str, tuple[str, ...]] = {
    "stable_adamw": ("kahan_sum", "decouple_lr"),
    **dict.fromkeys(BNB_RMSPROP, ("alpha", "eps", "weight_decay", "momentum", "centered")),
    **dict.fromkeys(TORCHAO, ("block_size",)),
}


def read_as_text(optim: str, options: dict[str, str]) -> dict:
    """The optimizer keywords of the `options` transformers would give `optim` as text, with their types."""
    keys = TRANSFORMERS_KEYS.get(optim, {})
    return {key: keys[key](options[key]) for key in AS_TEXT.get(optim, ()) if key in options}
