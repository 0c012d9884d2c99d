"""RoBERTa (Liu et al. 2019): the variant row, its presets and their sources."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_roberta import BertologyRobertaConfig
from ..models.modeling_roberta import BertologyRobertaForPreTraining
from .base import SMALL_DATA, Variant, make_preset

VARIANT = Variant(
    "roberta",
    BertologyRobertaConfig,
    BertologyRobertaForPreTraining,
    DataCollatorForMaskedLM,
    "bpe",
    plain_auto_class="AutoModelForMaskedLM",
    backbone="roberta",
    card_objective="masked LM with dynamic masking (exact count, 80/10/10), FULL-SENTENCES blocks, no NSP",
)

# RoBERTa: Liu et al. Table 9 (docs/recipes/roberta.md): β2 0.98, ε 1e-6, no clipping, 500k steps of batch 8k at
# length 512. fairseq's Adam decays every parameter (trainer.py:305-310 hands it all of them), biases and LayerNorm
# included.
ROBERTA_TRAINING = {
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "max_steps": 500_000,
    "global_batch_size": 8192,
    "lr_scheduler_type": "linear",
    "optim_args": "exclude_from_weight_decay=none",
    "max_grad_norm": 0.0,
}


# RoBERTa-base/large (Table 9): (peak lr, warmup steps); 50K byte-level BPE (50265 in the HF vocab) at length 512.
ROBERTA_SCHEDULES = {"base": (6e-4, 24_000), "large": (4e-4, 30_000)}


def _roberta_preset(size: str) -> dict:
    """A RoBERTa preset: one token type, positions for its length + 2 (the padding offset: 514 at 512)."""
    length = SMALL_DATA[size]["max_seq_length"] if size in SMALL_DATA else 512
    config = {"max_position_embeddings": length + 2, "type_vocab_size": 1}
    if size in SMALL_DATA:
        return make_preset("roberta", size, config, ROBERTA_TRAINING)
    lr, warmup = ROBERTA_SCHEDULES[size]
    training = {**ROBERTA_TRAINING, "learning_rate": lr, "warmup_steps": warmup}
    return make_preset("roberta", size, config, training, vocab_size=50265, max_seq_length=length)


PRESETS: dict[str, dict[str, Any]] = {
    f"roberta-{size}": _roberta_preset(size) for size in ("base", "large", "mini", "tiny")
}
