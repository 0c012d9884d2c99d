"""ELECTRA's pretraining recipe as a `transformers.ElectraConfig` (Clark et al., 2020; google-research/electra).

The architecture fields are the discriminator's, `model_type` "electra" kept in memory; the generator is derived from
them and `generator_hidden_fraction` (`generator_sizes`, the official `get_generator_config`). The other fields are
the objective's: the generator's masking (85% [MASK], 15% kept), loss weights, sampling, two-stage training. A joint
run's config.json says `bertology-electra-joint` (`configuration_recipe.JointConfig`). docs/recipes/electra.md.
"""

from transformers import ElectraConfig

from .configuration_recipe import JointConfig, drop_recipe_fields, generator_config, set_fields

# What config.json of a joint run says (`to_diff_dict`); `get_config_dict` reads it back as ElectraConfig's type.
JOINT_MODEL_TYPE = "bertology-electra-joint"


class BertologyElectraConfig(JointConfig, ElectraConfig):
    r"""
    Args (in addition to [`~transformers.ElectraConfig`]'s, which describe the discriminator; defaults are
    ELECTRA-Small's and the official `configure_pretraining.py`'s):
        generator_hidden_fraction (`float`, defaults to 0.25):
            Generator hidden size as a fraction of the discriminator's (official `generator_hidden_size`): 1/4 for
            small and large, 1/3 for base; 1.0 for a same-size generator (Small++, two-stage training).
        mlm_probability (`float`, defaults to 0.15):
            Share of the tokens the generator predicts (`mask_prob`; 0.25 for large).
        max_predictions_per_seq (`int`, *optional*, defaults to 19):
            Cap on predictions per sequence, `int((mask_prob + 0.005) * max_seq_length)` officially (19 at 128, 79 at
            512, 130 at 512 with 0.25). `None` means no cap.
        predictions_follow_length (`bool`, defaults to `True`):
            `max_predictions_per_seq` follows the run's `--max_seq_length`: `int((mask_prob + 0.005) * length)`, as
            configure_pretraining.py (`Recipe.fit_to_length`); `False` once the cap was set explicitly, so a continued
            run keeps it.
        mask_replace_prob (`float`, defaults to 0.85):
            Share of the chosen positions the generator sees as `[MASK]` (pretrain_helpers.mask); the rest keep
            their token.
        random_replace_prob (`float`, defaults to 0.0):
            ELECTRA's masking draws no random tokens.
        whole_word_mask (`bool`, defaults to `False`).
        generator_weight (`float`, defaults to 1.0):
            Weight of the generator's MLM loss (`gen_weight`).
        discriminator_weight (`float`, defaults to 50.0):
            Weight λ of the replaced-token-detection loss (`disc_weight`).
        sampling_temperature (`float`, defaults to 1.0):
            Sampling temperature of the generator's softmax.
        disallow_correct (`bool`, defaults to `False`):
            Never sample the original token (official option, off in the released recipe).
        two_stage_generator_steps (`int`, *optional*):
            Two-stage training (paper §3.2): train the generator alone for this many optimizer steps, then
            initialise the discriminator from it and train the discriminator with the generator frozen. Needs
            `generator_hidden_fraction=1.0`. `None` (default): joint training.
        rtd_loss_positions (`str`, defaults to `"all"`):
            The tokens the discriminator's loss reads: every real token (ELECTRA), or `"masked"`, the chosen ones
            only ("ELECTRA 15%", §3.2 Table 5; `replaced_token_detection.MaskedTokenDetection`). Kept in
            config.json only where it is not `"all"`, so the checkpoints written before it read and write the same.
        input_format (`str`, defaults to `"electra_segments"`):
            Sentences of one document packed up to the maximum length, as one segment (10%) or two (no NSP), with
            5% random-length examples (build_pretraining_dataset.py; `hf_bertology.data.segments`).
    """

    _auto_class = "AutoConfig"  # auto_map names this class: only remote code knows the joint model_type
    joint_model_type = JOINT_MODEL_TYPE
    rtd_loss_positions = "all"  # (an instance holds it only where it is not the default)

    def __init__(
        self,
        generator_hidden_fraction: float = 0.25,
        mlm_probability: float = 0.15,
        max_predictions_per_seq: int | None = 19,
        predictions_follow_length: bool = True,
        mask_replace_prob: float = 0.85,
        random_replace_prob: float = 0.0,
        whole_word_mask: bool = False,
        generator_weight: float = 1.0,
        discriminator_weight: float = 50.0,
        sampling_temperature: float = 1.0,
        disallow_correct: bool = False,
        two_stage_generator_steps: int | None = None,
        rtd_loss_positions: str = "all",
        input_format: str = "electra_segments",
        **kwargs,
    ):
        kwargs.pop("model_type", None)  # a saved one (the joint type) must not hide the class's "electra"
        if rtd_loss_positions not in ("all", "masked"):
            raise ValueError(f"rtd_loss_positions must be 'all' or 'masked', got {rtd_loss_positions!r}")
        if not 0.0 < generator_hidden_fraction <= 1.0:
            raise ValueError(f"generator_hidden_fraction must be in (0, 1], got {generator_hidden_fraction}")
        if generator_weight < 0 or discriminator_weight < 0:
            raise ValueError("generator_weight and discriminator_weight must be >= 0")
        if sampling_temperature <= 0:
            raise ValueError(f"sampling_temperature must be > 0, got {sampling_temperature}")
        if two_stage_generator_steps is not None:
            if two_stage_generator_steps < 0:
                raise ValueError(f"two_stage_generator_steps must be >= 0, got {two_stage_generator_steps}")
            if generator_hidden_fraction != 1.0:
                raise ValueError(
                    "two-stage training initialises the discriminator from the generator, so both must have the "
                    f"same size: set generator_hidden_fraction=1.0 (got {generator_hidden_fraction})"
                )
        set_fields(self, locals())
        super().__init__(**kwargs)
        if rtd_loss_positions == "all":  # absent at its default (the class's): config.json as before it existed
            del self.rtd_loss_positions
        if (
            two_stage_generator_steps is not None
            and generator_config(self).to_dict() != self.discriminator_config().to_dict()
        ):
            raise ValueError(
                "two-stage training initialises the discriminator from the generator, whose FFN is 4 x hidden and "
                f"whose heads are max(1, hidden // 64): set intermediate_size={4 * self.hidden_size} and "
                f"num_attention_heads={max(1, self.hidden_size // 64)} (got {self.intermediate_size} and "
                f"{self.num_attention_heads})"
            )

    def discriminator_config(self) -> ElectraConfig:
        """The discriminator's architecture as a plain `ElectraConfig` (no recipe fields, no `auto_map`)."""
        return drop_recipe_fields(self, ElectraConfig, BertologyElectraConfig)

    def generator_sizes(self) -> dict:
        """The generator's sizes from the discriminator's (official `get_generator_config`): `generator_hidden_fraction`
        of the width, FFN 4H, heads of 64; `configuration_recipe.generator_config` applies them."""
        hidden_size = int(round(self.hidden_size * self.generator_hidden_fraction))
        return {
            "hidden_size": hidden_size,
            "intermediate_size": 4 * hidden_size,
            "num_attention_heads": max(1, hidden_size // 64),
        }
