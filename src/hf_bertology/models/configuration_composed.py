"""One paper's objective on another paper's encoder: the config of a composed pretraining model.

A composed config is the backbone family's own `transformers` config (its `model_type` kept, so plain `transformers`
reads the saved `config.json`) plus the objective's parts:

- **masking** (token, whole-word, SpanBERT spans, ALBERT n-grams, all-[MASK]): the objective's collator fields
  (`mlm_probability`, `masking_scheme`, `geometric_p`, ...), carried as they are in the objective's own config;
- **a sentence task** (`sentence_task`: `"nsp"`, `"sop"` or `None`) read from each example's first token;
- **the span boundary objective** (`span_boundary_objective`), SpanBERT's head on the span boundaries;
- **replaced-token detection** (`replaced_token_detection`): a generator of the same family, sized by
  `generator_hidden_fraction` (ELECTRA: 1/4 width) and `generator_layers_fraction` (DeBERTa-v3: half depth), and
  the discriminator's embedding sharing (`embedding_sharing`: `"es"` ELECTRA's shared table, `"gdes"` DeBERTa-v3's
  gradient-disentangled sharing, `"nes"` none).

`objective` names the paper whose parts these are (a key of `hf_bertology.recipes.VARIANTS`). `recipes.get_recipe(
"electra-small", backbone="roberta")` fills every field; the classes below only validate them. One class per family
so that each subclasses that family's config.

With replaced-token detection (two networks), `config.json` says `model_type: "bertology-rtd-<family>-joint"`
(`JOINT_MODEL_TYPE`), which plain `transformers` does not know, and names the config class under
`auto_map["AutoConfig"]`: without `trust_remote_code` every Auto class and pipeline refuses the folder instead of
reading the discriminator; with it, only `AutoModelForPreTraining` (ours) loads it. The run's `discriminator/` and
`generator/` folders hold the vanilla networks. In memory, and for every other objective on disk too, the type is the
family's (configuration_electra.py says more).
"""

from transformers import AlbertConfig, BertConfig, DebertaV2Config, ElectraConfig, ModernBertConfig, RobertaConfig

# config.json's `model_type` of an RTD objective on family `{}` (`to_diff_dict`); read back as the family's.
JOINT_MODEL_TYPE = "bertology-rtd-{}-joint"
SENTENCE_TASKS = (None, "nsp", "sop")
EMBEDDING_SHARING = ("gdes", "es", "nes")


