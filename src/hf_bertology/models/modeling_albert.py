"""ALBERT pretraining: masked LM (n-grams, sparse) + sentence-order prediction (Lan et al., 2020).

Parameter names are exactly `transformers.AlbertForPreTraining`'s (`albert.*`, `predictions.*`,
`sop_classifier.*`), so plain `AutoModelForPreTraining` loads our checkpoints. The losses are `masked_lm`'s, BERT's
step with SOP for NSP (label 1 = swapped). docs/recipes/albert.md.
"""

from transformers import AlbertModel, AlbertPreTrainedModel
from transformers.models.albert.modeling_albert import AlbertMLMHead, AlbertSOPHead

from .configuration_albert import BertologyAlbertConfig
from .masked_lm import MLM_HEADS, MaskedLM
from .sentence_task import SentenceTask
from .step import PreTrainingModel, pretraining_step


class BertologyAlbertForPreTraining(PreTrainingModel, AlbertPreTrainedModel):
    config_class = BertologyAlbertConfig
    _tied_weights_keys = {
        "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
        "predictions.decoder.bias": "predictions.bias",
    }

    def __init__(self, config: BertologyAlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        # AlbertForPreTraining's output names
        sop = SentenceTask("sentence_order_label", "sop_classifier", logits_name="sop_logits")
        self.objectives = (MaskedLM(logits_name="prediction_logits"), sop)
        self.post_init()

    def get_output_embeddings(self):
        return self.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.predictions.decoder = new_embeddings

    def get_input_embeddings(self):
        return self.albert.embeddings.word_embeddings

    def predict(self, states):
        return MLM_HEADS["albert"](self, states)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, sentence_order_label=None, **inputs):
        """Masked LM + sentence-order prediction (ALBERT §4.2); `step.pretraining_step`."""
        labels = {"labels": labels, "sentence_order_label": sentence_order_label}
        return pretraining_step(self, input_ids, attention_mask, labels, **inputs)
