"""What every recipe config shares: the masking fields' checks, and the joint `model_type` of two networks.

A run with two networks (ELECTRA, DeBERTa-v3, an RTD cell) writes a `model_type` of its own, which plain
`transformers` refuses: without `trust_remote_code` no Auto class or pipeline reads the joint folder as if it were
the discriminator; with it, `AutoModelForPreTraining` loads ours. In memory the type stays the family's.
"""

import inspect


def check_masking(fields: dict) -> None:
    """Refuse the masking fields among a recipe config's `fields` that are out of range (the collators' `from_config`
    read them). Every recipe config runs it, through `set_fields` (a composed one in `ComposedObjectiveConfig`)."""
    probability = fields.get("mlm_probability")
    if probability is not None and not 0.0 < probability < 1.0:
        raise ValueError(f"mlm_probability must be in (0, 1), got {probability}")
    mask, random = fields.get("mask_replace_prob", 0.0), fields.get("random_replace_prob", 0.0)
    if mask < 0 or random < 0 or mask + random > 1:
        raise ValueError(
            f"mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1, got {mask} and {random}"
        )
    cap = fields.get("max_predictions_per_seq")
    if cap is not None and cap < 1:
        raise ValueError(f"max_predictions_per_seq must be >= 1 or None, got {cap}")


def first_position(embeddings) -> int:
    """The first position id of a sequence for a family's embeddings module, read from its position table: RoBERTa's
    starts after the padding index (`RobertaEmbeddings`: `padding_idx + 1`), the others' at 0. A padding-free row
    passes its positions explicitly, so it must add this itself (`recipes.Backbone.first_position` says the same)."""
    padding_idx = getattr(getattr(embeddings, "position_embeddings", None), "padding_idx", None)
    return 0 if padding_idx is None else padding_idx + 1


def set_fields(config, init_locals: dict) -> None:
    """Set a recipe config's own fields, the arguments of its `__init__` (read from that `__init__`'s `locals()`,
    which hold nothing else at the call), after `check_masking`; `**kwargs` goes on to the family's config."""
    check_masking(init_locals)
    for name, value in init_locals.items():
        if name not in ("self", "kwargs", "__class__"):
            setattr(config, name, value)


class JointConfig:
    """Mixed in before a family's config: `config.json` says `joint_model_type` (`{}`: the family's type) wherever
    `writes_joint_type` is true, and reads back as the family's type."""

    joint_model_type: str

    @property
    def writes_joint_type(self) -> bool:
        return True

    @classmethod
    def get_config_dict(cls, *args, **kwargs):
        """The saved fields, the joint `model_type` read as this class's (no type-mismatch warning on load)."""
        config_dict, kwargs = super().get_config_dict(*args, **kwargs)
        if config_dict.get("model_type") == cls.joint_model_type.format(cls.model_type):
            config_dict["model_type"] = cls.model_type
        return config_dict, kwargs

    def to_diff_dict(self) -> dict:
        """What `save_pretrained` writes (every save: ours, the Trainer's checkpoints, a push)."""
        output = super().to_diff_dict()
        if self.writes_joint_type:
            output["model_type"] = self.joint_model_type.format(self.model_type)
        return output


def generator_config(config):
    """An RTD generator's plain config: the discriminator's (`config.discriminator_config()`) with the sizes and
    fields its objective's rule gives (`config.generator_sizes()`: ELECTRA's official `get_generator_config`,
    DeBERTa-v3's half depth, a composed cell's fractions of the width and depth)."""
    generator = config.discriminator_config()
    for name, value in config.generator_sizes().items():
        setattr(generator, name, value)
    return generator


def drop_recipe_fields(config, plain_class, recipe_class):
    """The architecture of `config` as a plain `plain_class` config: without `recipe_class`'s own fields (its
    `__init__`'s arguments: the objective's) and `auto_map`."""
    recipe_fields = inspect.signature(recipe_class.__init__).parameters
    fields = {k: v for k, v in config.to_dict().items() if k not in recipe_fields}
    for key in ("auto_map", "architectures", "model_type", "transformers_version"):
        fields.pop(key, None)
    return plain_class(**fields)
