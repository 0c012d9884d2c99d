"""The tables (`VARIANTS`, `PRESETS`, gathered from the family modules in the papers' order) and `Recipe`: a preset
made concrete, with its config and everything needed to train it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from ..data.vocab import train_tokenizer
from ..utils import BertologyError
from . import albert, bert, deberta_v3, electra, electra_15, modernbert, replace_mlm, roberta, spanbert, xlnet
from .backbones import BACKBONES, PART_FIELDS
from .base import CONFIG_ERRORS, Network, Variant, _fields, _one_line, check_override_keys

FAMILY_MODULES = (bert, roberta, spanbert, albert, xlnet, electra, deberta_v3, modernbert, electra_15, replace_mlm)
VARIANTS: dict[str, Variant] = {family.VARIANT.name: family.VARIANT for family in FAMILY_MODULES}
PRESETS: dict[str, dict[str, Any]] = {
    name: preset for family in FAMILY_MODULES for name, preset in family.PRESETS.items()
}


@dataclass
class Recipe:
    """A preset made concrete: the config (architecture + objective) and everything needed to train it."""

    name: str
    variant_name: str  # the objective's variant (a key of VARIANTS; `variant` is its row)
    config: PretrainedConfig
    training_defaults: dict[str, Any]
    vocab_size: int
    max_seq_length: int
    tokenizer_kwargs: dict[str, Any] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()  # config fields the user set (get_recipe's overrides)
    backbone: str | None = None  # another paper's encoder (BACKBONES) under this objective; None: the paper's own
    # A later pretraining phase (ModernBERT's): the config fields it sets on the checkpoint it starts from, whose
    # optimizer state it carries (training/phases.py); None: not a phase recipe.
    phase_config: dict[str, Any] | None = None
    # Batch-size warmup (training/batch_warmup.py): (tokens over all processes, first batch in examples); None: none.
    batch_size_warmup: tuple[int, int] | None = None
    # Its two networks trained together, the answer every later step is given (`Variant.networks`; an RTD objective
    # on another encoder: `composed.rtd_networks`); () : one network. None: the variant's own.
    networks: tuple[Network, ...] | None = None

    def __post_init__(self) -> None:
        if self.networks is None:
            self.networks = self.variant.networks if self.backbone is None else ()

    @property
    def variant(self) -> Variant:
        """The objective's variant row: collator, tokenizer family, prediction cap, Trainer."""
        return VARIANTS[self.variant_name]

    @property
    def config_class(self) -> type:
        return BACKBONES[self.backbone].config_class if self.backbone else self.variant.config_class

    @property
    def model_class(self) -> type:
        return BACKBONES[self.backbone].model_class if self.backbone else self.variant.model_class

    @property
    def plain_auto_class(self) -> str:
        """The plain-transformers class that loads the checkpoint (a composed model with a generator: its
        discriminator)."""
        if self.backbone is None:
            return self.variant.plain_auto_class
        return "AutoModel" if self.config.writes_joint_type else "AutoModelForMaskedLM"

    @property
    def padding_free(self) -> bool:
        """Whether batches can be flattened (collators/flatten.py) for this model."""
        return BACKBONES[self.backbone].packable if self.backbone else self.variant.padding_free

    @property
    def tokenizer_type(self) -> str:
        return self.variant.tokenizer_type

    def train_tokenizer(
        self, texts: Iterable[str], vocab_size: int | None = None, length: int | None = None
    ) -> PreTrainedTokenizerBase:
        """The family's tokenizer, trained on `texts` with `vocab_size` (default: the preset's)."""
        return train_tokenizer(
            texts,
            self.tokenizer_type,
            vocab_size or self.vocab_size,
            tokenizer_class=self.variant.tokenizer_class,
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
        for name, rule in self.variant.length_rules.items():
            if name not in explicit and getattr(self.config, name, None):
                setattr(self.config, name, rule(self.config, max_seq_length))
        if self.variant.prediction_cap is None:
            return self.config
        name, rule = self.variant.prediction_cap
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
        return self.variant.collator_class.from_config(self.config, tokenizer, **overrides)


def preset_recipe(name: str, config_overrides: dict[str, Any]) -> Recipe:
    """Preset `name` on its paper's own encoder with `config_overrides` applied to its config (`get_recipe` after
    it has read the name; an objective on another encoder is `composed.compose`'s)."""
    preset = PRESETS[name]
    variant = VARIANTS[preset["variant"]]
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
        variant_name=variant.name,
        config=config,
        training_defaults=dict(preset["training"]),
        vocab_size=vocab_size,
        max_seq_length=data.get("max_seq_length", 128),
        tokenizer_kwargs=dict(preset.get("tokenizer", {})),
        explicit=frozenset(config_overrides),
        phase_config=preset.get("phase_config"),
        batch_size_warmup=data.get("batch_size_warmup"),
    )
