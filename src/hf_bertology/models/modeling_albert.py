"""ALBERT pretraining: masked LM (n-grams, sparse) + sentence-order prediction (Lan et al., 2020).

Parameter names are exactly `transformers.AlbertForPreTraining`'s (`albert.*`, `predictions.*`,
`sop_classifier.*`), so plain `AutoModelForPreTraining` loads our checkpoints. The losses are `masked_lm`'s, BERT's
step with SOP for NSP (label 1 = swapped). docs/recipes/albert.md.
"""

from transformers import AlbertModel, AlbertPreTrainedModel
from transformers.models.albert.modeling_albert import AlbertMLMHead, AlbertSOPHead

from .configuration_albert import BertologyAlbertConfig
from .masked_lm import MLM_HEADS, MaskedLMPreTraining, pool_first_tokens


class BertologyAlbertForPreTraining(MaskedLMPreTraining, AlbertPreTrainedModel):
    config_class = BertologyAlbertConfig
    logits_name = "prediction_logits"  # AlbertForPreTraining's names
    sentence_key, sentence_logits_name = "sentence_order_label", "sop_logits"
    _tied_weights_keys = {
        "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
        "predictions.decoder.bias": "predictions.bias",
    }

    def __init__(self, config: BertologyAlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.predictions.decoder = new_embeddings

    def get_input_embeddings(self):
        return self.albert.embeddings.word_embeddings

    def predict(self, states):
        return MLM_HEADS["albert"](self, states)

    def sentence_logits(self, outputs, cu_seq_lens):
        if cu_seq_lens is not None:  # the pooler on every example's [CLS], not only the row's first
            return self.first_token_logits(outputs.last_hidden_state[0, cu_seq_lens[:-1].long()])
        return self.sop_classifier(outputs.pooler_output)  # (B, 2); class 1: swapped

    def first_token_logits(self, first):
        return self.sop_classifier(pool_first_tokens(self.albert, first))  # (B, 2)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, sentence_order_label=None, **inputs):
        """Masked LM + sentence-order prediction (ALBERT §4.2); the arguments are `pretraining_step`'s."""
        return self.pretraining_step(input_ids, attention_mask, labels, sentence_order_label, **inputs)
