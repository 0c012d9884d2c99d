"""One paper's objective on another paper's encoder: masked LM (+ NSP / SOP, + SBO) or replaced-token detection.

The backbone is the family's own `transformers` model and every parameter keeps the name plain `transformers`
gives it: masked-LM objectives adopt the head modules of the family's `*ForMaskedLM` (plain `AutoModelForMaskedLM`
gives the same logits); RTD adds the objective's discriminator head and a family `*ForMaskedLM` generator at
`generator.*`. The losses, heads and sampling are the paper variants' own (`masked_lm`, `span_boundary`,
`replaced_token_detection`); this file builds the model and runs the step. docs/recipes/composed.md.
"""

import transformers
from torch import nn
from transformers import initialization as init
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

from .configuration_composed import COMPOSED_CONFIGS
from .configuration_recipe import first_position, generator_config
from .masked_lm import MLM_HEADS, SENTENCE_TASKS, MaskedLMPreTraining, is_packed, pool_first_tokens
from .outputs import BertologyForPreTrainingOutput
from .replaced_token_detection import (
    OTHER_TABLES,
    WORD_TABLES,
    ClsReplacedTokenDetectionHead,
    DiscriminatorHead,
    GradientDisentangledEmbedding,
    ReplacedTokenDetectionPreTraining,
    add_gdes,
    freeze_gdes_slots,
)
from .span_boundary import SpanBoundaryHead, grow_bias

# model_type -> (backbone class, masked-LM class) of every family an objective runs on (`COMPOSED_CONFIGS`), as
# transformers' Auto classes map them; the backbone's base class is the family's `PreTrainedModel`, which the composed
# model subclasses
FAMILY_CLASSES = {
    model_type: (
        getattr(transformers, MODEL_MAPPING_NAMES[model_type]),
        getattr(transformers, MODEL_FOR_MASKED_LM_MAPPING_NAMES[model_type]),
    )
    for model_type in COMPOSED_CONFIGS
}


# objective -> (attribute, class) of its discriminator head where it is not ELECTRA's per-token one; the names are
# the paper model's own (DeBERTa-v3's released discriminators: `mask_predictions.*`)
RTD_HEADS = {"deberta-v3": ("mask_predictions", ClsReplacedTokenDetectionHead)}
# objectives whose official code trains each network with its own optimizer, so clips each apart (DeBERTa-v3:
# `rtd_task.py:265,351`); every other (ELECTRA: one optimizer, `model/optimization.py:62`) clips the whole model
CLIPS_APART = frozenset({"deberta-v3"})


def _has(module: nn.Module, name: str) -> bool:
    try:
        module.get_parameter(name)
    except AttributeError:
        return False
    return True


