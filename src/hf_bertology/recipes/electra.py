"""ELECTRA (Clark et al. 2020): the variant row, its presets and their sources."""

from __future__ import annotations

from typing import Any

from transformers import ElectraForMaskedLM, ElectraForPreTraining

from ..collators import DataCollatorForMaskedLM
from ..models.configuration_electra import BertologyElectraConfig
from ..models.configuration_recipe import generator_config
from ..models.modeling_electra import BertologyElectraForPreTraining
from .base import SMALL_DATA, Network, Variant, make_preset


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
        Network("discriminator", ElectraForPreTraining, "", lambda joint: joint.config.discriminator_config()),
        Network("generator", ElectraForMaskedLM, "generator.", lambda joint: generator_config(joint.config)),
    ),
    card_objective="replaced-token detection: generator MLM (exact count, 85% [MASK] / 15% kept) + 50 x "
    "discriminator BCE over all tokens on replacements sampled from the generator (inverse CDF), shared embeddings",
)

# ELECTRA: google-research/electra configure_pretraining.py and Table 6 of Clark et al. (docs/recipes/electra.md):
# AdamWeightDecay (model/optimization.py:50-56: no bias correction, no decay on LayerNorm and biases) β=(0.9, 0.999),
# ε 1e-6, wd 0.01, clip 1.0; lr = min(1, step/10k) x (1 - step/T) (:36-45, warmup and decay together); lr/batch/steps
# per size below.
ELECTRA_TRAINING = {
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
    "warmup_steps": 10_000,
    "lr_scheduler_type": "linear",
    "lr_scheduler_kwargs": {"decay_from_start": True, "warmup_scales_decay": True},
    "optim_args": "bias_correction=False",
    "max_grad_norm": 1.0,
}
# The mini preset's changes to the training (issue 52's sweep, docs/recipes/electra.md): without bias correction
# Adam's first steps are (1 - β1^t) / sqrt(1 - β2^t) times larger (5x at step 36, 3x at 100, 1.5x at 600), which the
# paper's 10k-step warmup hides and a 36-step one does not.
MINI_TRAINING = {"optim_args": "bias_correction=True"}
# Discriminator sizes (util/training_utils.py): heads = H/64, FFN = 4H; E = 128 for small, E = H otherwise.
ELECTRA_SMALL = {"num_hidden_layers": 12, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}


# Per preset, Table 6 (configure_pretraining.py for the length): (encoder, its changes, length, lr, batch, steps). The
# generator is 1/4, 1/3, 1/4 of the discriminator; mask 15/15/25%; uncased WordPiece 30522.
ELECTRA_PAPER = {
    "small": ("base", {**ELECTRA_SMALL, "embedding_size": 128}, 128, 5e-4, 128, 1_000_000),
    "base": ("base", {"embedding_size": 768, "generator_hidden_fraction": 1 / 3}, 512, 2e-4, 256, 766_000),
    "large": ("large", {"embedding_size": 1024, "mlm_probability": 0.25}, 512, 2e-4, 2048, 400_000),
}


def _electra_preset(
    size: str,
    config: dict,
    length: int | None = None,
    lr: float | None = None,
    batch: int | None = None,
    steps: int | None = None,
    mini: bool = False,
) -> dict:
    """An ELECTRA preset with the official prediction cap for its mask rate and length. A row of `ELECTRA_PAPER`
    (`length` given) also takes its schedule, the uncased WordPiece vocabulary and that length; a small size, those
    of `SMALL_DATA`."""
    mask = config.get("mlm_probability", 0.15)  # the config's default; Table 6's 15% but for large
    cap = electra_max_predictions(mask, length or SMALL_DATA[size]["max_seq_length"])
    config = {**config, "max_predictions_per_seq": cap}
    if length is None:
        return make_preset("electra", size, config, {**ELECTRA_TRAINING, **(MINI_TRAINING if mini else {})})
    training = {**ELECTRA_TRAINING, "learning_rate": lr, "global_batch_size": batch, "max_steps": steps}
    return make_preset("electra", size, config, training, vocab_size=30522, max_seq_length=length)


PRESETS: dict[str, dict[str, Any]] = {
    **{f"electra-{name}": _electra_preset(*row) for name, row in ELECTRA_PAPER.items()},
    # Ours (docs/recipes/electra.md "The mini preset"): Adam with bias correction, which the paper's 10k warmup steps
    # make unnecessary but a 600-step run needs; the generator sampled at temperature 3 (the official `temperature`),
    # whose replacements a discriminator this small and this short can still tell; ELECTRA-large's 25% mask, whose
    # larger replaced share a discriminator this uncertain can beat the constant guess on.
    "electra-mini": _electra_preset(
        "mini", {"embedding_size": 128, "sampling_temperature": 3.0, "mlm_probability": 0.25}, mini=True
    ),
    "electra-tiny": _electra_preset("tiny", {"embedding_size": 32, "max_position_embeddings": 64}),
}