class ComposedObjectiveConfig:
    r"""
    Args (in addition to the backbone family's config):
        objective (`str`): the paper whose objective this is (`"electra"`, `"spanbert"`, ...).
        sentence_task (`str`, *optional*): `"nsp"` (labels `next_sentence_label`), `"sop"` (`sentence_order_label`)
            or `None`; a two-way classifier on each example's first token (BERT's pooler + classifier).
        span_boundary_objective (`bool`): SpanBERT's SBO head (`sbo_loss_weight`, `sbo_max_targets`,
            `sbo_position_embedding_size` as in SpanBERT; without SBO they are absent and the span collator makes no
            SBO targets).
        replaced_token_detection (`bool`): train a generator and a discriminator (ELECTRA, DeBERTa-v3).
        embedding_sharing (`str`): `"es"`, `"gdes"` or `"nes"` (RTD only).
        generator_hidden_fraction (`float`), generator_layers_fraction (`float`): the generator's width and depth as
            fractions of the discriminator's (ELECTRA 1/4 and 1; DeBERTa-v3 1 and 1/2).
        generator_weight, discriminator_weight (`float`): `loss = generator_weight * mlm + discriminator_weight * rtd`.
        sampling_temperature (`float`), disallow_correct (`bool`): ELECTRA's sampling options.
    Every other objective field (masking, input format, caps) is kept as an attribute for the collator.
    """

    def __init__(
        self,
        objective: str = "roberta",
        sentence_task: str | None = None,
        span_boundary_objective: bool = False,
        replaced_token_detection: bool = False,
        embedding_sharing: str = "es",
        generator_hidden_fraction: float = 1.0,
        generator_layers_fraction: float = 1.0,
        generator_weight: float = 1.0,
        discriminator_weight: float = 50.0,
        sampling_temperature: float = 1.0,
        disallow_correct: bool = False,
        input_format: str = "full_sentences",
        **kwargs,
    ):
        kwargs.pop("model_type", None)  # a saved one (the joint type) must not hide the family's
        if sentence_task not in SENTENCE_TASKS:
            raise ValueError(f"sentence_task must be one of {SENTENCE_TASKS}, got {sentence_task!r}")
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ValueError(f"embedding_sharing must be one of {EMBEDDING_SHARING}, got {embedding_sharing!r}")
        if not (0 < generator_hidden_fraction <= 1 and 0 < generator_layers_fraction <= 1):
            raise ValueError("generator_hidden_fraction and generator_layers_fraction must be in (0, 1]")
        if replaced_token_detection and sentence_task is not None:
            raise ValueError("replaced-token detection with a sentence task is not supported; set sentence_task=None")
        if span_boundary_objective:  # SpanBERT's head settings; absent otherwise, so the span collator makes no SBO
            for name, default in (
                ("sbo_loss_weight", 1.0),
                ("sbo_max_targets", 15),
                ("sbo_position_embedding_size", 200),
            ):
                kwargs.setdefault(name, default)
        self.objective = objective
        self.sentence_task = sentence_task
        self.span_boundary_objective = span_boundary_objective
        self.replaced_token_detection = replaced_token_detection
        self.embedding_sharing = embedding_sharing
        self.generator_hidden_fraction = generator_hidden_fraction
        self.generator_layers_fraction = generator_layers_fraction
        self.generator_weight = generator_weight
        self.discriminator_weight = discriminator_weight
        self.sampling_temperature = sampling_temperature
        self.disallow_correct = disallow_correct
        self.input_format = input_format
        super().__init__(**kwargs)
        if replaced_token_detection:  # auto_map names the config class: only remote code knows the joint type
            self._auto_class = "AutoConfig"

    @classmethod
    def get_config_dict(cls, *args, **kwargs):
        """The saved fields, the joint `model_type` read as the family's (no type-mismatch warning on load)."""
        config_dict, kwargs = super().get_config_dict(*args, **kwargs)
        if config_dict.get("model_type") == JOINT_MODEL_TYPE.format(cls.model_type):
            config_dict["model_type"] = cls.model_type
        return config_dict, kwargs

    def to_diff_dict(self) -> dict:
        """What `save_pretrained` writes; with replaced-token detection, the joint `model_type` that plain
        transformers refuses."""
        output = super().to_diff_dict()
        if self.replaced_token_detection:
            output["model_type"] = JOINT_MODEL_TYPE.format(self.model_type)
        return output


class BertologyComposedBertConfig(ComposedObjectiveConfig, BertConfig):
    """An objective on `BertModel` (`model_type` "bert")."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


class BertologyComposedRobertaConfig(ComposedObjectiveConfig, RobertaConfig):
    """An objective on `RobertaModel` (`model_type` "roberta")."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


class BertologyComposedAlbertConfig(ComposedObjectiveConfig, AlbertConfig):
    """An objective on `AlbertModel` (`model_type` "albert")."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


class BertologyComposedElectraConfig(ComposedObjectiveConfig, ElectraConfig):
    """An objective on `ElectraModel` (`model_type` "electra")."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


class BertologyComposedDebertaV2Config(ComposedObjectiveConfig, DebertaV2Config):
    """An objective on `DebertaV2Model` (`model_type` "deberta-v2"; DeBERTa-v3's architecture)."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


class BertologyComposedModernBertConfig(ComposedObjectiveConfig, ModernBertConfig):
    """An objective on `ModernBertModel` (`model_type` "modernbert"; no token types, so no sentence task)."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        super().__init__(**kwargs)


COMPOSED_CONFIGS = {
    cls.model_type: cls
    for cls in (
        BertologyComposedBertConfig,
        BertologyComposedRobertaConfig,
        BertologyComposedAlbertConfig,
        BertologyComposedElectraConfig,
        BertologyComposedDebertaV2Config,
        BertologyComposedModernBertConfig,
    )
}
