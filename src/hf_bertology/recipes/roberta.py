"""RoBERTa (Liu et al. 2019): the variant row, its presets and their sources."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_roberta import BertologyRobertaConfig
from ..models.modeling_roberta import BertologyRobertaForPreTraining
from .base import Variant, make_preset

VARIANT = Variant(
    "roberta",
    BertologyRobertaConfig,
    BertologyRobertaForPreTraining,
    DataCollatorForMaskedLM,
    "bpe",
    plain_auto_class="AutoModelForMaskedLM",
    backbone="roberta",
)

# RoBERTa: Liu et al. Table 9 (docs/recipes/roberta.md): β2 0.98, ε 1e-6, no clipping, 500k steps of batch 8k at
# length 512.
ROBERTA_TRAINING = {
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_steps": 500_000,
    "per_device_train_batch_size": 8192,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 0.0,
}


PRESETS: dict[str, dict[str, Any]] = {
    # RoBERTa-base/large: 50K byte-level BPE (50265 in the HF vocab), 514 positions (pad offset), one token type.
    "roberta-base": make_preset(
        "roberta",
        "base",
        {"max_position_embeddings": 514, "type_vocab_size": 1},
        {**ROBERTA_TRAINING, "learning_rate": 6e-4, "warmup_steps": 24_000},
        vocab_size=50265,
        max_seq_length=512,
    ),
    "roberta-large": make_preset(
        "roberta",
        "large",
        {"max_position_embeddings": 514, "type_vocab_size": 1},
        {**ROBERTA_TRAINING, "learning_rate": 4e-4, "warmup_steps": 30_000},
        vocab_size=50265,
        max_seq_length=512,
    ),
    "roberta-mini": make_preset(
        "roberta", "mini", {"max_position_embeddings": 130, "type_vocab_size": 1}, ROBERTA_TRAINING
    ),
    "roberta-tiny": make_preset(
        "roberta", "tiny", {"max_position_embeddings": 66, "type_vocab_size": 1}, ROBERTA_TRAINING
    ),
}
