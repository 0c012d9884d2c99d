"""Masked LM as an objective (BERT §3.1 Task #1), written once for every model that predicts tokens.

Sparse prediction (the head runs on the labelled positions only, as the official BERT gathers `masked_lm_positions`),
the language-model loss through the model's hook (`token_loss.TokenLoss`), a sum over the step's count
(`outputs.step_mean`). Used by BERT, RoBERTa, SpanBERT, ALBERT, ModernBERT, every masked-LM cell of
`modeling_composed`, and XLNet (its permutation LM is this loss on its query stream at the targets).
`MLM_HEADS` is each family's head.
"""

from .objective import EVERY_ROW, Batch, Objective

# model_type -> the family's masked-LM head: `(M, V)` logits of `(M, H)` states, on its `*ForMaskedLM` or a model
# holding the same modules (its `*ForPreTraining`, a composed cell, an RTD generator); each family's one definition
MLM_HEADS = {
    "bert": lambda m, h: m.cls.predictions(h),
    "roberta": lambda m, h: m.lm_head(h),
    "albert": lambda m, h: m.predictions(h),
    "electra": lambda m, h: m.generator_lm_head(m.generator_predictions(h)),
    "deberta-v2": lambda m, h: (
        m.cls.predictions(h) if hasattr(m, "cls") else m.lm_predictions(h, m.deberta.embeddings.word_embeddings)
    ),
    "modernbert": lambda m, h: m.decoder(m.head(h)),
}


class MaskedLM(Objective):
    """Reads `labels` (the original ids where a token is predicted, -100 elsewhere) and `target_positions`; the rows
    of the labelled tokens; returns `<name>_loss`, `<name>_accuracy` and the `(M, V)` logits (`logits_name`; None
    where BERT's head fuses them with the loss). Without labels: the dense `(B, T, V)` logits of every row. The head
    is the model's (`predict`, and `mlm_head` for the loss)."""

    reads = ("labels", "target_positions")

    def __init__(self, name: str = "mlm", logits_name: str = "logits"):
        super().__init__()
        self.name, self.logits_name = name, logits_name

    def rows(self, batch: Batch):
        return EVERY_ROW if batch.get("labels") is None else batch.labelled().at

    def forward(self, model, states, batch: Batch) -> dict:
        if batch.get("labels") is None:
            return {self.logits_name: model.predict(states)}  # (B, T, V)
        targets = batch.labelled().targets
        # (M, V) logits (sparse prediction), or None where the loss is fused
        logits, loss_sum, predicted = model.mlm_head(states, targets, batch.return_logits, batch.return_metrics)
        # the local count only where used: without the Trainer's count, and for the accuracy
        n_tokens = batch.count() if not batch.counted("labels") or batch.return_metrics else None
        loss = loss_sum / batch.step_mean("labels", n_tokens)
        out = {"loss": loss, f"{self.name}_loss": loss, self.logits_name: logits}
        if batch.return_metrics:
            out[f"{self.name}_accuracy"] = (predicted == targets).sum() / n_tokens  # none: NaN, logs skip it
        return out
