"""ALBERT (Lan et al. 2020): the variant row, its presets (v2 settings) and their sources."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForSpanMasking
from ..models.configuration_albert import BertologyAlbertConfig
from ..models.modeling_albert import BertologyAlbertForPreTraining
from .base import Variant, make_preset

VARIANT = Variant(
    "albert",
    BertologyAlbertConfig,
    BertologyAlbertForPreTraining,
    DataCollatorForSpanMasking,
    "unigram",
    backbone="albert",
    parts={"sentence_task": "sop"},
    card_objective="n-gram masked LM over whole words (n <= 3, 15%, 80/10/10) + sentence-order prediction",
)

# ALBERT: README pretraining command (docs/recipes/albert.md): batch 4096, lr 0.00176, 3125 warmup, 125k steps, wd
# 0.01, eps 1e-6. LAMB (run_pretraining.py:72, optimization.py:82-90; training/optimizers.py `Lamb`), no decay nor
# layer adaptation on LayerNorm and biases; BERT's schedule (optimization.py:37-64: warmup, then 1 - step/T).
ALBERT_TRAINING = {
    "learning_rate": 0.00176,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 3125,
    "max_steps": 125_000,
    "global_batch_size": 4096,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"decay_from_start": True},
    "optim_args": "bias_correction=False,layer_adaptation=True",
    "max_grad_norm": 1.0,
}
# v2 settings: gelu_new, no dropout; E=128; all layers shared (one group). xlarge/xxlarge sizes from Table 1.
ALBERT_ARCH = {"embedding_size": 128, "hidden_act": "gelu_new", "num_hidden_groups": 1, "inner_group_num": 1}
ALBERT_ARCH.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
ALBERT_SIZES = {
    "xlarge": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "intermediate_size": 8192},
    "xxlarge": {"num_hidden_layers": 12, "hidden_size": 4096, "num_attention_heads": 64, "intermediate_size": 16384},
}

# Ours, not the paper's: the mini size's settings chosen by its sweep (docs/recipes/albert.md "Mini sweep (CPU)")
ALBERT_MINI = {"learning_rate": 1e-3}

PRESETS: dict[str, dict[str, Any]] = {
    "albert-base": make_preset("albert", "base", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
    "albert-large": make_preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
    "albert-xlarge": {
        **make_preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
        "config": {**ALBERT_ARCH, **ALBERT_SIZES["xlarge"]},
    },
    "albert-xxlarge": {
        **make_preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
        "config": {**ALBERT_ARCH, **ALBERT_SIZES["xxlarge"]},
    },
    "albert-mini": make_preset("albert", "mini", ALBERT_ARCH, ALBERT_TRAINING, ALBERT_MINI),
    "albert-tiny": make_preset("albert", "tiny", {**ALBERT_ARCH, "embedding_size": 16}, ALBERT_TRAINING),
}
