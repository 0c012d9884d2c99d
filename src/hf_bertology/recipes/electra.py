"""ELECTRA (Clark et al. 2020): the variant row, its presets and their sources."""

from __future__ import annotations

from typing import Any

from transformers import ElectraForMaskedLM, ElectraForPreTraining

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_electra import BertologyElectraConfig, discriminator_config, generator_config
from ..models.modeling_electra import BertologyElectraForPreTraining
from .base import Network, Variant, make_preset


def electra_max_predictions(mask_prob: float, max_seq_length: int) -> int:
    """`int((mask_prob + 0.005) * max_seq_length)` (configure_pretraining.py): 19 @128, 79 @512, 130 @512/0.25."""
    return int((mask_prob + 0.005) * max_seq_length)


# Plain transformers loads the discriminator (ElectraForPreTraining); `bertology export` writes either network, laid
# out as the released google/electra-*-discriminator and -generator.
VARIANT = Variant(
    "electra",
    BertologyElectraConfig,
    BertologyElectraForPreTraining,
    DataCollatorForMaskedLM,
    "wordpiece",
    prediction_cap=("max_predictions_per_seq", lambda c, n: electra_max_predictions(c.mlm_probability, n)),
    backbone="electra",
    parts={"replaced_token_detection": True, "embedding_sharing": "es"},  # + generator_hidden_fraction
    networks=(
        Network("discriminator", ElectraForPreTraining, "", lambda joint: discriminator_config(joint.config)),
        Network("generator", ElectraForMaskedLM, "generator.", lambda joint: generator_config(joint.config)),
    ),
)

# ELECTRA: google-research/electra configure_pretraining.py and Table 6 of Clark et al. (docs/recipes/electra.md):
# AdamW β=(0.9, 0.999), ε 1e-6, wd 0.01, clip 1.0, linear decay, 10k warmup; lr/batch/steps per size below.
ELECTRA_TRAINING = {
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 1.0,
}
# Discriminator sizes (util/training_utils.py): heads = H/64, FFN = 4H; E = 128 for small, E = H otherwise.
ELECTRA_SMALL = {"num_hidden_layers": 12, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}


PRESETS: dict[str, dict[str, Any]] = {
    # ELECTRA (Table 6): generator 1/4, 1/3, 1/4 of the discriminator; mask 15/15/25%; uncased WordPiece 30522.
    "electra-small": make_preset(
        "electra",
        "base",
        {**ELECTRA_SMALL, "embedding_size": 128, "max_predictions_per_seq": electra_max_predictions(0.15, 128)},
        {**ELECTRA_TRAINING, "learning_rate": 5e-4, "per_device_train_batch_size": 128, "max_steps": 1_000_000},
        vocab_size=30522,
        max_seq_length=128,
    ),
    "electra-base": make_preset(
        "electra",
        "base",
        {
            "embedding_size": 768,
            "generator_hidden_fraction": 1 / 3,
            "max_predictions_per_seq": electra_max_predictions(0.15, 512),
        },
        {**ELECTRA_TRAINING, "learning_rate": 2e-4, "per_device_train_batch_size": 256, "max_steps": 766_000},
        vocab_size=30522,
        max_seq_length=512,
    ),
    "electra-large": make_preset(
        "electra",
        "large",
        {
            "embedding_size": 1024,
            "mlm_probability": 0.25,
            "max_predictions_per_seq": electra_max_predictions(0.25, 512),
        },
        {**ELECTRA_TRAINING, "learning_rate": 2e-4, "per_device_train_batch_size": 2048, "max_steps": 400_000},
        vocab_size=30522,
        max_seq_length=512,
    ),
    "electra-mini": make_preset(
        "electra",
        "mini",
        {"embedding_size": 128, "max_predictions_per_seq": electra_max_predictions(0.15, 128)},
        ELECTRA_TRAINING,
    ),
    "electra-tiny": make_preset(
        "electra",
        "tiny",
        {
            "embedding_size": 32,
            "max_position_embeddings": 64,
            "max_predictions_per_seq": electra_max_predictions(0.15, 64),
        },
        ELECTRA_TRAINING,
    ),
}
