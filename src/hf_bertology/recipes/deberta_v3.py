"""DeBERTa-v3 (He et al. 2021): the variant row, its presets and their sources."""

from __future__ import annotations

import math
from typing import Any

from transformers import DebertaV2Config, DebertaV2ForMaskedLM, DebertaV2Model

from ..collators import DataCollatorForWindowMasking
from ..models.configuration_deberta_v3 import BertologyDebertaV3Config
from ..models.configuration_recipe import generator_config
from ..models.modeling_deberta_v3 import BertologyDebertaV3ForPreTraining
from .base import SIZES, SMALL_DATA, Network, Variant, make_preset

# DeBERTa-v3: microsoft/DeBERTa experiments/language_model (rtd.sh, rtd_*.json, DeBERTa/optims/args.py): Adam
# β (0.9, 0.999), ε 1e-6, no bias correction (XAdam), wd 0.01, clip 1.0, linear warmup (10k steps) then
# `warmup_linear` (1 - step/total), 1M steps at length 512; lr 1e-4 at batch 256 (base, large; small has no from-scratch entry and takes base's), 3e-4 at batch
# 64 (xsmall). Loss MLM + 10 RTD (rtd_task.py --rtd_lambda default; the paper says 50). Sizes: heads of 64, FFN 4H;
# generator = half the depth, same width. Every number with its source file and line: docs/recipes/deberta_v3.md.
DEBERTA_V3_TRAINING = {
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "max_steps": 1_000_000,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"decay_from_start": True},  # `warmup_linear`: after warmup 1 - step/total
    "optim_args": "bias_correction=False",  # XAdam: `adamw(..., bias_correction=0)`
    "max_grad_norm": 1.0,
}
DEBERTA_V3_SIZES = {
    "xsmall": {"num_hidden_layers": 12, "hidden_size": 384, "num_attention_heads": 6, "intermediate_size": 1536},
    "small": {"num_hidden_layers": 6, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
}
# The official SentencePiece ids: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3 ([MASK] is 4 here; officially 128000, the end).
DEBERTA_V3_TOKENIZER = {"vocab": [(token, 0.0) for token in ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]")]}


def deberta_max_predictions(mask_prob: float, max_seq_length: int) -> int:
    """`ceil(max_seq_len * mask_lm_prob / 10) * 10` (NGramMaskGenerator): 80 @512, 20 @128, 10 @64."""
    return math.ceil(max_seq_length * mask_prob / 10) * 10


# The released DeBERTa-v3 generator's head, in the layout every transformers version resizes correctly:
# `legacy=True` names it `cls.predictions.*` with a decoder tied to the word table. (With `legacy=False`,
# `DebertaV2ForMaskedLM.get_output_embeddings` returns the head's hidden x hidden `dense`, so
# `resize_token_embeddings`, which run_mlm.py calls, reshapes that layer and the forward fails on the LayerNorm.)
LEGACY_HEAD = {
    "cls.predictions.transform.dense.": "lm_predictions.lm_head.dense.",
    "cls.predictions.transform.LayerNorm.": "lm_predictions.lm_head.LayerNorm.",
    "cls.predictions.bias": "lm_predictions.lm_head.bias",
    "cls.predictions.decoder.bias": "lm_predictions.lm_head.bias",
    "cls.predictions.decoder.weight": "deberta.embeddings.word_embeddings.weight",
}


def plain_generator_config(joint) -> DebertaV2Config:
    """The generator's plain config, with the `LEGACY_HEAD` names."""
    generator = generator_config(joint.config)
    generator.legacy = True
    return generator


# Plain transformers loads the discriminator (DebertaV2Model, ...ForSequenceClassification); `bertology export
# --part generator` writes the generator as a DebertaV2ForMaskedLM (as the released `pytorch_model.generator.bin`;
# transformers has no EMD, so the generator's EMD positions stay in the joint checkpoint, docs/recipes/deberta_v3.md).
VARIANT = Variant(
    "deberta-v3",
    BertologyDebertaV3Config,
    BertologyDebertaV3ForPreTraining,
    DataCollatorForWindowMasking,  # one position per 6-token window (official NGramMaskGenerator)
    "unigram",
    tokenizer_class="DebertaV2Tokenizer",
    plain_auto_class="AutoModel",
    prediction_cap=("max_predictions_per_seq", lambda c, n: deberta_max_predictions(c.mlm_probability, n)),
    padding_free=False,  # disentangled attention is DeBERTa's own code, not an AttentionInterface call
    backbone="deberta",
    # the generator at half the depth, same width (official rtd_*.json); + embedding_sharing
    parts={"replaced_token_detection": True, "generator_layers_fraction": 0.5},
    networks=(
        Network("discriminator", DebertaV2Model, "deberta.", lambda joint: joint.config.discriminator_config()),
        Network(
            "generator",
            DebertaV2ForMaskedLM,
            "generator.",
            plain_generator_config,
            rename=LEGACY_HEAD,
            may_lack=("deberta.embeddings.position_embeddings.weight",),  # its EMD positions: checkpoints before EMD
        ),
    ),
    card_objective="replaced-token detection (DeBERTa-v3): half-depth generator MLM (exact count, all [MASK]) + 10 x "
    "discriminator BCE over all tokens (the official script's lambda), gradient-disentangled embedding sharing (or "
    "ES/NES, see the recipe)",
)


def _deberta_v3_preset(
    size: str,
    lr: float | None = None,
    batch: int | None = None,
    tuned: dict | None = None,
    changes: dict | None = None,
) -> dict:
    """A DeBERTa-v3 preset: the official sizes (xsmall, small) or the shared ones (base, large, mini, tiny), with the
    official prediction cap for its mask rate and length. `changes`: a small size's config changes (its sweep's)."""
    base_size = size if size in SIZES else "base"
    seq_len = SMALL_DATA[size]["max_seq_length"] if size in SMALL_DATA else 512
    mask = (changes or {}).get("mlm_probability", 0.15)
    config = {**DEBERTA_V3_SIZES.get(size, {}), **(changes or {})}
    config["max_predictions_per_seq"] = deberta_max_predictions(mask, seq_len)
    training = {**DEBERTA_V3_TRAINING, "learning_rate": lr, "global_batch_size": batch}
    data = {} if size in SMALL_DATA else {"vocab_size": 128100, "max_seq_length": 512}
    training = {k: v for k, v in training.items() if v is not None}
    preset = make_preset("deberta-v3", base_size, None, training, tuned, **data)
    preset["config"] = {**preset["config"], **config}
    return {**preset, "tokenizer": DEBERTA_V3_TOKENIZER}


# Ours, not the paper's: the mini size's settings chosen by its sweep (docs/recipes/deberta_v3.md "Mini sweep (CPU)").
# At the shared lr and warmup its discriminator collapses to the constant guess as ELECTRA-mini's did, and ELECTRA-
# mini's cure works here too: Adam with bias correction, the generator sampled at temperature 3, a 25% mask.
DEBERTA_V3_MINI = {"optim_args": "bias_correction=True"}
DEBERTA_V3_MINI_CHANGES = {"sampling_temperature": 3.0, "mlm_probability": 0.25}

PRESETS: dict[str, dict[str, Any]] = {
    "deberta-v3-xsmall": _deberta_v3_preset("xsmall", lr=3e-4, batch=64),
    "deberta-v3-small": _deberta_v3_preset("small", lr=1e-4, batch=256),
    "deberta-v3-base": _deberta_v3_preset("base", lr=1e-4, batch=256),
    "deberta-v3-large": _deberta_v3_preset("large", lr=1e-4, batch=256),
    "deberta-v3-mini": _deberta_v3_preset("mini", tuned=DEBERTA_V3_MINI, changes=DEBERTA_V3_MINI_CHANGES),
    "deberta-v3-tiny": _deberta_v3_preset("tiny"),
}
