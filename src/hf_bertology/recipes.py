"""Named presets: the papers' model sizes, objective hyperparameters and training settings, as data.

    recipe = get_recipe("roberta-base", hidden_dropout_prob=0.0)
    recipe.config              # BertologyRobertaConfig with the paper's sizes and objective
    recipe.training_defaults   # TrainingArguments values from the paper (lr, warmup, betas, ...)
    tokenizer = recipe.train_tokenizer(texts)
    model = recipe.build_model()
    collator = recipe.build_collator(tokenizer)

A variant (BERT, RoBERTa, ...) is one `Variant` row: its config, model and collator classes and its tokenizer
family. A preset is one `PRESETS` entry: sizes + objective settings + training defaults. Adding either needs no
branch anywhere else. Sources for every number: ../shared/RECIPES.md (cited per preset below).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from .collators import (
    DataCollatorForMaskedLM,
    DataCollatorForPermutationLM,
    DataCollatorForSpanMasking,
    DataCollatorForWindowMasking,
)
from .data.vocab import train_tokenizer
from .models.albert import BertologyAlbertConfig, BertologyAlbertForPreTraining
from .models.bert import BertologyBertConfig, BertologyBertForPreTraining
from .models.composed import COMPOSED_CONFIGS, COMPOSED_MODELS
from .models.deberta_v3 import BertologyDebertaV3Config, BertologyDebertaV3ForPreTraining
from .models.electra import BertologyElectraConfig, BertologyElectraForPreTraining
from .models.modernbert import BertologyModernBertConfig, BertologyModernBertForPreTraining
from .models.roberta import BertologyRobertaConfig, BertologyRobertaForPreTraining
from .models.spanbert import BertologySpanBertConfig, BertologySpanBertForPreTraining
from .models.xlnet import BertologyXLNetConfig, BertologyXLNetForPreTraining
from .utils import BertologyError, logger


@dataclass(frozen=True)
class Variant:
    """One pretraining method: which classes implement it and which tokenizer family it uses."""

    name: str
    config_class: type
    model_class: type
    collator_class: type
    tokenizer_type: str  # "wordpiece" | "bpe" | "unigram"
    tokenizer_class: str | None = None  # transformers class name when the family default is not right
    plain_auto_class: str = "AutoModelForPreTraining"  # the plain-transformers class that loads the checkpoint
    trainer_class: str = "trainer.BertologyTrainer"  # module.Class under hf_bertology.training (no upward import)
    padding_free: bool = True  # batches can be flattened (collators/flatten.py); XLNet's permutation inputs cannot
    # (config field, rule(config, max_seq_length)): the prediction cap the official code derives from the length
    prediction_cap: tuple[str, Callable[[PretrainedConfig, int], int]] | None = None
    # {config field: rule(config, max_seq_length)}: other settings the paper sizes by the length (XLNet's memory)
    length_rules: dict[str, Callable[[PretrainedConfig, int], int]] = field(default_factory=dict)
    # The paper's encoder (a key of BACKBONES; None: the objective works on no other, as XLNet's) and the objective's
    # parts other than masking (fields of the composed config, see models/composed) when it runs on another encoder.
    backbone: str | None = None
    parts: dict[str, Any] = field(default_factory=dict)


def bert_max_predictions(mlm_probability: float, max_seq_length: int) -> int:
    """BERT's README: set `max_predictions_per_seq` "to around max_seq_length * masked_lm_prob": 20 at 128 and 80 at
    512 (NVIDIA's phase 2), i.e. the product rounded up to a multiple of 5. Never below the masked count, so the cap
    never binds."""
    products = math.ceil(round(mlm_probability * max_seq_length, 6))  # round(): 0.15 * 100 is 15.000000000000002
    return -(-products // 5) * 5


def electra_max_predictions(mask_prob: float, max_seq_length: int) -> int:
    """`int((mask_prob + 0.005) * max_seq_length)` (configure_pretraining.py): 19 @128, 79 @512, 130 @512/0.25."""
    return int((mask_prob + 0.005) * max_seq_length)


def xlnet_num_predict(mask_alpha: float, mask_beta: float, max_seq_length: int) -> int:
    """zihangdai/xlnet README: `num_predict=85` for `seq_len=512`, i.e. `round(len * beta / alpha)` (K = 6)."""
    return max(1, round(max_seq_length * mask_beta / mask_alpha))


VARIANTS: dict[str, Variant] = {
    "bert": Variant(
        "bert",
        BertologyBertConfig,
        BertologyBertForPreTraining,
        DataCollatorForMaskedLM,
        "wordpiece",
        prediction_cap=("max_predictions_per_seq", lambda c, n: bert_max_predictions(c.mlm_probability, n)),
        backbone="bert",
        parts={"sentence_task": "nsp"},
    ),
    "roberta": Variant(
        "roberta",
        BertologyRobertaConfig,
        BertologyRobertaForPreTraining,
        DataCollatorForMaskedLM,
        "bpe",
        plain_auto_class="AutoModelForMaskedLM",
        backbone="roberta",
    ),
    "spanbert": Variant(
        "spanbert",
        BertologySpanBertConfig,
        BertologySpanBertForPreTraining,
        DataCollatorForSpanMasking,
        "wordpiece",
        plain_auto_class="AutoModelForMaskedLM",
        backbone="bert",
        parts={"span_boundary_objective": True},
    ),
    "albert": Variant(
        "albert",
        BertologyAlbertConfig,
        BertologyAlbertForPreTraining,
        DataCollatorForSpanMasking,
        "unigram",
        backbone="albert",
        parts={"sentence_task": "sop"},
    ),
    "xlnet": Variant(
        "xlnet",
        BertologyXLNetConfig,
        BertologyXLNetForPreTraining,
        DataCollatorForPermutationLM,
        "unigram",
        tokenizer_class="XLNetTokenizer",
        trainer_class="xlnet_trainer.XLNetTrainer",
        padding_free=False,  # two-stream relative attention is XLNet's own code, and perm_mask is (B, L, L)
        prediction_cap=("num_predict", lambda c, n: xlnet_num_predict(c.mask_alpha, c.mask_beta, n)),
        # the README's 512: reuse = perm = 256, mem 384 (xlnet issue #59); the same proportions at other lengths
        length_rules={
            "reuse_len": lambda c, n: n // 2,
            "perm_size": lambda c, n: n // 2,
            "mem_len": lambda c, n: n * 3 // 4,
        },
    ),
    # Plain transformers loads the discriminator (ElectraForPreTraining); `bertology export` writes either network.
    "electra": Variant(
        "electra",
        BertologyElectraConfig,
        BertologyElectraForPreTraining,
        DataCollatorForMaskedLM,
        "wordpiece",
        prediction_cap=("max_predictions_per_seq", lambda c, n: electra_max_predictions(c.mlm_probability, n)),
        backbone="electra",
        parts={"replaced_token_detection": True, "embedding_sharing": "es"},  # + generator_hidden_fraction
    ),
    # Plain transformers loads the discriminator (DebertaV2Model, ...ForSequenceClassification); `bertology export
    # --deberta_v3_part generator` writes the generator as a DebertaV2ForMaskedLM.
    "deberta-v3": Variant(
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
    ),
    "modernbert": Variant(
        "modernbert",
        BertologyModernBertConfig,
        BertologyModernBertForPreTraining,
        DataCollatorForMaskedLM,
        "bpe",
        plain_auto_class="AutoModelForMaskedLM",
        backbone="modernbert",
    ),
}

# Encoder sizes (ARCHITECTURE.md): the papers' base/large, a CPU demo (mini) and a test size (tiny).
SIZES: dict[str, dict[str, int]] = {
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
    "mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "tiny": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 37},
}

# Small presets train fast on a CPU: small vocabulary, short sequences, a short schedule with 6% warmup.
SMALL_TRAINING = {
    "mini": {"per_device_train_batch_size": 32, "learning_rate": 5e-4, "warmup_steps": 0.06, "max_steps": 2000},
    "tiny": {"per_device_train_batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 0.06, "max_steps": 10},
}
SMALL_DATA = {"mini": {"vocab_size": 8000, "max_seq_length": 128}, "tiny": {"vocab_size": 1000, "max_seq_length": 64}}

# BERT: Devlin et al. App. A.2 and google-research/bert (RECIPES.md §1). Phase 1 of the schedule: length 128.
BERT_TRAINING = {
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "max_steps": 1_000_000,
    "per_device_train_batch_size": 256,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 1.0,
}
# RoBERTa: Liu et al. Table 9 (RECIPES.md §2): β2 0.98, ε 1e-6, no clipping, 500k steps of batch 8k at length 512.
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

# SpanBERT: the official README command (RECIPES.md §3): lr 1e-4, 10k warmup, polynomial decay (power 1, to ~0:
# transformers' "polynomial" ends at 1e-7), Adam eps 1e-8 (fairseq's default betas 0.9/0.999), wd 0.01, clip 1.0,
# 2.4M updates of ≈256 blocks of 512 tokens.
SPANBERT_TRAINING = {
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "max_steps": 2_400_000,
    "per_device_train_batch_size": 256,
    "lr_scheduler_type": "polynomial",
    "max_grad_norm": 1.0,
}
SPANBERT_TOKENIZER = {"do_lower_case": False}  # cased WordPiece (cased_bert_pair_large, vocab 28996)
# ALBERT: README pretraining command (RECIPES.md §4): batch 4096, lr 0.00176, 3125 warmup, 125k steps, linear
# decay, wd 0.01, eps 1e-6. The official optimizer is LAMB, which torch does not ship: the Trainer's AdamW runs
# instead (LAMB's per-layer trust ratio is what keeps this lr stable at batch 4096; lower it for AdamW).
ALBERT_TRAINING = {
    "learning_rate": 0.00176,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 3125,
    "max_steps": 125_000,
    "per_device_train_batch_size": 4096,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 1.0,
}
# v2 settings: gelu_new, no dropout; E=128; all layers shared (one group). xlarge/xxlarge sizes from Table 1.
ALBERT_ARCH = {"embedding_size": 128, "hidden_act": "gelu_new", "num_hidden_groups": 1, "inner_group_num": 1}
ALBERT_ARCH.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
ALBERT_SIZES = {
    "xlarge": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "intermediate_size": 8192},
    "xxlarge": {"num_hidden_layers": 12, "hidden_size": 4096, "num_attention_heads": 64, "intermediate_size": 16384},
}


def _preset(variant: str, size: str, config: dict | None = None, training: dict | None = None, **data) -> dict:
    small = size in SMALL_DATA
    return {
        "variant": variant,
        "config": {**SIZES[size], **(config or {})},
        "training": {**(training or {}), **(SMALL_TRAINING[size] if small else {})},
        "data": {**data, **(SMALL_DATA[size] if small else {})},
    }


# XLNet: Yang et al. (paper, Large: batch 8192, 500k steps, lr 4e-4, warmup 40k, linear decay, Adam eps 1e-6, wd 0.01)
# and zihangdai/xlnet (clip 1.0) (RECIPES.md §6). The paper gives one schedule; base reuses it.
XLNET_TRAINING = {
    "learning_rate": 4e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 40_000,
    "max_steps": 500_000,
    "per_device_train_batch_size": 8192,
    "lr_scheduler_type": "linear",
    "max_grad_norm": 1.0,
}
# The official SentencePiece ids: <unk> 0, <s> 1, </s> 2, <cls> 3, <sep> 4, <pad> 5, <mask> 6, <eod> 7, <eop> 8.
XLNET_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
XLNET_TOKENIZER = {
    "vocab": [(token, 0.0) for token in XLNET_SPECIAL_TOKENS],
    "additional_special_tokens": ["<eod>", "<eop>"],
}


def _xlnet_preset(size: str, seq_len: int, **config) -> dict:
    """XLNet with the README's proportions: reuse = perm = seq/2, mem = 3/4 seq (384 of 512), 1/6 predicted."""
    objective = {"reuse_len": seq_len // 2, "perm_size": seq_len // 2, "mem_len": seq_len * 3 // 4, **config}
    data = {} if size in SMALL_DATA else {"vocab_size": 32000, "max_seq_length": seq_len}
    return {**_preset("xlnet", size, objective, XLNET_TRAINING, **data), "tokenizer": XLNET_TOKENIZER}


# ELECTRA: google-research/electra configure_pretraining.py and Table 6 of Clark et al. (RECIPES.md §5): AdamW
# β=(0.9, 0.999), ε 1e-6, wd 0.01, clip 1.0, linear decay, 10k warmup; lr/batch/steps per size below.
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
    "bert-base": _preset("bert", "base", training=BERT_TRAINING, vocab_size=30522, max_seq_length=128),
    "bert-large": _preset("bert", "large", training=BERT_TRAINING, vocab_size=30522, max_seq_length=128),
    "bert-mini": _preset("bert", "mini", training=BERT_TRAINING),
    "bert-tiny": _preset("bert", "tiny", training=BERT_TRAINING),
    # RoBERTa-base/large: 50K byte-level BPE (50265 in the HF vocab), 514 positions (pad offset), one token type.
    "roberta-base": _preset(
        "roberta",
        "base",
        {"max_position_embeddings": 514, "type_vocab_size": 1},
        {**ROBERTA_TRAINING, "learning_rate": 6e-4, "warmup_steps": 24_000},
        vocab_size=50265,
        max_seq_length=512,
    ),
    "roberta-large": _preset(
        "roberta",
        "large",
        {"max_position_embeddings": 514, "type_vocab_size": 1},
        {**ROBERTA_TRAINING, "learning_rate": 4e-4, "warmup_steps": 30_000},
        vocab_size=50265,
        max_seq_length=512,
    ),
    "roberta-mini": _preset(
        "roberta", "mini", {"max_position_embeddings": 130, "type_vocab_size": 1}, ROBERTA_TRAINING
    ),
    "roberta-tiny": _preset(
        "roberta", "tiny", {"max_position_embeddings": 66, "type_vocab_size": 1}, ROBERTA_TRAINING
    ),
    "spanbert-base": {
        **_preset("spanbert", "base", training=SPANBERT_TRAINING, vocab_size=28996, max_seq_length=512),
        "tokenizer": SPANBERT_TOKENIZER,
    },
    "spanbert-large": {
        **_preset("spanbert", "large", training=SPANBERT_TRAINING, vocab_size=28996, max_seq_length=512),
        "tokenizer": SPANBERT_TOKENIZER,
    },
    "spanbert-mini": {**_preset("spanbert", "mini", training=SPANBERT_TRAINING), "tokenizer": SPANBERT_TOKENIZER},
    "spanbert-tiny": {**_preset("spanbert", "tiny", training=SPANBERT_TRAINING), "tokenizer": SPANBERT_TOKENIZER},
    "albert-base": _preset("albert", "base", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
    "albert-large": _preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
    "albert-xlarge": {
        **_preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
        "config": {**ALBERT_ARCH, **ALBERT_SIZES["xlarge"]},
    },
    "albert-xxlarge": {
        **_preset("albert", "large", ALBERT_ARCH, ALBERT_TRAINING, vocab_size=30000, max_seq_length=512),
        "config": {**ALBERT_ARCH, **ALBERT_SIZES["xxlarge"]},
    },
    "albert-mini": _preset("albert", "mini", ALBERT_ARCH, ALBERT_TRAINING),
    "albert-tiny": _preset("albert", "tiny", {**ALBERT_ARCH, "embedding_size": 16}, ALBERT_TRAINING),
    # XLNet-base/large: seq 512, reuse 256, perm 256, mem 384, 85 targets (README, xlnet #59); cased 32k Unigram.
    "xlnet-base": _xlnet_preset("base", 512, num_predict=85),
    "xlnet-large": _xlnet_preset("large", 512, num_predict=85),
    # Small sizes: the same proportions at their lengths; the number of targets follows the length (1/6).
    "xlnet-mini": _xlnet_preset("mini", SMALL_DATA["mini"]["max_seq_length"], num_predict=None),
    "xlnet-tiny": _xlnet_preset("tiny", SMALL_DATA["tiny"]["max_seq_length"], num_predict=None),
    # ELECTRA (Table 6): generator 1/4, 1/3, 1/4 of the discriminator; mask 15/15/25%; uncased WordPiece 30522.
    "electra-small": _preset(
        "electra",
        "base",
        {**ELECTRA_SMALL, "embedding_size": 128, "max_predictions_per_seq": electra_max_predictions(0.15, 128)},
        {**ELECTRA_TRAINING, "learning_rate": 5e-4, "per_device_train_batch_size": 128, "max_steps": 1_000_000},
        vocab_size=30522,
        max_seq_length=128,
    ),
    "electra-base": _preset(
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
    "electra-large": _preset(
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
    "electra-mini": _preset(
        "electra",
        "mini",
        {"embedding_size": 128, "max_predictions_per_seq": electra_max_predictions(0.15, 128)},
        ELECTRA_TRAINING,
    ),
    "electra-tiny": _preset(
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


# DeBERTa-v3: microsoft/DeBERTa experiments/language_model (rtd.sh, rtd_*.json, DeBERTa/optims/args.py): Adam
# β (0.9, 0.999), ε 1e-6, wd 0.01, clip 1.0, linear warmup (10k steps) then linear decay (`warmup_linear`), 1M steps
# at length 512; lr 1e-4 at batch 256 (base, large; small has no from-scratch entry and takes base's), 3e-4 at batch
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


def _deberta_v3_preset(size: str, lr: float | None = None, batch: int | None = None) -> dict:
    """A DeBERTa-v3 preset: the official sizes (xsmall, small) or the shared ones (base, large, mini, tiny)."""
    base_size = size if size in SIZES else "base"
    seq_len = SMALL_DATA[size]["max_seq_length"] if size in SMALL_DATA else 512
    config = {**DEBERTA_V3_SIZES.get(size, {}), "max_predictions_per_seq": deberta_max_predictions(0.15, seq_len)}
    training = {**DEBERTA_V3_TRAINING, "learning_rate": lr, "per_device_train_batch_size": batch}
    data = {} if size in SMALL_DATA else {"vocab_size": 128100, "max_seq_length": 512}
    preset = _preset("deberta-v3", base_size, None, {k: v for k, v in training.items() if v is not None}, **data)
    preset["config"] = {**preset["config"], **config}
    return {**preset, "tokenizer": DEBERTA_V3_TOKENIZER}


PRESETS.update(
    {
        "deberta-v3-xsmall": _deberta_v3_preset("xsmall", lr=3e-4, batch=64),
        "deberta-v3-small": _deberta_v3_preset("small", lr=1e-4, batch=256),
        "deberta-v3-base": _deberta_v3_preset("base", lr=1e-4, batch=256),
        "deberta-v3-large": _deberta_v3_preset("large", lr=1e-4, batch=256),
        "deberta-v3-mini": _deberta_v3_preset("mini"),
        "deberta-v3-tiny": _deberta_v3_preset("tiny"),
    }
)

# ModernBERT: AnswerDotAI/ModernBERT, branch pretraining_documentation, yamls/modernbert/modernbert-{base,large}-
# {pretrain,context-extension,learning-rate-decay}.yaml and main.py; every number with its file and line:
# docs/recipes/modernbert.md. Three phases, each a recipe: `modernbert-<size>` (phase 1, 1024 tokens, RoPE θ 10,000
# on every layer, warmup then constant), `-context-extension` (8192 tokens, θ 160,000 on global layers, constant lr)
# and `-decay` (8192 tokens, 1-sqrt decay to 0.001×); a later phase starts from the previous one's folder
# (`--model_name_or_path`). Optimizer: StableAdamW with learning-rate-decoupled weight decay (`decoupled_stableadamw`
# -> optimi.StableAdamW(decouple_lr=True), main.py:243-258), which replaces gradient clipping (main.py:421-428):
# transformers' `optim="stable_adamw"` builds it from torch-optimi; no decay on biases and norms (its param groups,
# main.py:97-110: transformers' rule gives the same set, ModernBERT having no biases). Steps = tokens / (batch × length).
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
    """RoPE θ of the global (full) and local (sliding-window) layers (`rotary_emb_base`, `local_attn_rotary_emb_base`)."""
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
            per_device_train_batch_size=batch,
            warmup_steps=round(warmup / (batch * length)),
            max_steps=steps,
        )
        data = {"vocab_size": 50368, "max_seq_length": length}
        if phase != "pretrain":
            config.update(modernbert_rope(160_000.0))  # `rotary_emb_base: 160000.0`, `local_attn_rotary_emb_base`
            training["lr_scheduler_type"] = "constant"  # constant_with_warmup, t_warmup 0tok
        if phase == "decay":  # one_minus_sqrt over the whole phase, alpha_f 0.001
            training["lr_scheduler_type"] = "warmup_stable_decay"
            training["lr_scheduler_kwargs"] = {"num_decay_steps": steps, "decay_type": "1-sqrt", "min_lr_ratio": 1e-3}
    preset = _preset("modernbert", size if size in SIZES else "base", None, training, **data)
    preset["config"] = {**preset["config"], **config}
    return {**preset, "tokenizer": MODERNBERT_TOKENIZER}


PRESETS.update(
    {
        "modernbert-base": _modernbert_preset("base"),
        "modernbert-large": _modernbert_preset("large"),
        "modernbert-base-context-extension": _modernbert_preset("base", "context-extension"),
        "modernbert-large-context-extension": _modernbert_preset("large", "context-extension"),
        "modernbert-base-decay": _modernbert_preset("base", "decay"),
        "modernbert-large-decay": _modernbert_preset("large", "decay"),
        "modernbert-mini": _modernbert_preset("mini"),
        "modernbert-tiny": _modernbert_preset("tiny"),
    }
)


# -- objectives on other encoders (models/composed) -------------------------------------------------------------


@dataclass(frozen=True)
class Backbone:
    """An encoder an objective can run on: its composed classes, and the paper variant whose presets give its
    architecture (activation, embedding size, positions, DeBERTa-v3's relative attention, ...) at each size."""

    name: str
    model_type: str
    architecture_of: str
    packable: bool  # its layers call transformers' AttentionInterface with the varlen keywords (padding-free)

    @property
    def config_class(self) -> type:
        return COMPOSED_CONFIGS[self.model_type]

    @property
    def model_class(self) -> type:
        return COMPOSED_MODELS[self.model_type]


BACKBONES: dict[str, Backbone] = {
    "bert": Backbone("bert", "bert", "bert", packable=True),
    "roberta": Backbone("roberta", "roberta", "roberta", packable=True),
    "albert": Backbone("albert", "albert", "albert", packable=True),
    "electra": Backbone("electra", "electra", "electra", packable=True),
    "deberta": Backbone("deberta", "deberta-v2", "deberta-v3", packable=False),  # DeBERTa-v2 classes, v3 settings
    "modernbert": Backbone("modernbert", "modernbert", "modernbert", packable=False),
}
# Input formats whose examples carry segment B (token type 1): NSP/SOP pairs, ELECTRA's two segments.
SEGMENT_FORMATS = ("nsp_pairs", "sop_pairs", "electra_segments")
BACKBONE_ALIASES = {"deberta-v2": "deberta", "deberta-v3": "deberta"}
SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
# Set by the tokenizer (adapt_to_tokenizer) or by transformers, never taken from another preset.
IDENTITY_FIELDS = {"vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"}
IDENTITY_FIELDS |= {"architectures", "model_type", "transformers_version", "auto_map", "dtype", "id2label", "label2id"}
# Objective fields that do not carry over: ELECTRA's two-stage switch needs its own model; the composed generator's
# depth is `generator_layers_fraction`.
NATIVE_ONLY_FIELDS = ("two_stage_generator_steps", "generator_num_hidden_layers")
PART_FIELDS = ("sentence_task", "span_boundary_objective")
SENTENCE_FORMATS = {"nsp": "nsp_pairs", "sop": "sop_pairs"}


def _fields(config_class: type) -> set[str]:
    return set(config_class().to_dict())


def _family_config(config_class: type) -> type:
    """The `transformers` config a hf_bertology config class extends (`BertConfig` for ours and composed ones)."""
    return next(base for base in config_class.__mro__[1:] if base.__module__.startswith("transformers."))


# What a config class raises for a bad value: its own checks, and transformers' strict dataclass validation.
CONFIG_ERRORS = (ValueError, TypeError, StrictDataclassError)


def _one_line(err: Exception) -> str:
    """The error's message as one line (a strict dataclass error puts its reason on a second line)."""
    return " ".join(str(err).split()) or type(err).__name__


def check_override_keys(recipe: str, overrides: dict[str, Any], known: set[str]) -> None:
    """A config override must name a field of the recipe's config: `PretrainedConfig` keeps any unknown keyword as an
    attribute, so a misspelt `num_hidden_layer=1` would otherwise train the default depth without a word."""
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BertologyError(f"{recipe}: {key!r} is not a field of its config{hint}")


def _normalise_parts(parts: dict[str, Any]) -> dict[str, Any]:
    parts = dict(parts)
    if "sentence_task" in parts and str(parts["sentence_task"]).lower() in ("none", "", "false"):
        parts["sentence_task"] = None
    return parts


def _parts_change(variant: Variant, requested: dict[str, Any]) -> bool:
    defaults = {"sentence_task": None, "span_boundary_objective": False}
    return any(value != variant.parts.get(name, defaults[name]) for name, value in requested.items())


def _compose(name: str, variant: Variant, backbone_name: str, overrides: dict[str, Any]) -> Recipe:
    """Preset `name`'s objective (masking, sentence task, SBO, RTD) and sizes on another encoder (`models/composed`).

    The architecture is the backbone's own preset at the same size (`roberta-mini` for `electra-mini@roberta`; its
    base preset where no such size exists), with the objective preset's layer sizes; every objective field of the
    paper's config carries over, so the collator, the input format and the prediction cap are the paper's.
    Combinations that cannot work are refused here with one line.
    """
    if variant.backbone is None:
        raise BertologyError(
            f"{name}: the {variant.name} objective runs only on its own encoder (XLNet's permutation LM needs "
            "XLNet's two-stream attention and memory); pick another recipe for --backbone"
        )
    backbone = BACKBONES[backbone_name]
    for field_name in NATIVE_ONLY_FIELDS:
        if overrides.get(field_name) is not None:
            raise BertologyError(f"{field_name} works only with the {variant.name} recipe's own encoder")
    if overrides.get("replaced_token_detection") is not None:
        raise BertologyError("replaced_token_detection comes with the electra and deberta-v3 objectives")
    preset = PRESETS[name]
    objective_config = get_recipe(name).config
    native_fields = _fields(_family_config(variant.config_class))
    objective = {
        key: value
        for key, value in objective_config.to_dict().items()
        if key not in native_fields and key not in NATIVE_ONLY_FIELDS and not key.startswith("_")
    }
    size = name.rsplit("-", 1)[-1]
    architecture_name = f"{backbone.architecture_of}-{size}"
    if architecture_name not in PRESETS:
        architecture_name = f"{backbone.architecture_of}-base"
    family_fields = _fields(_family_config(backbone.config_class))
    architecture = {
        key: value
        for key, value in get_recipe(architecture_name).config.to_dict().items()
        if key in family_fields and key not in IDENTITY_FIELDS and not key.startswith("_")
    }
    values = {**architecture, **{key: getattr(objective_config, key) for key in SIZE_FIELDS}}
    values.update(objective, **variant.parts, objective=variant.name, vocab_size=objective_config.vocab_size)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if key in family_fields:  # the objective's tokenizer family (adapt_to_tokenizer sets the real ids)
            values[key] = getattr(objective_config, key, None)
    max_seq_length = preset["data"].get("max_seq_length", SMALL_DATA.get(size, {}).get("max_seq_length", 128))
    if "max_position_embeddings" in family_fields:  # RoBERTa's positions start after the padding index
        needed = max_seq_length + (2 if backbone.model_type == "roberta" else 0)
        values["max_position_embeddings"] = max(values.get("max_position_embeddings") or 0, needed)
    check_override_keys(f"{name}@{backbone.name}", overrides, set(values) | family_fields | set(PART_FIELDS))
    requested = _normalise_parts({key: overrides[key] for key in PART_FIELDS if key in overrides})
    values.update(requested)
    if "sentence_task" in requested:
        task = requested["sentence_task"]
        if task is not None:
            values["input_format"] = SENTENCE_FORMATS.get(task, values["input_format"])
        elif values["input_format"] in SENTENCE_FORMATS.values():
            values["input_format"] = "full_sentences"
    if "type_vocab_size" in family_fields and values["input_format"] in SEGMENT_FORMATS:
        own = values.get("type_vocab_size") or 0  # the family's own (RoBERTa 1, DeBERTa-v3 0); kept otherwise
        if own < 2 and "type_vocab_size" not in overrides:
            logger.warning(
                "%s@%s: the %s examples have two segments and %s has %d token type(s): type_vocab_size=2",
                name,
                backbone.name,
                values["input_format"],
                backbone.name,
                own,
            )
            values["type_vocab_size"] = 2
    if values.get("sentence_task") is not None and "type_vocab_size" not in family_fields:
        raise BertologyError(
            f"{values['sentence_task']} needs token types (segment embeddings) and {backbone.name} has none; "
            "pass sentence_task=none in --config_overrides or pick another backbone"
        )
    if values.get("span_boundary_objective") and variant.collator_class is not DataCollatorForSpanMasking:
        raise BertologyError(
            f"span_boundary_objective needs span masking; the {variant.name} objective masks tokens (use spanbert)"
        )
    if values.get("replaced_token_detection") and values.get("sentence_task") is not None:
        raise BertologyError("replaced-token detection with a sentence task is not supported; set sentence_task=none")
    values.update({key: value for key, value in overrides.items() if key not in PART_FIELDS})
    if values.get("replaced_token_detection") and not _can_share_embeddings(backbone, values):
        if "embedding_sharing" in overrides and values["embedding_sharing"] != "nes":
            raise BertologyError(
                f"embedding_sharing={values['embedding_sharing']} needs the generator's word table as wide as the "
                f"discriminator's, and {backbone.name} has no embedding projection: set generator_hidden_fraction=1.0 "
                "or embedding_sharing=nes"
            )
        logger.warning(
            "%s on %s: the generator (generator_hidden_fraction=%s) is narrower than the discriminator and %s has "
            "no embedding projection, so the embeddings cannot be shared: embedding_sharing=nes",
            variant.name,
            backbone.name,
            values.get("generator_hidden_fraction"),
            backbone.name,
        )
        values["embedding_sharing"] = "nes"
    try:
        config = backbone.config_class(**values)
    except CONFIG_ERRORS as err:
        raise BertologyError(f"{name}@{backbone.name}: {_one_line(err)}") from None
    return Recipe(
        name=f"{name}@{backbone.name}",
        variant=variant.name,
        config=config,
        training_defaults=dict(preset["training"]),
        vocab_size=objective_config.vocab_size,
        max_seq_length=max_seq_length,
        tokenizer_kwargs=dict(preset.get("tokenizer", {})),
        explicit=frozenset(overrides),
        backbone=backbone.name,
    )


def _can_share_embeddings(backbone: Backbone, values: dict[str, Any]) -> bool:
    """Whether the generator's word table can have the discriminator's width: always with a factorised embedding
    (ALBERT, ELECTRA `embedding_size`; DeBERTa's `embed_proj`), else only at the same hidden size."""
    return (
        backbone.model_type in ("albert", "electra", "deberta-v2") or values.get("generator_hidden_fraction", 1) == 1
    )


@dataclass
class Recipe:
    """A preset made concrete: the config (architecture + objective) and everything needed to train it."""

    name: str
    variant: str
    config: PretrainedConfig
    training_defaults: dict[str, Any]
    vocab_size: int
    max_seq_length: int
    tokenizer_kwargs: dict[str, Any] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()  # config fields the user set (get_recipe's overrides)
    backbone: str | None = None  # another paper's encoder (BACKBONES) under this objective; None: the paper's own

    @property
    def spec(self) -> Variant:
        """The objective's variant: collator, tokenizer family, prediction cap, Trainer."""
        return VARIANTS[self.variant]

    @property
    def config_class(self) -> type:
        return BACKBONES[self.backbone].config_class if self.backbone else self.spec.config_class

    @property
    def model_class(self) -> type:
        return BACKBONES[self.backbone].model_class if self.backbone else self.spec.model_class

    @property
    def plain_auto_class(self) -> str:
        """The plain-transformers class that loads the checkpoint (a composed RTD model: its discriminator)."""
        if self.backbone is None:
            return self.spec.plain_auto_class
        return "AutoModel" if self.config.replaced_token_detection else "AutoModelForMaskedLM"

    @property
    def padding_free(self) -> bool:
        """Whether batches can be flattened (collators/flatten.py) for this model."""
        return BACKBONES[self.backbone].packable if self.backbone else self.spec.padding_free

    @property
    def tokenizer_type(self) -> str:
        return self.spec.tokenizer_type

    def train_tokenizer(
        self, texts: Iterable[str], vocab_size: int | None = None, length: int | None = None
    ) -> PreTrainedTokenizerBase:
        """The family's tokenizer, trained on `texts` with `vocab_size` (default: the preset's)."""
        return train_tokenizer(
            texts,
            self.tokenizer_type,
            vocab_size or self.vocab_size,
            tokenizer_class=self.spec.tokenizer_class,
            length=length,
            **self.tokenizer_kwargs,
        )

    def adapt_to_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        """Set the config's vocabulary size and special-token ids from `tokenizer` (in place; returned)."""
        self.config.vocab_size = len(tokenizer)
        for name in ("pad", "bos", "eos", "cls", "sep"):
            token_id = getattr(tokenizer, f"{name}_token_id", None)
            if token_id is not None and hasattr(self.config, f"{name}_token_id"):
                setattr(self.config, f"{name}_token_id", token_id)
        return self.config

    def fit_to_length(self, max_seq_length: int, explicit: Iterable[str] = ()) -> PretrainedConfig:
        """Settle the run's sequence length: the prediction cap follows it by the official rule (in place; returned).

        BERT `max_predictions_per_seq` (`bert_max_predictions`: 20 at 128, 80 at 512), ELECTRA
        `max_predictions_per_seq` (`int((mask_prob + 0.005) * length)`: 19 at 128, 79 at 512), XLNet `num_predict`
        (`round(length / 6)`: 85 at 512). A cap set explicitly (in `get_recipe`'s overrides, in `explicit`, e.g.
        `--config_overrides`, or by an earlier run: `predictions_follow_length=False` in the checkpoint's config) is
        kept, and so is no cap (`None`); variants without such a rule have no cap by default.

        XLNet's `reuse_len` and `perm_size` (half the length) and `mem_len` (three quarters) follow the length too
        (`Variant.length_rules`), unless set explicitly; 0 or `None` (no memory, no local permutation) stays.
        """
        self.max_seq_length = max_seq_length
        explicit = set(explicit) | set(self.explicit)
        for name, rule in self.spec.length_rules.items():
            if name not in explicit and getattr(self.config, name, None):
                setattr(self.config, name, rule(self.config, max_seq_length))
        if self.spec.prediction_cap is None:
            return self.config
        name, rule = self.spec.prediction_cap
        if name in explicit:
            self.config.predictions_follow_length = False  # saved with the checkpoint: a continued run keeps it
        if getattr(self.config, "predictions_follow_length", True) and getattr(self.config, name) is not None:
            setattr(self.config, name, rule(self.config, max_seq_length))
        return self.config

    def build_model(self):
        """A freshly initialised `Bertology*ForPreTraining` for this config."""
        return self.model_class(self.config)

    def build_collator(self, tokenizer: PreTrainedTokenizerBase, **overrides):
        """The collator the config's objective needs (`from_config`)."""
        return self.spec.collator_class.from_config(self.config, tokenizer, **overrides)


def parse_overrides(text: str | None, separator: str = ",", flag: str = "--config_overrides") -> dict:
    """`"a=1,b=0.5,c=true,d=gelu"` -> `{"a": 1, "b": 0.5, "c": True, "d": "gelu"}`."""
    overrides = {}
    for item in filter(None, (text or "").split(separator)):
        if "=" not in item:
            raise BertologyError(f"{flag} expects key=value pairs, got {item!r}")
        key, raw = (part.strip() for part in item.split("=", 1))
        try:
            overrides[key] = json.loads(raw.lower() if raw.lower() in ("true", "false", "null") else raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides


def list_recipes() -> list[str]:
    """Names of every preset."""
    return list(PRESETS)


def get_recipe(name: str, backbone: str | None = None, **config_overrides) -> Recipe:
    """The preset `name` with `config_overrides` applied to its config (e.g. `num_hidden_layers=6`).

    `backbone` (or `name@backbone`, e.g. `electra-small@roberta`) runs the preset's objective on another encoder
    (a key of `BACKBONES`); so does changing a part of the objective (`sentence_task`, `span_boundary_objective`).
    Overrides can ride in the name too, after `+` (`deberta-v3-mini+embedding_sharing=es`, `bert-mini@roberta+
    sentence_task=sop`), so that one recipe string (e.g. in `bertology compare --recipes`) names a variation.
    """
    full_name = name
    if "+" in name:
        name, _, extra = name.partition("+")
        config_overrides = {**parse_overrides(extra, "+", f"recipe {full_name!r}"), **config_overrides}
        recipe = get_recipe(name, backbone=backbone, **config_overrides)
        recipe.name = full_name
        return recipe
    if "@" in name:
        name, _, named_backbone = name.partition("@")
        if backbone is not None and BACKBONE_ALIASES.get(backbone, backbone) != named_backbone:
            raise BertologyError(f"recipe {name}@{named_backbone} and backbone {backbone!r} disagree")
        backbone = named_backbone
    if name not in PRESETS:
        raise BertologyError(f"unknown recipe {name!r}; known: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    variant = VARIANTS[preset["variant"]]
    backbone = BACKBONE_ALIASES.get(backbone, backbone)
    if backbone is not None and backbone not in BACKBONES:
        raise BertologyError(f"unknown backbone {backbone!r}; known: {', '.join(BACKBONES)}")
    parts = _normalise_parts({key: config_overrides[key] for key in PART_FIELDS if key in config_overrides})
    if backbone not in (None, variant.backbone) or _parts_change(variant, parts):
        return _compose(name, variant, backbone or variant.backbone, config_overrides)
    check_override_keys(
        name, config_overrides, _fields(variant.config_class) | set(preset["config"]) | set(PART_FIELDS)
    )
    config_overrides = {key: value for key, value in config_overrides.items() if key not in PART_FIELDS}
    data = dict(preset["data"])
    vocab_size = config_overrides.get("vocab_size", data.get("vocab_size", 30522))
    try:
        config = variant.config_class(**{**preset["config"], "vocab_size": vocab_size, **config_overrides})
    except CONFIG_ERRORS as err:
        raise BertologyError(f"{name}: {_one_line(err)}") from None
    return Recipe(
        name=name,
        variant=variant.name,
        config=config,
        training_defaults=dict(preset["training"]),
        vocab_size=vocab_size,
        max_seq_length=data.get("max_seq_length", 128),
        tokenizer_kwargs=dict(preset.get("tokenizer", {})),
        explicit=frozenset(config_overrides),
    )


def backbone_of_model_class(class_name: str) -> str | None:
    """The backbone whose composed model class is named `class_name` (a checkpoint's `auto_map`), or None."""
    return next((b.name for b in BACKBONES.values() if b.model_class.__name__ == class_name), None)
