"""BERT (Devlin et al. 2019): the variant row, the sizes and training settings of its presets, and their sources."""

from __future__ import annotations

import math
from typing import Any

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_bert import BertologyBertConfig
from ..models.modeling_bert import BertologyBertForPreTraining
from .base import Variant, make_preset


def bert_max_predictions(mlm_probability: float, max_seq_length: int) -> int:
    """BERT's README: set `max_predictions_per_seq` "to around max_seq_length * masked_lm_prob": 20 at 128 and 80 at
    512 (NVIDIA's phase 2), i.e. the product rounded up to a multiple of 5. Never below the masked count, so the cap
    never binds."""
    products = math.ceil(round(mlm_probability * max_seq_length, 6))  # round(): 0.15 * 100 is 15.000000000000002
    return -(-products // 5) * 5


VARIANT = Variant(
    "bert",
    BertologyBertConfig,
    BertologyBertForPreTraining,
    DataCollatorForMaskedLM,
    "wordpiece",
    prediction_cap=("max_predictions_per_seq", lambda c, n: bert_max_predictions(c.mlm_probability, n)),
    backbone="bert",
    parts={"sentence_task": "nsp"},
    card_objective="masked LM (exact count, 80/10/10) + next-sentence prediction",
)

# BERT: Devlin et al. App. A.2 and google-research/bert (docs/recipes/bert.md). Phase 1 of the schedule: length 128.
# The optimizer and schedule of optimization.py:25-84: AdamWeightDecay (no bias correction, no decay on LayerNorm
# and biases), warmup step/W, then 1 - step/T from step 0 (training/optimizers.py).
BERT_TRAINING = {
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "max_steps": 1_000_000,
    "global_batch_size": 256,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"decay_from_start": True},
    "optim_args": "bias_correction=False",
    "max_grad_norm": 1.0,
}

# Ours, not the paper's: the mini size's settings chosen by its sweep (docs/recipes/bert.md "Mini sweep (CPU)")
BERT_MINI = {"learning_rate": 2e-4, "warmup_steps": 0.2}

PRESETS: dict[str, dict[str, Any]] = {
    "bert-base": make_preset("bert", "base", training=BERT_TRAINING, vocab_size=30522, max_seq_length=128),
    "bert-large": make_preset("bert", "large", training=BERT_TRAINING, vocab_size=30522, max_seq_length=128),
    "bert-mini": make_preset("bert", "mini", training=BERT_TRAINING, tuned=BERT_MINI),
    "bert-tiny": make_preset("bert", "tiny", training=BERT_TRAINING),
}
