"""SpanBERT (Joshi et al. 2020): the variant row, its presets and their sources."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForSpanMasking
from ..models.configuration_spanbert import BertologySpanBertConfig
from ..models.modeling_spanbert import BertologySpanBertForPreTraining
from .base import Variant, make_preset

VARIANT = Variant(
    "spanbert",
    BertologySpanBertConfig,
    BertologySpanBertForPreTraining,
    DataCollatorForSpanMasking,
    "wordpiece",
    plain_auto_class="AutoModelForMaskedLM",
    backbone="bert",
    parts={"span_boundary_objective": True},
    card_objective="geometric span masking over whole words (15%, 80/10/10 per span) + span boundary objective, no NSP",
)

# SpanBERT: the official README command (docs/recipes/spanbert.md): lr 1e-4, 10k warmup, polynomial decay (power 1,
# to 0, measured from step 0: its fairseq's polynomial_decay_schedule.py:57-64), Adam eps 1e-8 (fairseq's default
# betas 0.9/0.999), wd 0.01 on every parameter (trainer.py:101,106), clip 1.0, 2.4M updates of ≈256 blocks of 512.
SPANBERT_TRAINING = {
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "max_steps": 2_400_000,
    "global_batch_size": 256,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"decay_from_start": True},
    "optim_args": "exclude_from_weight_decay=none",
    "max_grad_norm": 1.0,
}
SPANBERT_TOKENIZER = {"do_lower_case": False}  # cased WordPiece (cased_bert_pair_large, vocab 28996)


PRESETS: dict[str, dict[str, Any]] = {
    "spanbert-base": {
        **make_preset("spanbert", "base", training=SPANBERT_TRAINING, vocab_size=28996, max_seq_length=512),
        "tokenizer": SPANBERT_TOKENIZER,
    },
    "spanbert-large": {
        **make_preset("spanbert", "large", training=SPANBERT_TRAINING, vocab_size=28996, max_seq_length=512),
        "tokenizer": SPANBERT_TOKENIZER,
    },
    "spanbert-mini": {**make_preset("spanbert", "mini", training=SPANBERT_TRAINING), "tokenizer": SPANBERT_TOKENIZER},
    "spanbert-tiny": {**make_preset("spanbert", "tiny", training=SPANBERT_TRAINING), "tokenizer": SPANBERT_TOKENIZER},
}
