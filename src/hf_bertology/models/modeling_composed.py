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
from .configuration_recipe import generator_config
from .masked_lm import MLM_HEADS, MaskedLM
from .outputs import BertologyForPreTrainingOutput
from .replaced_token_detection import (
    OTHER_TABLES,
    WORD_TABLES,
    ClsReplacedTokenDetectionHead,
    DiscriminatorHead,
    Generator,
    GradientDisentangledEmbedding,
    ReplacedTokenDetection,
    add_gdes,
    clipping_groups,
    discriminate,
    freeze_gdes_slots,
    gdes_pairs,
    rtd_objective,
)
from .sentence_task import SENTENCE_TASKS, SentenceTask
from .span_boundary import SpanBoundary, SpanBoundaryHead, grow_bias
from .step import PreTrainingModel, pretraining_step

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


class ComposedForPreTraining(PreTrainingModel):
    """The composed pretraining model; one subclass per family below (each subclasses that family's
    `PreTrainedModel`, so weights are initialised as the family's). Its objectives are its config's
    (`ComposedObjectiveConfig.objectives`), each adding its heads under the paper model's names."""

    def __init__(self, config):
        if not isinstance(config, self.config_class):
            # e.g. the family's plain config from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = self.config_class(**config.to_dict())
        super().__init__(config)
        backbone_class, masked_lm_class = FAMILY_CLASSES[config.model_type]
        if config.sentence_task is not None and getattr(config, "type_vocab_size", 0) < 2:
            raise ValueError(f"a sentence task needs two token types; {config.model_type} has none")
        setattr(self, self.base_model_prefix, backbone_class(config))  # with the family's pooler, if it has one
        word_table = next(name for name in WORD_TABLES if _has(self.base_model, name))
        objectives = []
        for name in config.objectives:  # in the order their heads were added when the checkpoints were written
            objectives.append(getattr(self, f"_add_{name}")(config, masked_lm_class, word_table))
        self.objectives = tuple(objectives)
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared tables
        self._freeze_unused()

    def _add_masked_lm(self, config, masked_lm_class, word_table: str) -> MaskedLM:
        """The family's MLM head modules, under their own names (plain `AutoModelForMaskedLM` gives our logits)."""
        masked_lm = masked_lm_class(config)
        for name, module in masked_lm.named_children():
            if name != self.base_model_prefix:
                self.add_module(name, module)
        if hasattr(masked_lm, "legacy"):  # DeBERTa-v2's head layout, read by its output-embedding accessors
            self.legacy = masked_lm.legacy
        self._tied_weights_keys = dict(masked_lm_class._tied_weights_keys or {})
        return MaskedLM()

    def _add_span_boundary(self, config, masked_lm_class, word_table: str) -> SpanBoundary:
        self.sbo = SpanBoundaryHead(config, self.base_model.get_parameter(word_table).shape[1])
        self._tied_weights_keys["sbo.decoder.weight"] = f"{self.base_model_prefix}.{word_table}"
        return SpanBoundary(weight=config.sbo_loss_weight)

    def _add_sentence_task(self, config, masked_lm_class, word_table: str) -> SentenceTask:
        if getattr(self.base_model, "pooler", None) is None:
            self.sentence_pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.sentence_classifier = nn.Linear(config.hidden_size, 2)
        key = next(key for key, task in SENTENCE_TASKS.items() if task == config.sentence_task)
        return SentenceTask(key, "sentence_classifier")

    def _add_replaced_token_detection(self, config, masked_lm_class, word_table: str) -> ReplacedTokenDetection:
        """The discriminator's head: the objective's (DeBERTa-v3's reads [CLS]), under its paper model's name."""
        name, head = RTD_HEADS.get(config.objective, ("discriminator_predictions", DiscriminatorHead))
        self.add_module(name, head(config))
        return rtd_objective(config, name)

    def _add_generator(self, config, masked_lm_class, word_table: str) -> Generator:
        """A family `*ForMaskedLM` generator at `generator.*` and the tables `embedding_sharing` shares; beside a
        masked LM of the model's own (Replace MLM) its outputs are `generator_*`."""
        self.generator = masked_lm_class(generator_config(config))
        shared = self._share_embeddings(config, masked_lm_class, self.base_model_prefix, word_table)
        self._tied_weights_keys = {**self.__dict__.get("_tied_weights_keys", {}), **shared}
        names = {"name": "generator", "logits_name": "generator_logits"} if "masked_lm" in config.objectives else {}
        return Generator(config, config.model_type, clips_apart=config.objective in CLIPS_APART, **names)

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
        if pooler is not None and not any(isinstance(o, SentenceTask) for o in self.objectives):
            pooler.requires_grad_(False)
        freeze_gdes_slots(self)

    def get_output_embeddings(self):
        """The MLM decoder, found as the family's `*ForMaskedLM` finds it (its head modules are ours under the same
        names), so `resize_token_embeddings` resizes it with the word table; None for replaced-token detection (two
        networks: resize the exported `generator/` and `discriminator/`)."""
        if hasattr(self, "generator"):
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
        """The objectives' step (`step.pretraining_step`); every label the config may switch on is named here."""
        labels = {"labels": labels, "sbo_labels": sbo_labels}
        labels.update(next_sentence_label=next_sentence_label, sentence_order_label=sentence_order_label)
        return pretraining_step(self, input_ids, attention_mask, labels, **inputs)

    def discriminate(self, input_ids, **inputs):
        return discriminate(self, input_ids, **inputs)  # under GDES, on sg(E_G) + Δ

    def encode(self, input_ids, inputs):
        return self.discriminate(input_ids, **inputs)

    def predict(self, states):
        return MLM_HEADS[self.config.model_type](self, states)

    def gdes_pairs(self) -> list[tuple[nn.Parameter, nn.Parameter, nn.Parameter]]:
        return gdes_pairs(self)

    def gradient_clipping_groups(self) -> list[list[nn.Parameter]] | None:
        """DeBERTa-v3's objective clips each network's gradient norm apart, as its decoupled training (one optimizer
        a network, `rtd_task.py:265,351`; `BertologyTrainer` reads this): the generator's, then the rest. Any other
        objective (ELECTRA: one optimizer, `model/optimization.py:62`) clips the whole model: None."""
        return clipping_groups(self)


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
