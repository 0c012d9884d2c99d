"""DeBERTa-v3's pretraining recipe as a `transformers.DebertaV2Config` (He et al., 2021; microsoft/DeBERTa).

The architecture fields are the **discriminator's**, with `DebertaV2Config`'s `model_type` ("deberta-v2") kept, so
plain `transformers` builds the discriminator (`DebertaV2Model`) from the saved `config.json`. Defaults are
DeBERTa-v3-base's, from the official `experiments/language_model/rtd_base.json`: relative attention with 256 log
buckets (`position_buckets`), `norm_rel_ebd="layer_norm"`, `share_att_key`, `pos_att_type="p2c|c2p"`, no absolute
positions in the input (`position_biased_input=False`), no token types, LayerNorm ε 1e-7, a 128,100-entry vocabulary.

The generator is derived, as in the official `rtd_*.json` files: the discriminator's fields with **half its depth**
(`generator_num_hidden_layers`, default `num_hidden_layers // 2`) and the same width. `generator_config(config)`
returns it as a plain `DebertaV2Config` with `legacy=False`, so `DebertaV2ForMaskedLM` names its head
`lm_predictions.lm_head.*` as the released `pytorch_model.generator.bin` files do.

`embedding_sharing` (official `embedding_sharing` key): "gdes" (default), "es" or "nes"; see the modeling file.
Every number, with the official file it comes from: `docs/recipes/deberta_v3.md`.

A joint run's `config.json` says `model_type: "bertology-deberta-v3-joint"` (`JOINT_MODEL_TYPE`), which plain
`transformers` does not know, with this class under `auto_map["AutoConfig"]`: without `trust_remote_code` every Auto
class and pipeline refuses the folder; with it, only `AutoModelForPreTraining` (our joint class) loads it. The
vanilla networks are the run's `discriminator/` and `generator/` folders. In memory the type stays "deberta-v2"; a
checkpoint written with `model_type: "deberta-v2"` loads into our classes as it did (configuration_electra.py).
"""

from transformers import DebertaV2Config

# What config.json of a joint run says (`to_diff_dict`); `get_config_dict` reads it back as DebertaV2Config's type.
JOINT_MODEL_TYPE = "bertology-deberta-v3-joint"

# Fields that describe the objective, not the network: dropped from the exported vanilla configs.
RECIPE_FIELDS = (
    "embedding_sharing",
    "generator_num_hidden_layers",
    "mlm_probability",
    "max_predictions_per_seq",
    "mask_replace_prob",
    "random_replace_prob",
    "whole_word_mask",
    "generator_weight",
    "discriminator_weight",
    "sampling_temperature",
    "mask_positions",
    "input_format",
)
EMBEDDING_SHARING = ("gdes", "es", "nes")
MASK_POSITIONS = ("window", "uniform")

# rtd_{xsmall,small,base,large}.json (microsoft/DeBERTa experiments/language_model): the v3 architecture.
DEBERTA_V3_ARCHITECTURE = {
    "vocab_size": 128100,
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "relative_attention": True,
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "pos_att_type": "p2c|c2p",
    "layer_norm_eps": 1e-7,
    "max_relative_positions": -1,
    "position_biased_input": False,
    "type_vocab_size": 0,
    "num_hidden_layers": 12,
    "hidden_size": 768,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
}


