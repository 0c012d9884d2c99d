"""DeBERTa-v3's pretraining recipe as a `transformers.DebertaV2Config` (He et al., 2021; microsoft/DeBERTa).

The architecture fields are the discriminator's (DeBERTa-v3-base's defaults, `rtd_base.json`), `model_type`
"deberta-v2" kept in memory; the generator is derived at half the depth (`generator_sizes`, as the official
`rtd_*.json`). The other fields are the objective's: masking, loss weights, `embedding_sharing`. A joint run's
config.json says `bertology-deberta-v3-joint` (`configuration_recipe.JointConfig`). Every number and its source:
docs/recipes/deberta_v3.md.
"""

from transformers import DebertaV2Config

from .configuration_recipe import JointConfig, drop_recipe_fields, set_fields

# What config.json of a joint run says (`to_diff_dict`); `get_config_dict` reads it back as DebertaV2Config's type.
JOINT_MODEL_TYPE = "bertology-deberta-v3-joint"

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


class BertologyDebertaV3Config(JointConfig, DebertaV2Config):
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
    joint_model_type = JOINT_MODEL_TYPE

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
        if generator_num_hidden_layers is not None and generator_num_hidden_layers < 1:
            raise ValueError(f"generator_num_hidden_layers must be >= 1 or None, got {generator_num_hidden_layers}")
        if generator_weight < 0 or discriminator_weight < 0:
            raise ValueError("generator_weight and discriminator_weight must be >= 0")
        if sampling_temperature <= 0:
            raise ValueError(f"sampling_temperature must be > 0, got {sampling_temperature}")
        if mask_positions not in MASK_POSITIONS:
            raise ValueError(f"mask_positions must be one of {', '.join(MASK_POSITIONS)}, got {mask_positions!r}")
        kwargs = {**DEBERTA_V3_ARCHITECTURE, **kwargs}
        set_fields(self, locals())
        super().__init__(**kwargs)

    def discriminator_config(self) -> DebertaV2Config:
        """The discriminator's architecture as a plain `DebertaV2Config` (no recipe fields, no `auto_map`)."""
        return drop_recipe_fields(self, DebertaV2Config, BertologyDebertaV3Config)

    def generator_sizes(self) -> dict:
        """The generator's: the discriminator's at half depth (official `rtd_*.json`), `legacy=False`
        (`lm_predictions.lm_head.*`, the official MaskedLanguageModel's names)."""
        depth = self.generator_num_hidden_layers
        return {
            "num_hidden_layers": depth if depth is not None else max(1, self.num_hidden_layers // 2),
            "legacy": False,
        }
