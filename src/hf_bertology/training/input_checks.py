"""The valid range of every number a user sets, checked before any work, each a one-line `BertologyError`.

torch, transformers and datasets refuse many bad values only deep inside a run, with a traceback (a hidden size that
is not a multiple of the head count fails in the attention's `__init__`, a negative learning rate in the optimizer,
`--gradient_accumulation_steps 0` divides by zero), and accept others silently: a model with 0 layers trains,
`--num_train_epochs 0` writes an untrained model, `--save_total_limit 0` keeps every checkpoint. The ranges and
the reason for each are listed in docs/bad_input.md. The free-form and named-choice flags are checked with them
(`flag_checks`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..utils import BertologyError
from .flag_checks import check_flags

MIN_SEQ_LENGTH = 8  # shorter, and every recipe's prediction cap or segment pair runs out of room
SEED_LIMIT = 2**32  # numpy's `seed` takes [0, 2**32): transformers' `set_seed` seeds numpy too


def check_range(
    name: str, value, low=None, high=None, *, low_open: bool = False, high_open: bool = False, hint: str = ""
) -> None:
    """`value` lies in the interval [low, high] (an end open with `low_open`/`high_open`; None: unbounded), is a
    finite number, else one BertologyError naming `name` (`--flag` or `config key`)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise BertologyError(f"{name} must be a finite number, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        span = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        if high is None and not low_open:
            span = f"at least {low}"
        elif high is None:
            span = f"greater than {low}"
        else:
            span = f"in {span}"
        raise BertologyError(f"{name} must be {span}, got {value}{hint}")


def check_counts(values: dict[str, int | None], minimum: int = 1) -> None:
    """Each `--flag: value` that is set is at least `minimum`."""
    for flag, value in values.items():
        check_range(flag, value, minimum)


def check_training_arguments(args) -> None:
    """`TrainingArguments` values: what every command that trains (`pretrain`, `glue`, `show-mask`) refuses.

    `--max_steps` is -1 (unset: the epochs decide) or positive; transformers reads 0 as "unset" and trains
    `--num_train_epochs` instead, which is not what `--max_steps 0` asks for."""
    check_counts(
        {
            "--per_device_train_batch_size": args.per_device_train_batch_size,
            "--per_device_eval_batch_size": args.per_device_eval_batch_size,
            "--gradient_accumulation_steps": args.gradient_accumulation_steps,
            "--save_total_limit": args.save_total_limit,
            "--eval_accumulation_steps": args.eval_accumulation_steps,
        }
    )
    if args.max_steps == 0 or args.max_steps < -1:
        raise BertologyError(f"--max_steps must be at least 1 (or -1: train --num_train_epochs), got {args.max_steps}")
    check_range("--num_train_epochs", args.num_train_epochs, 0, low_open=True)  # even where --max_steps rules
    check_range("--learning_rate", args.learning_rate, 0)  # 0: the weights stay as loaded (a check some tests use)
    check_range("--weight_decay", args.weight_decay, 0)
    check_range("--adam_beta1", args.adam_beta1, 0, 1, high_open=True)
    check_range("--adam_beta2", args.adam_beta2, 0, 1, high_open=True)
    check_range("--adam_epsilon", args.adam_epsilon, 0)
    check_range("--max_grad_norm", args.max_grad_norm, 0, hint=" (0 turns clipping off)")
    check_range("--label_smoothing_factor", args.label_smoothing_factor, 0, 1, high_open=True)
    check_range("--dataloader_num_workers", args.dataloader_num_workers, 0)
    check_range("--seed", args.seed, 0, SEED_LIMIT, high_open=True)
    check_range("--data_seed", args.data_seed, 0, SEED_LIMIT, high_open=True)
    for kind in ("logging", "save", "eval"):  # read only under the "steps" strategy
        if str(getattr(args, f"{kind}_strategy", "")).lower().endswith("steps"):
            check_range(f"--{kind}_steps", getattr(args, f"{kind}_steps"), 0, low_open=True)
    check_flags(args)  # --optim and its --optim_args, --lr_scheduler_kwargs, the compile backend and mode


# config keys by what they count; a config has the names of its family (XLNet: n_layer, d_model, n_head, d_inner)
LAYER_KEYS = ("n_layer", "num_hidden_layers")
HEAD_KEYS = ("n_head", "num_attention_heads")
WIDTH_KEYS = ("d_model", "hidden_size")
POSITIVE_KEYS = (
    *LAYER_KEYS, *HEAD_KEYS, *WIDTH_KEYS, "intermediate_size", "d_inner", "vocab_size", "embedding_size",
    "max_position_embeddings", "num_hidden_groups", "inner_group_num",
)  # fmt: skip


def _first(config, keys: Iterable[str]):
    return next(((key, getattr(config, key)) for key in keys if getattr(config, key, None) is not None), (None, None))


def check_config(config, where: str = "the config") -> None:
    """A config that builds a model that trains: sizes positive, the width a multiple of the head count (attention
    splits it into equal heads), dropout rates in [0, 1) and probabilities in [0, 1], norm epsilons positive.

    XLNet's `max_position_embeddings` does not exist (relative positions); RoBERTa's counts the padding offset too."""
    for key in POSITIVE_KEYS:
        if key == "max_position_embeddings" and key not in vars(config):
            continue  # a read-only property, not a field: XLNet's -1 (relative positions, no table)
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            check_range(f"{key} ({where})", value, 1)
    width_key, width = _first(config, WIDTH_KEYS)
    heads_key, heads = _first(config, HEAD_KEYS)
    if width and heads and width % heads:
        raise BertologyError(
            f"{width_key}={width} is not a multiple of {heads_key}={heads} ({where}): attention splits the width "
            "into equal heads"
        )
    for key, value in config.to_dict().items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if "dropout" in key:
            check_range(f"{key} ({where})", value, 0, 1, high_open=True)
        elif key.endswith(("_prob", "_probability", "_fraction")) or key == "mlm_probability":
            check_range(f"{key} ({where})", value, 0, 1)
        elif key.endswith(("norm_eps", "layer_norm_epsilon")):
            check_range(f"{key} ({where})", value, 0, low_open=True)
