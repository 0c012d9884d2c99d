"""RoBERTa's pretraining recipe as a `transformers.RobertaConfig` (Liu et al., 2019; fairseq `examples/roberta`).

`model_type` stays "roberta", so plain `transformers` reads the saved `config.json`. The extra fields are the
objective's: dynamic masking (a new mask every time a sequence is seen: the collator masks at batch time), no
next-sentence prediction, FULL-SENTENCES blocks (§4.2 of the paper; fairseq `sample_break_mode: complete`).
"""

from transformers import RobertaConfig

from .configuration_recipe import set_fields


class BertologyRobertaConfig(RobertaConfig):
    r"""
    Args (in addition to [`~transformers.RobertaConfig`]'s; defaults are RoBERTa-base's):
        mlm_probability (`float`, defaults to 0.15): share of tokens predicted per sequence (fairseq `mask_prob`).
        max_predictions_per_seq (`int`, *optional*, defaults to `None`): cap on predictions per sequence; fairseq
            has none.
        mask_replace_prob (`float`, defaults to 0.8): share of chosen tokens replaced by `<mask>`.
        random_replace_prob (`float`, defaults to 0.1): share replaced by a random non-special token
            (fairseq `random_token_prob`); the rest are kept (`leave_unmasked_prob`).
        whole_word_mask (`bool`, defaults to `False`): the released models do not mask whole words (fairseq #1576).
        input_format (`str`, defaults to `"full_sentences"`): FULL-SENTENCES (may cross documents, with a separator
            between them) or `"doc_sentences"` (never crosses).
    """

    def __init__(
        self,
        mlm_probability: float = 0.15,
        max_predictions_per_seq: int | None = None,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        input_format: str = "full_sentences",
        **kwargs,
    ):
        set_fields(self, locals())
        super().__init__(**kwargs)
