"""ModernBERT (Warner et al. 2024): the variant row, its three phases as presets, and their sources
(docs/recipes/modernbert.md gives every number with its official file and line)."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_modernbert import BertologyModernBertConfig
from ..models.modeling_modernbert import BertologyModernBertForPreTraining
from .base import SIZES, SMALL_DATA, Variant, make_preset

VARIANT = Variant(
    "modernbert",
    BertologyModernBertConfig,
    BertologyModernBertForPreTraining,
    DataCollatorForMaskedLM,
    "bpe",
    plain_auto_class="AutoModelForMaskedLM",
    backbone="modernbert",
    card_objective="masked LM with 30% dynamic masking (80/10/10), whole documents packed and kept apart, sparse "
    "prediction",
)

# ModernBERT: AnswerDotAI/ModernBERT, branch pretraining_documentation, yamls/modernbert/modernbert-{base,large}-
# {pretrain,context-extension,learning-rate-decay}.yaml and main.py; every number with its file and line:
# docs/recipes/modernbert.md. Three phases, each a recipe: `modernbert-<size>` (phase 1, 1024 tokens, RoPE θ 10,000
# on every layer, warmup then constant), `-context-extension` (8192 tokens, θ 160,000 on global layers, constant lr)
# and `-decay` (8192 tokens, 1-sqrt decay to 0.001×); a later phase starts from the previous one's folder
# (`--model_name_or_path`). Optimizer: StableAdamW with learning-rate-decoupled weight decay (`decoupled_stableadamw`
# -> optimi.StableAdamW(decouple_lr=True), main.py:243-258), which replaces gradient clipping (main.py:421-428):
# transformers' `optim="stable_adamw"` builds it from torch-optimi; no decay on biases and norms (its param groups,
# main.py:97-110: transformers' rule gives the same set, ModernBERT having no biases).
# Steps = tokens / (batch × length).
MODERNBERT_TRAINING = {
    "optim": "stable_adamw",
    "optim_args": "decouple_lr=True",
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-6,
    "weight_decay": 1e-5,
    "max_grad_norm": 0.0,
    "lr_scheduler_type": "constant_with_warmup",  # warmup_stable_decay with t_decay 0tok: no decay in phase 1
}
MODERNBERT_SIZES = {
    "base": {"num_hidden_layers": 22, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 1152},
    "large": {"num_hidden_layers": 28, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 2624},
}


def modernbert_rope(global_theta: float, local_theta: float = 10_000.0) -> dict:
    """RoPE θ of the global (full) and local (sliding-window) layers (the yaml's `rotary_emb_base`,
    `local_attn_rotary_emb_base`)."""
    return {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": global_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        }
    }


# Dropout: only the attention output's (`attn_out_dropout_prob: 0.1`); embeddings, MLP, attention probabilities 0.0.
MODERNBERT_CONFIG = {
    "attention_output_dropout": 0.1,
    "attention_dropout": 0.0,
    "embedding_dropout": 0.0,
    "mlp_dropout": 0.0,
    **modernbert_rope(10_000.0),  # phase 1: `rotary_emb_base: 10000.0`, no local base (the same on every layer)
}
# ModernBERT's tokenizer family: byte-level BPE (OLMo's, GPT-NeoX style) with BERT's [CLS]/[SEP]/[MASK] specials.
MODERNBERT_TOKENIZER = {
    "vocab": {"[CLS]": 0, "[PAD]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": 4},
    **{f"{name}_token": f"[{token}]" for name, token in [("bos", "CLS"), ("eos", "SEP"), ("cls", "CLS")]},
    **{f"{name}_token": f"[{token}]" for name, token in [("sep", "SEP"), ("pad", "PAD"), ("unk", "UNK")]},
    "mask_token": "[MASK]",
}
# Per phase and size: (tokens, sequence length, batch, lr, weight decay, warmup tokens) from the yamls.
MODERNBERT_PHASES = {
    ("pretrain", "base"): (1_719_000_000_000, 1024, 4608, 8e-4, 1e-5, 3_000_000_000),
    ("pretrain", "large"): (1_719_000_000_000, 1024, 4928, 5e-4, 1e-5, 2_000_000_000),
    ("context-extension", "base"): (250_000_000_000, 8192, 576, 3e-4, 1e-5, 0),
    ("context-extension", "large"): (250_000_000_000, 8192, 616, 5e-5, 1e-6, 0),
    ("decay", "base"): (50_000_000_000, 8192, 576, 3e-4, 1e-5, 0),
    ("decay", "large"): (50_000_000_000, 8192, 624, 5e-5, 1e-6, 0),
}

# Phase 1's batch-size warmup (yaml l.77-78, l.123/130): (tokens, first batch in sequences = one micro-batch).
MODERNBERT_BATCH_WARMUP = {"base": (50_000_000_000, 96), "large": (10_000_000_000, 56)}


def _modernbert_preset(size: str, phase: str = "pretrain") -> dict:
    training = dict(MODERNBERT_TRAINING)
    config = {**MODERNBERT_CONFIG, **MODERNBERT_SIZES.get(size, {})}
    data = {}
    if size not in SMALL_DATA:
        tokens, length, batch, lr, decay, warmup = MODERNBERT_PHASES[(phase, size)]
        steps = round(tokens / (batch * length))
        training.update(
            learning_rate=lr,
            weight_decay=decay,
            global_batch_size=batch,
            warmup_steps=round(warmup / (batch * length)),
            max_steps=steps,
        )
        data = {"vocab_size": 50368, "max_seq_length": length}
        if phase == "pretrain":  # batch_size_warmup_tokens; _min_size: one micro-batch (device_train_microbatch_size)
            data["batch_size_warmup"] = MODERNBERT_BATCH_WARMUP[size]
            training["per_device_train_batch_size"] = MODERNBERT_BATCH_WARMUP[size][1]  # the official micro-batch
        if phase != "pretrain":
            config.update(modernbert_rope(160_000.0))  # `rotary_emb_base: 160000.0`, `local_attn_rotary_emb_base`
            training["lr_scheduler_type"] = "constant"  # constant_with_warmup, t_warmup 0tok
        if phase == "decay":  # one_minus_sqrt over the whole phase, alpha_f 0.001
            training["lr_scheduler_type"] = "warmup_stable_decay"
            training["lr_scheduler_kwargs"] = {"num_decay_steps": steps, "decay_type": "1-sqrt", "min_lr_ratio": 1e-3}
    preset = make_preset("modernbert", size if size in SIZES else "base", None, training, **data)
    preset["config"] = {**preset["config"], **config}
    if phase != "pretrain":  # `load_path` of the previous phase, `load_weights_only: false`, `restart_override: true`
        preset["phase_config"] = modernbert_rope(160_000.0)
    return {**preset, "tokenizer": MODERNBERT_TOKENIZER}


PRESETS: dict[str, dict[str, Any]] = {
    "modernbert-base": _modernbert_preset("base"),
    "modernbert-large": _modernbert_preset("large"),
    "modernbert-base-context-extension": _modernbert_preset("base", "context-extension"),
    "modernbert-large-context-extension": _modernbert_preset("large", "context-extension"),
    "modernbert-base-decay": _modernbert_preset("base", "decay"),
    "modernbert-large-decay": _modernbert_preset("large", "decay"),
    "modernbert-mini": _modernbert_preset("mini"),
    "modernbert-tiny": _modernbert_preset("tiny"),
}
