"""SpanBERT pretraining: masked LM + the span boundary objective, sparse, no NSP (Joshi et al., 2020).

Parameter names: `bert.*` and `cls.predictions.*` are exactly `transformers.BertForMaskedLM`'s, so plain
`AutoModelForMaskedLM` / `AutoModel` load our checkpoints; the SBO head (`span_boundary`) is `sbo.*`, with the
official `BertPairTargetPredictionHead`'s names. `loss = mlm + sbo_loss_weight * sbo`. docs/recipes/spanbert.md.
"""

from transformers import BertModel, BertPreTrainedModel
from transformers import initialization as init
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from .configuration_spanbert import BertologySpanBertConfig
from .masked_lm import MaskedLM
from .span_boundary import SpanBoundary, SpanBoundaryHead, grow_bias
from .step import PreTrainingModel, pretraining_step


class BertologySpanBertForPreTraining(PreTrainingModel, BertPreTrainedModel):
    config_class = BertologySpanBertConfig
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
        "sbo.decoder.weight": "bert.embeddings.word_embeddings.weight",
    }

    def __init__(self, config: BertologySpanBertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyMLMHead(config)
        self.sbo = SpanBoundaryHead(config)
        self.objectives = (MaskedLM(), SpanBoundary(weight=config.sbo_loss_weight))
        self.post_init()
        # SpanBERT has no NSP, so no loss reaches the pooler. It is kept (frozen at its initialisation, like the
        # released SpanBERT checkpoints' untrained pooler) so that plain `AutoModel` loads with nothing missing;
        # frozen, it is no "unused parameter" under DDP either.
        self.bert.pooler.requires_grad_(False)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SpanBoundaryHead):
            init.zeros_(module.bias)  # transformers' `init` skips weights loaded from a checkpoint

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def resize_token_embeddings(self, *args, **kwargs):
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        grow_bias(self.sbo, embeddings.weight.shape[0])  # the SBO head's own output bias
        return embeddings

    def predict(self, states):
        return self.cls(states)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, sbo_labels=None, **inputs):
        """Masked LM on the masked spans' tokens (§3.1) + the span boundary objective (§3.2), on BERT's encoder with
        one segment and no NSP (§3.3); `step.pretraining_step`."""
        return pretraining_step(
            self, input_ids, attention_mask, {"labels": labels, "sbo_labels": sbo_labels}, **inputs
        )
