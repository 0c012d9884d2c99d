"""ModernBERT's pretraining recipe as a `transformers.ModernBertConfig` (Warner et al., 2024; AnswerDotAI/ModernBERT).

`model_type` stays "modernbert", so plain `transformers` reads the saved `config.json`. The architecture defaults
are ModernBERT-base's (`ModernBertConfig`'s own: 22 layers, hidden 768, GLU FFN 1152, 12 heads, alternating
global/local attention every 3rd layer with a 128-token window, RoPE, pre-norm without biases, vocabulary 50,368).
The extra fields are the objective's: 30% masking drawn per token as the official sequence packer does
(`src/sequence_packer.py:mlm_masking`, pretraining_documentation branch; 80/10/10), no cap, and whole documents
packed into rows with attention and positions kept inside each document (`packed_documents`). The project's record
of every number and its official source: docs/recipes/modernbert.md.
"""

from transformers import ModernBertConfig

from .configuration_recipe import set_fields


class BertologyModernBertConfig(ModernBertConfig):
    r"""
    Args (in addition to [`~transformers.ModernBertConfig`]'s; defaults are ModernBERT-base's):
        mlm_probability (`float`, defaults to 0.3): share of tokens predicted (paper: 30%).
        max_predictions_per_seq (`int`, *optional*, defaults to `None`): no cap.
        mask_replace_prob (`float`, defaults to 0.8): share of chosen tokens replaced by [MASK].
        random_replace_prob (`float`, defaults to 0.1): share replaced by a random non-special token.
        whole_word_mask (`bool`, defaults to `False`).
        masking_draw (`str`, defaults to `"bernoulli"`): every token is chosen independently with probability
            `mlm_probability`, as the official packer (`src/sequence_packer.py`, `rand < mask_prob`); `"exact"`
            chooses `round(n * mlm_probability)` tokens per sequence (BERT).
        attention_output_dropout (`float`, *optional*, defaults to `None`): dropout on the attention output (after
            `Wo`), the official `attn_out_dropout_prob` (0.1 in `yamls/modernbert/*.yaml`). transformers'
            `attention_dropout` drops the attention probabilities *and* that output; the official run drops only
            the output (`attention_probs_dropout_prob: 0.0`), so the recipe keeps `attention_dropout=0.0` and sets
            this. `None`: transformers' behaviour (the output dropout follows `attention_dropout`).
        input_format (`str`, defaults to `"packed_documents"`): whole documents (`[CLS] doc [SEP]`, cut at the
            sequence length) packed into rows; attention and RoPE positions restart at every document
            (padding-free batches).
    """

    def __init__(
        self,
        mlm_probability: float = 0.3,
        max_predictions_per_seq: int | None = None,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        masking_draw: str = "bernoulli",
        attention_output_dropout: float | None = None,
        input_format: str = "packed_documents",
        **kwargs,
    ):
        if masking_draw not in ("bernoulli", "exact"):
            raise ValueError(f"masking_draw must be 'bernoulli' or 'exact', got {masking_draw!r}")
        if attention_output_dropout is not None and not 0.0 <= attention_output_dropout < 1.0:
            raise ValueError(f"attention_output_dropout must be in [0, 1), got {attention_output_dropout}")
        set_fields(self, locals())
        super().__init__(**kwargs)
