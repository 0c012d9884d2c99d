"""RoBERTa pretraining: masked LM only, with sparse prediction (Liu et al., 2019).

Parameter names are exactly `transformers.RobertaForMaskedLM`'s (`roberta.*`, `lm_head.*`), so plain
`AutoModelForMaskedLM` loads our checkpoints. The loss is `masked_lm`'s (fairseq's `RobertaLMHead` also runs on the
masked tokens only). docs/recipes/roberta.md.
"""

from transformers import RobertaModel, RobertaPreTrainedModel
from transformers.models.roberta.modeling_roberta import RobertaLMHead

from .configuration_roberta import BertologyRobertaConfig
from .masked_lm import MLM_HEADS, MaskedLM
from .step import PreTrainingModel, pretraining_step


class BertologyRobertaForPreTraining(PreTrainingModel, RobertaPreTrainedModel):
    config_class = BertologyRobertaConfig
    # The saved folder also holds RobertaModel's pooler (for RobertaForMultipleChoice); pretraining never uses it.
    _keys_to_ignore_on_load_unexpected = [r"^roberta\.pooler\."]
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: BertologyRobertaConfig):
        super().__init__(config)
        self.roberta = RobertaModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.objectives = (MaskedLM(),)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def predict(self, states):
        return MLM_HEADS["roberta"](self, states)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, **inputs):
        """Masked LM (RoBERTa §2, no NSP); `step.pretraining_step`."""
        return pretraining_step(self, input_ids, attention_mask, {"labels": labels}, **inputs)
