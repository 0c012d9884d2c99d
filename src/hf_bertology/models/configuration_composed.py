"""One paper's objective on another paper's encoder: the config of a composed pretraining model.

The backbone family's own `transformers` config (its `model_type` kept) plus the objective's parts: its masking
fields as the objective's own config carries them, a sentence task (`"nsp"`, `"sop"`), SpanBERT's span boundary
objective, or replaced-token detection with a same-family generator (`generator_hidden_fraction`,
`generator_layers_fraction`) and embedding sharing (`"es"`, `"gdes"`, `"nes"`). `recipes.get_recipe("electra-small",
backbone="roberta")` fills every field; the classes here only check them. With replaced-token detection, config.json
says the joint `model_type` (`configuration_recipe.JointConfig`). docs/recipes/composed.md.
"""

from transformers import AlbertConfig, BertConfig, DebertaV2Config, ElectraConfig, ModernBertConfig, RobertaConfig

from .configuration_recipe import JointConfig, check_masking

# config.json's `model_type` of an RTD objective on family `{}` (`to_diff_dict`); read back as the family's.
JOINT_MODEL_TYPE = "bertology-rtd-{}-joint"
SENTENCE_TASK_CHOICES = (None, "nsp", "sop")
# the objective fields that bring a generator (a second network, trained with the first): RTD's, Replace MLM's
GENERATOR_PARTS = ("replaced_token_detection", "replace_mlm")


def two_networks(fields) -> bool:
    """Whether an objective's fields (a config's, or a saved config.json's) bring a generator: the one answer to "is
    it a joint model" for a composed cell (`writes_joint_type`, the recipes' `networks`)."""
    return any(bool(fields.get(name)) for name in GENERATOR_PARTS)


EMBEDDING_SHARING = ("gdes", "es", "nes")


class ComposedObjectiveConfig(JointConfig):
    r"""
    Args (in addition to the backbone family's config):
        objective (`str`): the paper whose objective this is (`"electra"`, `"spanbert"`, ...).
        sentence_task (`str`, *optional*): `"nsp"` (labels `next_sentence_label`), `"sop"` (`sentence_order_label`)
            or `None`; a two-way classifier on each example's first token (BERT's pooler + classifier).
        span_boundary_objective (`bool`): SpanBERT's SBO head (`sbo_loss_weight`, `sbo_max_targets`,
            `sbo_position_embedding_size` as in SpanBERT; without SBO they are absent and the span collator makes no
            SBO targets).
        replaced_token_detection (`bool`): train a generator and a discriminator (ELECTRA, DeBERTa-v3).
        replace_mlm (`bool`): "Replace MLM" (ELECTRA §3.2, Table 5): masked LM whose chosen tokens are replaced by
            samples of a generator trained with it, instead of [MASK] (the generator's fields as RTD's). Kept in
            config.json only where true, so the checkpoints written before it read and write the same.
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
        if sentence_task not in SENTENCE_TASK_CHOICES:
            raise ValueError(f"sentence_task must be one of {SENTENCE_TASK_CHOICES}, got {sentence_task!r}")
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ValueError(f"embedding_sharing must be one of {EMBEDDING_SHARING}, got {embedding_sharing!r}")
        if not (0 < generator_hidden_fraction <= 1 and 0 < generator_layers_fraction <= 1):
            raise ValueError("generator_hidden_fraction and generator_layers_fraction must be in (0, 1]")
        if replaced_token_detection and kwargs.get("replace_mlm"):
            raise ValueError("replace_mlm trains masked LM, not replaced-token detection: set one of them")
        if replaced_token_detection and sentence_task is not None:
            raise ValueError("replaced-token detection with a sentence task is not supported; set sentence_task=None")
        if span_boundary_objective:  # SpanBERT's head settings; absent otherwise, so the span collator makes no SBO
            for name, default in (
                ("sbo_loss_weight", 1.0),
                ("sbo_max_targets", 15),
                ("sbo_position_embedding_size", 200),
            ):
                kwargs.setdefault(name, default)
        check_masking(kwargs)  # the objective's masking fields ride in kwargs
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
        if self.writes_joint_type:  # auto_map names the config class: only remote code knows the joint type
            self._auto_class = "AutoConfig"

    joint_model_type = JOINT_MODEL_TYPE
    replace_mlm = False  # (an instance holds it only where it is true)

    @property
    def objectives(self) -> tuple[str, ...]:
        """The objectives the model is built from (`modeling_composed`), in the order their heads are added."""
        if self.replaced_token_detection:  # the discriminator's head first: the order checkpoints were written in
            return ("replaced_token_detection", "generator")
        parts = ("span_boundary",) * self.span_boundary_objective + ("sentence_task",) * (
            self.sentence_task is not None
        )
        return ("masked_lm", *parts, *("generator",) * self.replace_mlm)  # Replace MLM: a generator's samples in

    @property
    def writes_joint_type(self) -> bool:  # two networks only with a generator
        return two_networks(self.__dict__)

    def discriminator_config(self):
        """The family's own config with every field of this one (the recipe's stay as attributes)."""
        return type(self).__bases__[-1](**self.to_dict())

    def generator_sizes(self) -> dict:
        """The RTD generator's: `generator_hidden_fraction` of the width (heads of the same size, FFN scaled alike)
        and `generator_layers_fraction` of the depth; a factorised embedding (ALBERT, ELECTRA, DeBERTa
        `embedding_size`) keeps the discriminator's width so the tables can be shared."""
        head_size = self.hidden_size // self.num_attention_heads
        hidden_size = max(head_size, round(self.hidden_size * self.generator_hidden_fraction))
        sizes = {
            "hidden_size": hidden_size,
            "num_attention_heads": max(1, hidden_size // head_size),
            "intermediate_size": max(1, round(self.intermediate_size * self.generator_hidden_fraction)),
            "num_hidden_layers": max(1, round(self.num_hidden_layers * self.generator_layers_fraction)),
        }
        if isinstance(self, DebertaV2Config) and hidden_size != self.hidden_size:  # `embed_proj`
            sizes["embedding_size"] = getattr(self, "embedding_size", self.hidden_size)
        # tied at the top level (to the discriminator's table under "es"); the generator is one network
        return {**sizes, "tie_word_embeddings": False, "replaced_token_detection": False}


def _composed_config(family_config: type) -> type:
    """`BertologyComposed<Family>Config`: `ComposedObjectiveConfig` on the family's config, `model_type` kept."""

    def __init__(self, **kwargs):  # an own __init__: transformers would otherwise generate one past the mixin
        ComposedObjectiveConfig.__init__(self, **kwargs)

    name = f"BertologyComposed{family_config.__name__}"
    namespace = {"__init__": __init__, "__module__": __name__, "__qualname__": name}
    return type(name, (ComposedObjectiveConfig, family_config), namespace)


FAMILY_CONFIGS = (BertConfig, RobertaConfig, AlbertConfig, ElectraConfig, DebertaV2Config, ModernBertConfig)
COMPOSED_CONFIGS = {cls.model_type: cls for cls in map(_composed_config, FAMILY_CONFIGS)}
globals().update({cls.__name__: cls for cls in COMPOSED_CONFIGS.values()})  # where `auto_map` finds them
