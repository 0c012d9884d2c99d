"""XLNet's pretraining recipe as a `transformers.XLNetConfig` (Yang et al., 2019; zihangdai/xlnet).

`model_type` stays "xlnet", so plain `transformers` reads the saved `config.json`. The extra fields are the
objective's: partial prediction of about 1/K of the tokens (`mask_beta / mask_alpha`), chosen as spans of whole
words (`data_utils.py: _sample_mask`), a random factorisation order in blocks of `perm_size` (`_local_perm`), and
the example layout (`create_tfrecords`: a `reuse_len` prefix whose hidden states become the next segment's memory,
then `A <sep> B <sep> <cls>`). `mem_len`, `reuse_len` and `bi_data` are `XLNetConfig`'s own fields, which
`transformers.XLNetModel` already reads (`cache_mem`, `relative_positional_encoding`).
"""

from transformers import XLNetConfig


class BertologyXLNetConfig(XLNetConfig):
    r"""
    Args (in addition to [`~transformers.XLNetConfig`]'s; defaults are XLNet-base's and the official code's):
        num_predict (`int`, *optional*, defaults to 85):
            Cap on targets per sequence and the number of `target_mapping` rows (85 for 512 tokens, README).
            `None`: about `len / K` rows, from the batch.
        predictions_follow_length (`bool`, defaults to `True`):
            `num_predict` follows the run's `--max_seq_length`: `round(length / K)`, 85 at 512 as in the README
            (`Recipe.fit_to_length`); `False` once the cap was set explicitly, so a continued run keeps it.
        mask_alpha (`float`, defaults to 6), mask_beta (`float`, defaults to 1):
            A span of n words is predicted inside a context of `n * mask_alpha / mask_beta` words, so about
            `beta / alpha` = 1/6 of the tokens are targets (K = 6, §2.3 of the paper).
        max_span_length (`int`, defaults to 5):
            Spans have n = 1..max_span_length words with p(n) ∝ 1/n (`_sample_mask`, `max_gram`).
        perm_size (`int`, *optional*, defaults to 256):
            The factorisation order permutes positions inside blocks of `perm_size` tokens (`_local_perm`); blocks
            come in order. With `perm_size` = `reuse_len` = half the length (the README's 256 of 512) each half is
            one full random permutation. `None`: one block.
        input_format (`str`, defaults to `"xlnet_segments"`):
            How documents become examples (see `hf_bertology.data.INPUT_FORMATS`).
        intermediate_size (`int`, *optional*):
            Accepted as a synonym of `d_inner` (the recipes' size tables use BERT's names).

    `mem_len` (384, xlnet issue #59) and `reuse_len` (256) default to the official pretraining values; `mem_len=0`
    trains without memory. `transformers` keeps `r_w_bias`/`r_r_bias`/`r_s_bias` per layer, i.e. always `untie_r`.
    """

    def __init__(
        self,
        num_predict: int | None = 85,
        predictions_follow_length: bool = True,
        mask_alpha: float = 6,
        mask_beta: float = 1,
        max_span_length: int = 5,
        perm_size: int | None = 256,
        input_format: str = "xlnet_segments",
        **kwargs,
    ):
        # BERT's names (the recipes' size tables) -> XLNet's, before the base-size defaults are filled in
        # (an XLNet name given too, e.g. `--config_overrides n_head=8` on a preset's num_attention_heads, wins)
        for alias, name in (*self.attribute_map.items(), ("intermediate_size", "d_inner")):
            if alias in kwargs and alias != name:
                kwargs.setdefault(name, kwargs.pop(alias))
        for name, base_value in (("d_model", 768), ("n_layer", 12), ("n_head", 12), ("d_inner", 3072)):
            kwargs.setdefault(name, base_value)
        for name, official in (("mem_len", 384), ("reuse_len", 256)):
            kwargs.setdefault(name, official)
        if num_predict is not None and num_predict < 1:
            raise ValueError(f"num_predict must be >= 1 or None, got {num_predict}")
        if not 0 < mask_beta < mask_alpha:
            raise ValueError(f"need 0 < mask_beta < mask_alpha, got {mask_beta} and {mask_alpha}")
        if max_span_length < 1:
            raise ValueError(f"max_span_length must be >= 1, got {max_span_length}")
        if perm_size is not None and perm_size < 1:
            raise ValueError(f"perm_size must be >= 1 or None, got {perm_size}")
        if (kwargs.get("mem_len") or 0) < 0 or (kwargs.get("reuse_len") or 0) < 0:
            raise ValueError("mem_len and reuse_len must be >= 0")
        self.num_predict = num_predict
        self.predictions_follow_length = predictions_follow_length
        self.mask_alpha = mask_alpha
        self.mask_beta = mask_beta
        self.max_span_length = max_span_length
        self.perm_size = perm_size
        self.input_format = input_format
        super().__init__(**kwargs)
