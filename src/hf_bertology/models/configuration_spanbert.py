"""SpanBERT's pretraining recipe as a `transformers.BertConfig` (Joshi et al., 2020; facebookresearch/SpanBERT).

The architecture is BERT's and `model_type` stays "bert" (as the released SpanBERT checkpoints), so plain
`transformers` reads the saved `config.json`. The extra fields are the span masking and span boundary objective
(SBO) settings of the official README command (`pretraining/README.md`), not the task's defaults, which differ
(geometric p 0.3, word-piece replacement, 20 pair targets, pair loss weight 0).
`DataCollatorForSpanMasking.from_config(config, tokenizer)` rebuilds the collator.
"""

from transformers import BertConfig

from .configuration_recipe import set_fields


class BertologySpanBertConfig(BertConfig):
    r"""
    Args (in addition to [`~transformers.BertConfig`]'s; defaults are the official README command's):
        mlm_probability (`float`, defaults to 0.15):
            Share of the maskable tokens masked per block (`mask_num = ceil(len * 0.15)`).
        masking_scheme (`str`, defaults to `"spanbert"`):
            Span placement of `DataCollatorForSpanMasking` (`"spanbert"`: anchors over tokens, overlapping spans
            merge, the budget may cut the last span).
        span_distribution (`str`, defaults to `"geometric"`):
            Span lengths in words: `"geometric"` (`--geometric-p`) or `"ngram"` (p ∝ 1/n).
        geometric_p (`float`, defaults to 0.2):
            `--geometric-p`: p(l) ∝ p (1-p)^(l-1), truncated to `span_lower..span_upper` (mean 3.797 words).
        span_lower (`int`, defaults to 1), span_upper (`int`, defaults to 10):
            `--span-lower`, `--span-upper`, in whole words.
        replacement_level (`str`, defaults to `"span"`):
            `--replacement-method span`: 80/10/10 decided once per merged span (`"token"`: per token).
        mask_replace_prob (`float`, defaults to 0.8), random_replace_prob (`float`, defaults to 0.1):
            Shares of the spans replaced by [MASK] / random tokens; the rest are kept.
        random_token_distribution (`str`, defaults to `"uniform"`):
            Random replacements uniform over the non-special vocabulary, or `"unigram"` (the official code draws
            from the corpus token stream).
        max_predictions_per_seq (`int`, *optional*):
            Cap on masked tokens per block (none in SpanBERT).
        sbo_loss_weight (`float`, defaults to 1.0):
            `--pair-loss-weight`: loss = MLM + weight * SBO.
        sbo_max_targets (`int`, defaults to 15):
            `--max-pair-targets`: tokens of a span predicted from its boundaries (the first ones, from the start).
        sbo_position_embedding_size (`int`, defaults to 200):
            Size of the SBO relative position embedding (the head's default; the flag is not passed through).
        input_format (`str`, defaults to `"doc_sentences"`):
            Single segments that never cross a document (`break_mode doc`), segment ids 0, no NSP.
    """

    def __init__(
        self,
        mlm_probability: float = 0.15,
        masking_scheme: str = "spanbert",
        span_distribution: str = "geometric",
        geometric_p: float = 0.2,
        span_lower: int = 1,
        span_upper: int = 10,
        replacement_level: str = "span",
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        random_token_distribution: str = "uniform",
        max_predictions_per_seq: int | None = None,
        sbo_loss_weight: float = 1.0,
        sbo_max_targets: int = 15,
        sbo_position_embedding_size: int = 200,
        input_format: str = "doc_sentences",
        **kwargs,
    ):
        if span_distribution not in ("geometric", "ngram"):
            raise ValueError(f"span_distribution must be 'geometric' or 'ngram', got {span_distribution!r}")
        if not 1 <= span_lower <= span_upper:
            raise ValueError(f"need 1 <= span_lower <= span_upper, got {span_lower}, {span_upper}")
        if not 0.0 < geometric_p <= 1.0:
            raise ValueError(f"geometric_p must be in (0, 1], got {geometric_p}")
        if replacement_level not in ("span", "token"):
            raise ValueError(f"replacement_level must be 'span' or 'token', got {replacement_level!r}")
        if sbo_max_targets < 1 or sbo_position_embedding_size < 1 or sbo_loss_weight < 0:
            raise ValueError("sbo_max_targets and sbo_position_embedding_size must be >= 1, sbo_loss_weight >= 0")
        set_fields(self, locals())
        super().__init__(**kwargs)
