"""ModernBERT's pretraining recipe as a `transformers.ModernBertConfig` (Warner et al., 2024; AnswerDotAI/ModernBERT).

`model_type` stays "modernbert", so plain `transformers` reads the saved `config.json`. The architecture defaults
are ModernBERT-base's (`ModernBertConfig`'s own: 22 layers, hidden 768, GLU FFN 1152, 12 heads, alternating
global/local attention every 3rd layer with a 128-token window, RoPE, pre-norm without biases, vocabulary 50,368).
The extra fields are the objective's: 30% masking (paper §2.2; 80/10/10 as transformers' collator, which the
official FlexBERT data pipeline uses), no cap, sequence packing without padding (`token_stream`: full blocks cut from one token stream).
"""

from transformers import ModernBertConfig


class BertologyModernBertConfig(ModernBertConfig):
    r"""
    Args (in addition to [`~transformers.ModernBertConfig`]'s; defaults are ModernBERT-base's):
        mlm_probability (`float`, defaults to 0.3): share of tokens predicted per sequence (paper: 30%).
        max_predictions_per_seq (`int`, *optional*, defaults to `None`): no cap.
        mask_replace_prob (`float`, defaults to 0.8): share of chosen tokens replaced by [MASK].
        random_replace_prob (`float`, defaults to 0.1): share replaced by a random non-special token.
        whole_word_mask (`bool`, defaults to `False`).
        input_format (`str`, defaults to `"token_stream"`): the corpus as one token stream cut into full blocks, so
            batches carry no padding, as the paper's sequence packing.
    """

    def __init__(
        self,
        mlm_probability: float = 0.3,
        max_predictions_per_seq: int | None = None,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        input_format: str = "token_stream",
        **kwargs,
    ):
        if not 0.0 < mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise ValueError(
                "mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1, "
                f"got {mask_replace_prob} and {random_replace_prob}"
            )
        if max_predictions_per_seq is not None and max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1 or None, got {max_predictions_per_seq}")
        self.mlm_probability = mlm_probability
        self.max_predictions_per_seq = max_predictions_per_seq
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.whole_word_mask = whole_word_mask
        self.input_format = input_format
        super().__init__(**kwargs)