class BertologyDebertaV3Config(DebertaV2Config):
    r"""
    Args (in addition to [`~transformers.DebertaV2Config`]'s, which describe the discriminator; defaults are
    DeBERTa-v3-base's and the official RTD task's):
        embedding_sharing (`str`, defaults to `"gdes"`):
            How the discriminator's word embeddings relate to the generator's (paper §3): `"gdes"` (gradient-
            disentangled: E_D = sg(E_G) + Δ, Δ zero-initialised and trained by the RTD loss only), `"es"` (ELECTRA's:
            one shared table, trained by both losses) or `"nes"` (two independent tables).
        generator_num_hidden_layers (`int`, *optional*):
            Generator depth; `None` means half the discriminator's (6 of 12 for xsmall and base, 3 of 6 for small,
            12 of 24 for large). Its width is the discriminator's, so that the tables can be shared.
        mlm_probability (`float`, defaults to 0.15):
            Share of the tokens the generator predicts (`NGramMaskGenerator(mask_lm_prob=0.15)`).
        max_predictions_per_seq (`int`, *optional*, defaults to 80):
            Cap on predictions per sequence: `ceil(max_seq_len * 0.15 / 10) * 10` officially (80 at 512).
        mask_replace_prob (`float`, defaults to 1.0):
            The RTD task's mask generator replaces every chosen token by [MASK] (`mask_prob=1, keep_prob=0`).
        random_replace_prob (`float`, defaults to 0.0).
        whole_word_mask (`bool`, defaults to `False`): the RTD task masks single tokens (`max_gram=1`).
        generator_weight (`float`, defaults to 1.0): weight of the generator's MLM loss.
        discriminator_weight (`float`, defaults to 10.0):
            λ of the RTD loss: the official training script's value (`rtd.sh` sets no `--rtd_lambda`, whose default
            is 10 in `DeBERTa/apps/tasks/rtd_task.py:392`). The paper (after ELECTRA) says 50.
        sampling_temperature (`float`, defaults to 1.0): temperature of the generator's softmax when sampling.
        mask_positions (`str`, defaults to `"window"`):
            How the positions are chosen. `"window"`: the official `NGramMaskGenerator.mask_tokens`
            (`DeBERTa/apps/tasks/mlm_task.py:57,78-96`): one uniform position in each window of `int(1 / 0.15) = 6`
            candidate tokens, windows taken left to right until the count is reached, so a full sequence's last
            windows are never masked (at 512: 77 masks fill the first 462 tokens). `"uniform"`: the count drawn
            uniformly over the sequence (BERT's way).
        input_format (`str`, defaults to `"token_stream"`):
            `prepare_data.py`: the concatenated corpus cut every `max_seq_length - 2` tokens, `[CLS] ... [SEP]`.
    """

    _auto_class = "AutoConfig"  # auto_map names this class: only remote code knows the joint model_type

    def __init__(
        self,
        embedding_sharing: str = "gdes",
        generator_num_hidden_layers: int | None = None,
        mlm_probability: float = 0.15,
        max_predictions_per_seq: int | None = 80,
        mask_replace_prob: float = 1.0,
        random_replace_prob: float = 0.0,
        whole_word_mask: bool = False,
        generator_weight: float = 1.0,
        discriminator_weight: float = 10.0,
        sampling_temperature: float = 1.0,
        mask_positions: str = "window",
        input_format: str = "token_stream",
        **kwargs,
    ):
        kwargs.pop("model_type", None)  # a saved one (the joint type) must not hide the class's "deberta-v2"
        embedding_sharing = embedding_sharing.lower()
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ValueError(
                f"embedding_sharing must be one of {', '.join(EMBEDDING_SHARING)}, got {embedding_sharing!r}"
            )
        # Copied from hf_bertology.models.configuration_bert.BertologyBertConfig.__init__[masking_checks]
        if not 0.0 < mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise ValueError(
                "mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1, "
                f"got {mask_replace_prob} and {random_replace_prob}"
            )
        if max_predictions_per_seq is not None and max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1 or None, got {max_predictions_per_seq}")
        # End copied block
        if generator_num_hidden_layers is not None and generator_num_hidden_layers < 1:
            raise ValueError(f"generator_num_hidden_layers must be >= 1 or None, got {generator_num_hidden_layers}")
        if generator_weight < 0 or discriminator_weight < 0:
            raise ValueError("generator_weight and discriminator_weight must be >= 0")
        if sampling_temperature <= 0:
            raise ValueError(f"sampling_temperature must be > 0, got {sampling_temperature}")
        if mask_positions not in MASK_POSITIONS:
            raise ValueError(f"mask_positions must be one of {', '.join(MASK_POSITIONS)}, got {mask_positions!r}")
        for key, value in DEBERTA_V3_ARCHITECTURE.items():
            kwargs.setdefault(key, value)
        self.embedding_sharing = embedding_sharing
        self.generator_num_hidden_layers = generator_num_hidden_layers
        self.mlm_probability = mlm_probability
        self.max_predictions_per_seq = max_predictions_per_seq
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.whole_word_mask = whole_word_mask
        self.generator_weight = generator_weight
        self.discriminator_weight = discriminator_weight
        self.sampling_temperature = sampling_temperature
        self.mask_positions = mask_positions
        self.input_format = input_format
        super().__init__(**kwargs)

    # Copied from hf_bertology.models.configuration_electra.BertologyElectraConfig.get_config_dict
    @classmethod
    def get_config_dict(cls, *args, **kwargs):
        """The saved fields, the joint `model_type` read as this class's (no type-mismatch warning on load)."""
        config_dict, kwargs = super().get_config_dict(*args, **kwargs)
        if config_dict.get("model_type") == JOINT_MODEL_TYPE:
            config_dict["model_type"] = cls.model_type
        return config_dict, kwargs

    # Copied from hf_bertology.models.configuration_electra.BertologyElectraConfig.to_diff_dict
    def to_diff_dict(self) -> dict:
        """What `save_pretrained` writes (every save: ours, the Trainer's checkpoints, a push), with the joint
        `model_type` (`JOINT_MODEL_TYPE`) that plain transformers refuses."""
        output = super().to_diff_dict()
        output["model_type"] = JOINT_MODEL_TYPE
        return output


def discriminator_config(config: DebertaV2Config) -> DebertaV2Config:
    """The discriminator's architecture as a plain `DebertaV2Config` (no recipe fields, no `auto_map`)."""
    fields = {k: v for k, v in config.to_dict().items() if k not in RECIPE_FIELDS}
    for key in ("auto_map", "architectures", "model_type", "transformers_version"):
        fields.pop(key, None)
    return DebertaV2Config(**fields)


def generator_config(config: DebertaV2Config) -> DebertaV2Config:
    """The generator's architecture: the discriminator's at half depth (official `rtd_*.json`), `legacy=False`.

    Works on any `DebertaV2Config` (a checkpoint loaded through remote code keeps the recipe fields as attributes).
    """
    generator = discriminator_config(config)
    depth = getattr(config, "generator_num_hidden_layers", None)
    generator.num_hidden_layers = depth if depth is not None else max(1, config.num_hidden_layers // 2)
    generator.legacy = False  # `lm_predictions.lm_head.*`, the official MaskedLanguageModel's names
    return generator
