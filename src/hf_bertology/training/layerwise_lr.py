"""ELECTRA's layer-wise learning-rate decay for fine-tuning (ELECTRA ``configure_finetuning.py``,
``model/optimization.py``): lower layers get smaller learning rates, as optimizer parameter groups the ``Trainer``
schedules like any other, with ELECTRA's optimizer (AdamWeightDecay, no bias correction) and schedule.
"""

from __future__ import annotations

import re
from typing import Any

from ..utils import BertologyError
from .optimizers import decay_parameter_names, official_optimizer

# ELECTRA's fine-tuning schedule (run_finetuning.py:107-113 -> model/optimization.py:36-45): min(1, step/W)·(1 - step/T).
ELECTRA_SCHEDULE = {"decay_from_start": True, "warmup_scales_decay": True}

_LAYER_INDEX = re.compile(r"\.layers?\.(\d+)\.")
_NO_DECAY = re.compile(r"bias|layernorm|layer_norm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)", re.IGNORECASE)


def parameter_depth(name: str, num_layers: int) -> int:
    """ELECTRA's depth of a parameter (``_get_layer_lrs`` in ``model/optimization.py``): embeddings (and their
    projection) 0, encoder layer i at i + 1, anything else (pooler, task head) L + 2. A layer shared by all depths
    (ALBERT) is put at the top layer, L."""
    if "embedding" in name or "mask_emb" in name:  # BERT/ELECTRA "embeddings.*", XLNet "word_embedding", "mask_emb"
        return 0
    match = _LAYER_INDEX.search(name)
    if match:
        return int(match.group(1)) + 1
    if "encoder" in name:  # ALBERT's shared albert_layer_groups
        return num_layers
    return num_layers + 2


def layerwise_lr_param_groups(
    model, learning_rate: float, layerwise_lr_decay: float, weight_decay: float, decaying: set[str] | None = None
) -> list[dict[str, Any]]:
    """Optimizer param groups with ``lr * decay**(L + 2 - depth)`` (ELECTRA ``configure_finetuning.py``,
    ``layerwise_lr_decay=0.8``), split into weight-decay / no-decay groups: ``decaying`` names the parameters that
    decay (default: all but biases and norms, as the Trainer). Passed to the Trainer as
    ``optimizer_cls_and_kwargs=(cls, {"params": groups, ...})`` so the Trainer still builds its schedule on top of
    each group's own lr."""
    config = model.config
    num_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    if not num_layers:
        raise BertologyError(f"cannot apply --layerwise_lr_decay: {type(config).__name__} has no number of layers")
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = parameter_depth(name, num_layers)
        decay = _NO_DECAY.search(name) is None if decaying is None else name in decaying
        group = groups.setdefault(
            (depth, decay),
            {
                "params": [],
                "names": [],
                "lr": learning_rate * layerwise_lr_decay ** (num_layers + 2 - depth),
                "weight_decay": weight_decay if decay else 0.0,
            },
        )
        group["params"].append(param)
        group["names"].append(name)
    return [groups[key] for key in sorted(groups)]


def layerwise_lr_optimizer(model, training_args, layerwise_lr_decay: float) -> tuple[type, dict[str, Any]]:
    """``Trainer(optimizer_cls_and_kwargs=...)`` over :func:`layerwise_lr_param_groups`, with the learning rate,
    weight decay and Adam betas/epsilon of ``training_args``. The optimizer is ELECTRA's (``AdamWNoBiasCorrection``,
    run_finetuning.py:107 -> model/optimization.py:50-56) unless ``--optim_args`` say otherwise
    (``bias_correction=True``: torch's AdamW; ``layer_adaptation=True``: LAMB; the decay lists are honoured too)."""
    import torch

    default = [name for name, _ in model.named_parameters() if _NO_DECAY.search(name) is None]
    decaying = set(decay_parameter_names(model, training_args, default))
    groups = layerwise_lr_param_groups(
        model, training_args.learning_rate, layerwise_lr_decay, training_args.weight_decay, decaying
    )
    for group in groups:
        group.pop("names")
    optimizer_cls = official_optimizer(training_args, bias_correction=False) or torch.optim.AdamW
    return (
        optimizer_cls,
        {
            "params": groups,
            "lr": training_args.learning_rate,
            "betas": (training_args.adam_beta1, training_args.adam_beta2),
            "eps": training_args.adam_epsilon,
        },
    )


def electra_schedule(training_args) -> None:
    """ELECTRA's fine-tuning schedule (:data:`ELECTRA_SCHEDULE`) where ``--lr_scheduler_type`` is linear and no
    ``--lr_scheduler_kwargs`` are given (``'{"decay_from_start": false}'`` gives transformers' linear back)."""
    schedule = getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)
    if schedule == "linear" and not training_args.lr_scheduler_kwargs:
        training_args.lr_scheduler_kwargs = dict(ELECTRA_SCHEDULE)
