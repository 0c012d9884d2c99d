"""The encoders an objective can run on (`models/composed`): `Backbone` rows and the config fields that say what
carries over from one preset to another."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..models.configuration_composed import COMPOSED_CONFIGS
from ..models.modeling_composed import COMPOSED_MODELS, FAMILY_CLASSES
from .base import Network


@dataclass(frozen=True)
class Backbone:
    """An encoder an objective can run on: its composed classes, and the paper variant whose presets give its
    architecture (activation, embedding size, positions, DeBERTa-v3's relative attention, ...) at each size."""

    name: str
    model_type: str
    architecture_of: str
    packable: bool  # its layers call transformers' AttentionInterface with the varlen keywords (padding-free)
    # RoBERTa's position ids start after the padding index (`pad_token_id + 1`, transformers' `RobertaEmbeddings`),
    # so its table holds that many positions more than the longest sequence
    positions_after_padding: bool = False
    # Its word table has a width of its own (ALBERT's and ELECTRA's `embedding_size`, DeBERTa's `embed_proj`), so a
    # generator narrower than the discriminator can still share it
    own_embedding_width: bool = False
    # Its generator's plain folder takes the released generator's head names (`legacy=True`: DeBERTa-v3's
    # `cls.predictions.*`, recipes/deberta_v3.py `LEGACY_HEAD`)
    legacy_generator_head: bool = False

    @property
    def config_class(self) -> type:
        return COMPOSED_CONFIGS[self.model_type]

    @property
    def model_class(self) -> type:
        return COMPOSED_MODELS[self.model_type]

    def first_position(self, pad_token_id: int | None) -> int:
        """The first position id of a sequence: `pad_token_id + 1` where positions start after the padding index."""
        return pad_token_id + 1 if self.positions_after_padding and pad_token_id is not None else 0


BACKBONES: dict[str, Backbone] = {
    "bert": Backbone("bert", "bert", "bert", packable=True),
    "roberta": Backbone("roberta", "roberta", "roberta", packable=True, positions_after_padding=True),
    "albert": Backbone("albert", "albert", "albert", packable=True, own_embedding_width=True),
    "electra": Backbone("electra", "electra", "electra", packable=True, own_embedding_width=True),
    "deberta": Backbone(  # DeBERTa-v2 classes, v3 settings
        "deberta", "deberta-v2", "deberta-v3", packable=False, own_embedding_width=True, legacy_generator_head=True
    ),
    "modernbert": Backbone("modernbert", "modernbert", "modernbert", packable=False),
}
# Input formats whose examples carry segment B (token type 1): NSP/SOP pairs, ELECTRA's two segments.
SEGMENT_FORMATS = ("nsp_pairs", "sop_pairs", "electra_segments")


def backbone_of(config) -> Backbone | None:
    """The row of the encoder family `config` (any config, ours or plain) belongs to; None for one of no backbone
    (XLNet)."""
    return next((b for b in BACKBONES.values() if b.model_type == getattr(config, "model_type", None)), None)


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


@functools.cache
def rtd_networks(backbone: Backbone) -> tuple[Network, Network]:
    """The networks of an objective with a generator (ELECTRA's, DeBERTa-v3's, Replace MLM's) on `backbone`: the discriminator is the family's base
    model (`RobertaModel` at `roberta.*`), the generator the family's masked LM (`RobertaForMaskedLM` at
    `generator.*`; its output layer is its word table, untied in the joint model only to tie it there). The plain
    configs are those of the networks' modules (the Trainer sets `use_cache` on the joint model's alone)."""
    base_class, masked_lm_class = FAMILY_CLASSES[backbone.model_type]
    family = base_class.config_class

    def discriminator(joint):
        return keep_family_fields(joint.config, family)

    def generator(joint):
        plain = keep_family_fields(joint.generator.config, family)
        plain.tie_word_embeddings = True
        if backbone.legacy_generator_head:
            plain.legacy = True  # the released generator's names (deberta_v3.LEGACY_HEAD)
        return plain

    return (
        Network("discriminator", base_class, f"{base_class.base_model_prefix}.", discriminator),
        Network("generator", masked_lm_class, "generator.", generator),
    )


# Fields a family's modeling code reads with `getattr` though its config class has no default for them: DeBERTa's
# factorised `embedding_size` (a composed generator narrower than the discriminator keeps the shared table's width).
OPTIONAL_FIELDS = ("embedding_size",)


def keep_family_fields(config, config_class):
    """`config` as the family's own config: only the fields that class has (no recipe fields, no `auto_map`).
    `layer_types` is cut to the depth (a generator's config was made shallower after construction, and the network
    built the first `num_hidden_layers` of them)."""
    known = set(config_class().to_dict()) | set(OPTIONAL_FIELDS)
    fields = {k: v for k, v in config.to_dict().items() if k in known and k not in ("architectures", "model_type")}
    if isinstance(fields.get("layer_types"), list):
        fields["layer_types"] = fields["layer_types"][: fields["num_hidden_layers"]]
    return config_class(**fields)