class ComposedForPreTraining(MaskedLMPreTraining, ReplacedTokenDetectionPreTraining):
    """The composed pretraining model; one subclass per family below (each subclasses that family's
    `PreTrainedModel`, so weights are initialised as the family's)."""

    def __init__(self, config):
        if not isinstance(config, self.config_class):
            # e.g. the family's plain config from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = self.config_class(**config.to_dict())
        super().__init__(config)
        backbone_class, masked_lm_class = FAMILY_CLASSES[config.model_type]
        if config.sentence_task is not None and getattr(config, "type_vocab_size", 0) < 2:
            raise ValueError(f"a sentence task needs two token types; {config.model_type} has none")
        prefix = self.base_model_prefix
        setattr(self, prefix, backbone_class(config))  # with the family's pooler, if it has one
        word_table = next(name for name in WORD_TABLES if _has(self.base_model, name))
        self.rtd = config.replaced_token_detection
        if self.rtd:
            name, head = RTD_HEADS.get(config.objective, ("discriminator_predictions", DiscriminatorHead))
            self.add_module(name, head(config))
            self.discriminator_head = name  # where the step finds it (`replaced_token_detection_step`)
            self.generator = masked_lm_class(generator_config(config))
            self._tied_weights_keys = self._share_embeddings(config, masked_lm_class, prefix, word_table)
        else:
            masked_lm = masked_lm_class(config)
            for name, module in masked_lm.named_children():
                if name != prefix:
                    self.add_module(name, module)  # the family's MLM head, under its own name
            if hasattr(masked_lm, "legacy"):  # DeBERTa-v2's head layout, read by its output-embedding accessors
                self.legacy = masked_lm.legacy
            self._tied_weights_keys = dict(masked_lm_class._tied_weights_keys or {})
            if config.span_boundary_objective:
                self.sbo = SpanBoundaryHead(config, self.base_model.get_parameter(word_table).shape[1])
                self._tied_weights_keys["sbo.decoder.weight"] = f"{prefix}.{word_table}"
            if config.sentence_task is not None:
                if getattr(self.base_model, "pooler", None) is None:
                    self.sentence_pooler = nn.Linear(config.hidden_size, config.hidden_size)
                self.sentence_classifier = nn.Linear(config.hidden_size, 2)
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared tables
        self._freeze_unused()

    def _share_embeddings(self, config, masked_lm_class, prefix: str, word_table: str) -> dict[str, str]:
        """`_tied_weights_keys` of an RTD model: the generator's own ties, and the tables `embedding_sharing` shares
        (`"es"`: every table of equal shape, ELECTRA's; `"gdes"`: DeBERTa-v3 §3.3, `add_gdes`; `"nes"`: none)."""
        sharing, generator = config.embedding_sharing, self.generator.base_model
        same_shape = [
            name
            for name in WORD_TABLES + OTHER_TABLES
            if _has(self.base_model, name)
            and _has(generator, name)
            and self.base_model.get_parameter(name).shape == generator.get_parameter(name).shape
        ]
        if sharing in ("es", "gdes") and word_table not in same_shape:
            raise ValueError(
                f"embedding_sharing={sharing!r} needs word tables of one width: the generator's is "
                f"{tuple(generator.get_parameter(word_table).shape)}, the discriminator's "
                f"{tuple(self.base_model.get_parameter(word_table).shape)}; set embedding_sharing='nes' or "
                "generator_hidden_fraction=1.0"
            )
        shared = same_shape if sharing == "es" else []
        tied = {f"generator.{prefix}.{name}": f"{prefix}.{name}" for name in shared}
        for target, source in (masked_lm_class._tied_weights_keys or {}).items():
            inner = source.split(".", 1)[1] if source.startswith(f"{prefix}.") else None
            tied[f"generator.{target}"] = f"{prefix}.{inner}" if inner in shared else f"generator.{source}"
        if sharing == "gdes":  # the official shares the position table the same way
            add_gdes(self, word_table, share_positions=OTHER_TABLES[0] in same_shape)
        return tied

    def _freeze_unused(self) -> None:
        """Freeze what no loss trains (so DDP waits for no gradient): an unused pooler, and GDES's slots."""
        pooler = getattr(self.base_model, "pooler", None)
        if pooler is not None and (self.rtd or self.config.sentence_task is None):
            pooler.requires_grad_(False)
        freeze_gdes_slots(self)

    def get_output_embeddings(self):
        """The MLM decoder, found as the family's `*ForMaskedLM` finds it (its head modules are ours under the same
        names), so `resize_token_embeddings` resizes it with the word table; None for replaced-token detection (two
        networks: resize the exported `generator/` and `discriminator/`)."""
        if self.rtd:
            return None
        return FAMILY_CLASSES[self.config.model_type][1].get_output_embeddings(self)

    def set_output_embeddings(self, new_embeddings):
        FAMILY_CLASSES[self.config.model_type][1].set_output_embeddings(self, new_embeddings)

    def resize_token_embeddings(self, *args, **kwargs):
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        grow_bias(getattr(self, "sbo", None), embeddings.weight.shape[0])  # the SBO head's own output bias
        return embeddings

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_unused()  # loading makes new Parameters
        return loaded

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SpanBoundaryHead):
            init.zeros_(module.bias)
        if isinstance(module, GradientDisentangledEmbedding):
            init.zeros_(module.delta)

    # -- the step ------------------------------------------------------------------------------------------------
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        *,
        labels=None,
        next_sentence_label=None,
        sentence_order_label=None,
        sbo_labels=None,
        **inputs,
    ) -> BertologyForPreTrainingOutput:
        """The objective's step: `pretraining_step`'s (masked LM, the sentence task, SBO) or, with replaced-token
        detection, `replaced_token_detection_step`'s; every label the config may switch on is named here."""
        if self.rtd:
            return self.replaced_token_detection_step(input_ids, attention_mask, labels, **inputs)
        sentence_label = next_sentence_label if self.config.sentence_task == "nsp" else sentence_order_label
        return self.pretraining_step(
            input_ids, attention_mask, labels, sentence_label, sbo_labels=sbo_labels, **inputs
        )

    @property
    def sentence_key(self) -> str | None:
        task = self.config.sentence_task
        return None if task is None else next(key for key, name in SENTENCE_TASKS.items() if name == task)

    def encode(self, input_ids, inputs):
        inputs = dict(inputs)
        mask, types, positions = (
            inputs.pop(key, None) for key in ("attention_mask", "token_type_ids", "position_ids")
        )
        return self.base_model(input_ids, **self._backbone_inputs(mask, types, positions, inputs))

    def _backbone_inputs(self, attention_mask, token_type_ids, position_ids, kwargs: dict) -> dict:
        """The backbone's keyword inputs; a padding-free batch (`cu_seq_lens_q`) drops the mask and, on RoBERTa,
        starts its positions after the padding index; a padded one counts them on its mask."""
        packed = is_packed(self.config, kwargs)
        offset = first_position(self.base_model.embeddings)
        if packed and offset:
            position_ids = position_ids + offset
        elif offset and position_ids is None and attention_mask is not None:
            # RoBERTa numbers a padded row's positions from its ids, where an RTD sample can be the pad id: count the
            # mask instead (`create_position_ids_from_input_ids`'s values for any row without a pad id inside)
            position_ids = attention_mask.long().cumsum(-1) * attention_mask.long() + (offset - 1)
        inputs = {"attention_mask": None if packed else attention_mask, "position_ids": position_ids, **kwargs}
        if hasattr(self.config, "type_vocab_size"):  # ModernBERT has no token types
            inputs["token_type_ids"] = token_type_ids
        return inputs

    def predict(self, states):
        return MLM_HEADS[self.config.model_type](self, states)

    def sentence_logits(self, outputs, cu_seq_lens):
        states = outputs.last_hidden_state
        first = states[:, 0] if cu_seq_lens is None else states[0, cu_seq_lens[:-1].long()]  # each example's first
        return self.first_token_logits(first)

    def first_token_logits(self, first):
        # the family's pooler, or our `sentence_pooler` on a backbone without one
        return self.sentence_classifier(
            pool_first_tokens(self.base_model, first, getattr(self, "sentence_pooler", None))
        )

    def backbone_inputs(self, attention_mask, token_type_ids, position_ids, kwargs: dict) -> dict:
        return self._backbone_inputs(attention_mask, token_type_ids, position_ids, kwargs)

    def gradient_clipping_groups(self) -> list[list[nn.Parameter]] | None:
        """DeBERTa-v3's objective clips each network's gradient norm apart, as its decoupled training (one optimizer
        a network, `rtd_task.py:265,351`; `BertologyTrainer` reads this): the generator's, then the rest. Any other
        objective (ELECTRA: one optimizer, `model/optimization.py:62`) clips the whole model: None."""
        if not (self.rtd and self.config.objective in CLIPS_APART):
            return None
        generator = [p for p in self.generator.parameters() if p.requires_grad]
        in_generator = {id(p) for p in generator}
        return [generator, [p for p in self.parameters() if p.requires_grad and id(p) not in in_generator]]


def _composed_model(family_model: type) -> type:
    """`BertologyComposed<Family>ForPreTraining`: `ComposedForPreTraining` on the family's `PreTrainedModel` (its
    weights initialised as the family's), with the family's composed config."""
    config_class = COMPOSED_CONFIGS[family_model.config_class.model_type]
    name = config_class.__name__.replace("Config", "ForPreTraining")
    # the RTD generator's head: its family's (`masked_lm.MLM_HEADS`)
    generator_head = staticmethod(MLM_HEADS[config_class.model_type])
    namespace = {"config_class": config_class, "generator_head": generator_head, "__module__": __name__}
    namespace["__qualname__"] = name
    return type(name, (ComposedForPreTraining, family_model), namespace)


COMPOSED_MODELS = {
    cls.config_class.model_type: cls
    for cls in (_composed_model(backbone_class.__bases__[0]) for backbone_class, _ in FAMILY_CLASSES.values())
}
globals().update({cls.__name__: cls for cls in COMPOSED_MODELS.values()})  # where `auto_map` finds them
