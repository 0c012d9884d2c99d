"""BERT pretraining (masked LM + next-sentence prediction) with sparse prediction (Devlin et al., 2019).

Parameter names are exactly `transformers.BertForPreTraining`'s (`bert.*`, `cls.predictions.*`,
`cls.seq_relationship.*`), so plain `AutoModelForPreTraining` loads our checkpoints. The losses are `masked_lm`'s;
the MLM output layer is fused with its loss where that saves memory (`fused_cross_entropy`). docs/recipes/bert.md.
"""

from transformers import BertModel, BertPreTrainedModel
from transformers.models.bert.modeling_bert import BertPreTrainingHeads

from .configuration_bert import BertologyBertConfig
from .masked_lm import MLM_HEADS, MaskedLM
from .sentence_task import SentenceTask
from .step import PreTrainingModel, pretraining_step


class BertologyBertForPreTraining(PreTrainingModel, BertPreTrainedModel):
    config_class = BertologyBertConfig
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertologyBertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        # BertForPreTraining's output names
        nsp = SentenceTask("next_sentence_label", "cls.seq_relationship", logits_name="seq_relationship_logits")
        self.objectives = (MaskedLM(logits_name="prediction_logits"), nsp)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def mlm_head(self, states, targets, return_logits: bool | None = None, with_argmax: bool = True):
        """`(logits or None, summed cross-entropy, predicted ids or None)` of the MLM head at the `(M, H)` states of
        the targets: transform, then the output layer fused with the model's loss hook where it saves memory
        (`token_loss.TokenLoss.linear`)."""
        head = self.cls.predictions
        return self.token_loss.linear(head.transform(states), head.decoder, targets, return_logits, with_argmax)

    def predict(self, states):
        return MLM_HEADS["bert"](self, states)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, next_sentence_label=None, **inputs):
        """Masked LM + next-sentence prediction (BERT §3.1); `step.pretraining_step`."""
        labels = {"labels": labels, "next_sentence_label": next_sentence_label}
        return pretraining_step(self, input_ids, attention_mask, labels, **inputs)
