"""ELECTRA's layer-wise learning-rate decay for fine-tuning (ELECTRA ``configure_finetuning.py``,
``model/optimization.py``): lower layers get smaller learning rates, as optimizer parameter groups the ``Trainer``
schedules like any other.
"""

from __future__ import annotations

import re
from typing import Any

from ..utils import BertologyError

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
    model, learning_rate: float, layerwise_lr_decay: float, weight_decay: float
) -> list[dict[str, Any]]:
    """Optimizer param groups with ``lr * decay**(L + 2 - depth)`` (ELECTRA ``configure_finetuning.py``,
    ``layerwise_lr_decay=0.8``), split into weight-decay / no-decay groups as the Trainer does (no decay on biases
    and norms). Passed to the Trainer as ``optimizer_cls_and_kwargs=(AdamW, {"params": groups, ...})`` so the Trainer
    still builds its warmup/decay schedule on top of each group's own lr."""
    config = model.config
    num_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    if not num_layers:
        raise BertologyError(f"cannot apply --layerwise_lr_decay: {type(config).__name__} has no number of layers")
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = parameter_depth(name, num_layers)
        decay = _NO_DECAY.search(name) is None
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
    """``Trainer(optimizer_cls_and_kwargs=...)`` for torch ``AdamW`` over :func:`layerwise_lr_param_groups`, with the
    learning rate, weight decay and Adam betas/epsilon of ``training_args`` (so ``--optim`` is not consulted)."""
    import torch

    groups = layerwise_lr_param_groups(
        model, training_args.learning_rate, layerwise_lr_decay, training_args.weight_decay
    )
    for group in groups:
        group.pop("names")
    return (
        torch.optim.AdamW,
        {
            "params": groups,
            "lr": training_args.learning_rate,
            "betas": (training_args.adam_beta1, training_args.adam_beta2),
            "eps": training_args.adam_epsilon,
        },
    )
