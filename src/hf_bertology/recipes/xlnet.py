"""XLNet (Yang et al. 2019): the variant row, its length rules, its presets and their sources."""

from __future__ import annotations

from typing import Any

from ..collators import DataCollatorForPermutationLM
from ..models.configuration_xlnet import BertologyXLNetConfig
from ..models.modeling_xlnet import BertologyXLNetForPreTraining
from .base import SMALL_DATA, Variant, make_preset


def xlnet_num_predict(mask_alpha: float, mask_beta: float, max_seq_length: int) -> int:
    """zihangdai/xlnet README: `num_predict=85` for `seq_len=512`, i.e. `round(len * beta / alpha)` (K = 6)."""
    return max(1, round(max_seq_length * mask_beta / mask_alpha))


VARIANT = Variant(
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
    card_objective="permutation LM (two-stream attention): 1/6 of the tokens, in whole-word spans, predicted in a "
    "random factorisation order; memory of the previous segment",
)

# XLNet: Yang et al. (paper, Large: batch 8192, 500k steps, lr 4e-4, warmup 40k, linear decay, Adam eps 1e-6, wd 0.01)
# and zihangdai/xlnet (clip 1.0) (docs/recipes/xlnet.md). The paper gives one schedule; base reuses it. With weight
# decay the official optimizer is AdamWeightDecay (model_utils.py:134-139: no bias correction; r_s/r_r/r_w_bias
# decay, other biases and LayerNorm do not, :305,370-382), at 0 TF's bias-corrected Adam (:130-133): XLNetTrainer
# chooses by the weight decay; decay from the warmup's end to min_lr_ratio 0.001 (:107-112, train.py:57).
XLNET_TRAINING = {
    "learning_rate": 4e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 40_000,
    "max_steps": 500_000,
    "global_batch_size": 8192,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"min_lr_ratio": 0.001},
    "optim_args": "include_in_weight_decay=r_s_bias|r_r_bias|r_w_bias",
    "max_grad_norm": 1.0,
}
# The official SentencePiece ids: <unk> 0, <s> 1, </s> 2, <cls> 3, <sep> 4, <pad> 5, <mask> 6, <eod> 7, <eop> 8.
XLNET_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
XLNET_TOKENIZER = {
    "vocab": [(token, 0.0) for token in XLNET_SPECIAL_TOKENS],
    "additional_special_tokens": ["<eod>", "<eop>"],
}


def _xlnet_preset(size: str, seq_len: int, tuned: dict | None = None, **config) -> dict:
    """XLNet with the README's proportions: reuse = perm = seq/2, mem = 3/4 seq (384 of 512), 1/6 predicted."""
    objective = {"reuse_len": seq_len // 2, "perm_size": seq_len // 2, "mem_len": seq_len * 3 // 4, **config}
    data = {} if size in SMALL_DATA else {"vocab_size": 32000, "max_seq_length": seq_len}
    return {**make_preset("xlnet", size, objective, XLNET_TRAINING, tuned, **data), "tokenizer": XLNET_TOKENIZER}


# Ours, not the paper's: the mini size's settings chosen by its sweep (docs/recipes/xlnet.md "Mini sweep (CPU)")
XLNET_MINI = {"learning_rate": 2e-4, "warmup_steps": 0.2}


PRESETS: dict[str, dict[str, Any]] = {
    # XLNet-base/large: seq 512, reuse 256, perm 256, mem 384, 85 targets (README, xlnet #59); cased 32k Unigram.
    "xlnet-base": _xlnet_preset("base", 512, num_predict=85),
    "xlnet-large": _xlnet_preset("large", 512, num_predict=85),
    # Small sizes: the same proportions at their lengths; the number of targets follows the length (1/6).
    "xlnet-mini": _xlnet_preset("mini", SMALL_DATA["mini"]["max_seq_length"], XLNET_MINI, num_predict=None),
    "xlnet-tiny": _xlnet_preset("tiny", SMALL_DATA["tiny"]["max_seq_length"], num_predict=None),
}
