"""The sentence task as an objective: next-sentence prediction (BERT §3.1 Task #2) or sentence-order prediction
(ALBERT §4.2), a two-way classifier on each example's first token.

Used by BERT (NSP), ALBERT (SOP) and every cell with a `sentence_task`; the head is the model's (BERT's
`cls.seq_relationship`, ALBERT's `sop_classifier`, a cell's `sentence_classifier`), on BERT's pooler.
"""

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .objective import Batch, Objective
from .outputs import step_mean

# the sentence task of each label key, as the outputs name it
SENTENCE_TASKS = {"next_sentence_label": "nsp", "sentence_order_label": "sop"}


def pool_first_tokens(backbone: nn.Module, first: torch.Tensor, own_pooler: nn.Linear | None = None) -> torch.Tensor:
    """BERT's pooler, tanh(W h), on each example's first-token `(B, H)` states: the backbone's dense layer (BERT's and
    RoBERTa's `pooler.dense`, ALBERT's `pooler`, a Linear), or `own_pooler` for a backbone without one."""
    pooler = getattr(backbone, "pooler", None)
    if pooler is None:
        return torch.tanh(own_pooler(first))
    return torch.tanh(pooler(first) if isinstance(pooler, nn.Linear) else pooler.dense(first))


def sentence_loss(logits, sentence_label, key: str, n_masked, num_items_in_batch, return_metrics: bool = True):
    """The `(B, 2)` logits' cross-entropy over the step's example count (label 1: B is random / swapped), and the
    accuracy. `n_masked`: this micro-batch's masked tokens, its share of the stock Trainer's one count."""
    sentence_label = sentence_label.flatten().long()  # (B,): no operation when it already is
    counted = isinstance(num_items_in_batch, Mapping) and key in num_items_in_batch
    n_examples = None if counted else torch.full((), sentence_label.numel(), device=logits.device)
    loss_sum = F.cross_entropy(logits.float(), sentence_label, reduction="sum")
    loss = loss_sum / step_mean(num_items_in_batch, key, n_examples, n_examples if n_masked is None else n_masked)
    if not return_metrics:
        return loss, None
    return loss, (logits.argmax(-1) == sentence_label).sum() / sentence_label.ne(-100).sum()


class SentenceTask(Objective):
    """Reads its label (`next_sentence_label` or `sentence_order_label`, `(B,)`); the rows of each example's first
    token; returns `nsp_*` or `sop_*` (`<task>_loss`, `<task>_accuracy`) and, where the plain class names them,
    the `(B, 2)` logits (`logits_name`, also without a label). `classifier`: the name of the model's `(B, H) ->
    (B, 2)` head on BERT's pooler (the backbone's, or the model's `sentence_pooler` for a backbone without one)."""

    def __init__(self, key: str, classifier: str, logits_name: str | None = None):
        super().__init__()
        self.key, self.classifier, self.logits_name = key, classifier, logits_name
        self.name, self.reads = SENTENCE_TASKS[key], (key,)

    def rows(self, batch: Batch):
        return None if batch.get(self.key) is None and self.logits_name is None else batch.first_tokens()

    def forward(self, model, states, batch: Batch) -> dict:
        pooled = batch.pooler_output  # the backbone's, where it ran on the first tokens (padded, every row)
        if pooled is None:
            pooled = pool_first_tokens(model.base_model, states, getattr(model, "sentence_pooler", None))
        logits = model.get_submodule(self.classifier)(pooled)  # (B, 2)
        out = {} if self.logits_name is None else {self.logits_name: logits}
        label = batch.get(self.key)
        if label is None:
            return out
        with_masked = batch.get("labels") is not None and not batch.counted(self.key)
        n_masked = batch.count() if with_masked else None
        loss, accuracy = sentence_loss(
            logits, label, self.key, n_masked, batch.num_items_in_batch, batch.return_metrics
        )
        return {**out, "loss": loss, f"{self.name}_loss": loss, f"{self.name}_accuracy": accuracy}
