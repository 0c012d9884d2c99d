"""BERT's pretraining recipe as a `transformers.BertConfig` (Devlin et al., 2019; google-research/bert).

The architecture fields are `BertConfig`'s, with its `model_type` ("bert") kept, so plain `transformers` reads the
saved `config.json`. The extra fields are the objective's hyperparameters, so a checkpoint records how it was
trained and `DataCollatorForMaskedLM.from_config(config, tokenizer)` rebuilds the collator.
"""

from transformers import BertConfig

from .configuration_recipe import set_fields


class BertologyBertConfig(BertConfig):
    r"""
    Args (in addition to [`~transformers.BertConfig`]'s; defaults are BERT-base's and the official code's):
        mlm_probability (`float`, defaults to 0.15):
            Share of the tokens predicted per sequence (`masked_lm_prob`, create_pretraining_data.py).
        max_predictions_per_seq (`int`, *optional*, defaults to 20):
            Cap on predictions per sequence (20 for length 128, 80 for 512). `None` means no cap.
        predictions_follow_length (`bool`, defaults to `True`):
            `max_predictions_per_seq` follows the run's `--max_seq_length`: `ceil(mlm_probability * length)` rounded
            up to a multiple of 5 (`Recipe.fit_to_length`); `False` once the cap was set explicitly, so a continued
            run keeps it.
        mask_replace_prob (`float`, defaults to 0.8):
            Share of the chosen tokens replaced by `[MASK]`.
        random_replace_prob (`float`, defaults to 0.1):
            Share of the chosen tokens replaced by a random non-special token; the rest are kept.
        whole_word_mask (`bool`, defaults to `False`):
            Choose whole words ("##" pieces grouped with their word start), as `--do_whole_word_mask`.
        input_format (`str`, defaults to `"nsp_pairs"`):
            How documents become examples (see `hf_bertology.data.INPUT_FORMATS`): BERT's segment pairs with
            next-sentence labels.
        short_seq_prob (`float`, defaults to 0.1):
            Probability of a shorter target length for a pair (create_pretraining_data.py).
        nsp_random_prob (`float`, defaults to 0.5):
            Probability that segment B comes from another document (label 1).
    """

    def __init__(
        self,
        mlm_probability: float = 0.15,
        max_predictions_per_seq: int | None = 20,
        predictions_follow_length: bool = True,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        input_format: str = "nsp_pairs",
        short_seq_prob: float = 0.1,
        nsp_random_prob: float = 0.5,
        **kwargs,
    ):
        if not 0.0 <= short_seq_prob <= 1.0 or not 0.0 <= nsp_random_prob <= 1.0:
            raise ValueError("short_seq_prob and nsp_random_prob must be probabilities")
        set_fields(self, locals())
        super().__init__(**kwargs)
