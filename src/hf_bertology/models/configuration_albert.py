"""ALBERT's pretraining recipe as a `transformers.AlbertConfig` (Lan et al., 2020; google-research/albert).

The architecture fields are `AlbertConfig`'s (factorized embedding size, cross-layer sharing through
`num_hidden_groups`) with `model_type` "albert" kept, so plain `transformers` reads the saved `config.json`. The
extra fields are the objective's: n-gram masking (`create_pretraining_data.py`, `ngram=3`,
`favor_shorter_ngram=True`, whole words) at the paper's 15% rate, and sentence-order pairs.
`DataCollatorForSpanMasking.from_config(config, tokenizer)` rebuilds the collator.
"""

from transformers import AlbertConfig

from .configuration_recipe import set_fields


class BertologyAlbertConfig(AlbertConfig):
    r"""
    Args (in addition to [`~transformers.AlbertConfig`]'s):
        mlm_probability (`float`, defaults to 0.15):
            Share of the tokens predicted per sequence (`max(1, round(len * 0.15))`, special tokens counted).
        max_predictions_per_seq (`int`, *optional*):
            Cap on predictions (the README's 20 would mask ≈4% at length 512; we follow the paper: no cap).
        masking_scheme (`str`, defaults to `"albert"`):
            Span placement of `DataCollatorForSpanMasking`: word starts in random order, n-grams shortened to fit
            the budget or skipped, never overlapping.
        span_distribution (`str`, defaults to `"ngram"`), span_lower (`int`, 1), span_upper (`int`, 3):
            n-gram lengths in words with p(n) ∝ 1/n on 1..3 (6/11, 3/11, 2/11).
        geometric_p (`float`, defaults to 0.2):
            Only used with `span_distribution="geometric"`.
        replacement_level (`str`, defaults to `"token"`):
            80/10/10 decided per token, as in the official code.
        mask_replace_prob (`float`, 0.8), random_replace_prob (`float`, 0.1), random_token_distribution ("uniform"):
            [MASK] / random non-special token / unchanged.
        input_format (`str`, defaults to `"sop_pairs"`):
            Consecutive segments A, B of one document, swapped with probability `sop_swap_prob` (label 1).
        short_seq_prob (`float`, defaults to 0.1):
            Probability of a shorter target length for a pair.
        sop_swap_prob (`float`, defaults to 0.5):
            Probability that A and B are swapped.
    """

    def __init__(
        self,
        mlm_probability: float = 0.15,
        max_predictions_per_seq: int | None = None,
        masking_scheme: str = "albert",
        span_distribution: str = "ngram",
        span_lower: int = 1,
        span_upper: int = 3,
        geometric_p: float = 0.2,
        replacement_level: str = "token",
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        random_token_distribution: str = "uniform",
        input_format: str = "sop_pairs",
        short_seq_prob: float = 0.1,
        sop_swap_prob: float = 0.5,
        **kwargs,
    ):
        if span_distribution not in ("geometric", "ngram"):
            raise ValueError(f"span_distribution must be 'geometric' or 'ngram', got {span_distribution!r}")
        if not 1 <= span_lower <= span_upper:
            raise ValueError(f"need 1 <= span_lower <= span_upper, got {span_lower}, {span_upper}")
        if replacement_level not in ("span", "token"):
            raise ValueError(f"replacement_level must be 'span' or 'token', got {replacement_level!r}")
        if not 0.0 <= short_seq_prob <= 1.0 or not 0.0 <= sop_swap_prob <= 1.0:
            raise ValueError("short_seq_prob and sop_swap_prob must be probabilities")
        set_fields(self, locals())
        super().__init__(**kwargs)
