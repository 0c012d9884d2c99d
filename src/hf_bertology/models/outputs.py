"""What every pretraining model returns, and how each of its losses becomes a mean over the optimizer step.

One output class for every variant: a field is None where the objective has no such part, and `ModelOutput` then
leaves it out of its keys, so each model's output holds only its own losses, accuracies and logits.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from transformers.modeling_outputs import ModelOutput


@dataclass
class BertologyForPreTrainingOutput(ModelOutput):
    """
    loss: the weighted sum of the component losses that apply (the recipe's weights).
    mlm_loss, nsp_loss, sop_loss, sbo_loss, rtd_loss, plm_loss: each objective's loss, a mean over its own count;
        generator_loss: a generator's masked LM beside a masked LM of the model's own (Replace MLM).
    *_accuracy: the matching argmax accuracies (None at training steps that do not ask for metrics).
    replaced_fraction, sampled_accuracy, disc_auc, disc_precision, disc_recall: replaced-token detection's
        diagnostics over the real tokens (ELECTRA's official `metric_fn`; NaN where undefined).
    prediction_logits (BERT, ALBERT, ELECTRA, DeBERTa-v3) or logits (the others, as the plain class names them):
        `(num_labelled, vocab_size)` at the labelled positions when labels are given (sparse), else
        `(batch, seq_len, vocab_size)`. seq_relationship_logits / sop_logits: `(batch, 2)`; sbo_logits:
        `(num_sbo_targets, vocab_size)`; generator_logits: `(num_labelled, vocab_size)` (beside a masked LM); rtd_logits: `(batch, seq_len)`, > 0 means "replaced".
    replaced_input_ids, rtd_labels: the discriminator's input and its labels (1 where a sample differs).
    mems: XLNet's memory for the next segment.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    sop_loss: torch.Tensor | None = None
    sbo_loss: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    plm_loss: torch.Tensor | None = None
    generator_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    nsp_accuracy: torch.Tensor | None = None
    sop_accuracy: torch.Tensor | None = None
    sbo_accuracy: torch.Tensor | None = None
    rtd_accuracy: torch.Tensor | None = None
    plm_accuracy: torch.Tensor | None = None
    generator_accuracy: torch.Tensor | None = None
    replaced_fraction: torch.Tensor | None = None
    sampled_accuracy: torch.Tensor | None = None
    disc_auc: torch.Tensor | None = None
    disc_precision: torch.Tensor | None = None
    disc_recall: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    sbo_logits: torch.Tensor | None = None
    generator_logits: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    replaced_input_ids: torch.Tensor | None = None
    rtd_labels: torch.Tensor | None = None
    mems: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def step_mean(num_items_in_batch, key: str, local_count: torch.Tensor | None, local_tokens: torch.Tensor | None):
    """The count that turns the summed loss of `key`'s targets into the mean over the whole optimizer step.

    `BertologyTrainer` passes a dict of counts per key (summed over accumulated micro-batches and processes). The
    stock Trainer passes one int (masked tokens); another loss is then weighted by this micro-batch's share of
    those tokens (`local_tokens`). Without any count (a plain forward) the local count gives the usual mean.
    """
    if isinstance(num_items_in_batch, Mapping):
        if key in num_items_in_batch:  # none in the whole step: the empty sum is 0, not 0 / 0
            count = num_items_in_batch[key]
            return count.clamp(min=1) if torch.is_tensor(count) else max(count, 1)
        num_items_in_batch = num_items_in_batch.get("labels")
    if num_items_in_batch is None:
        return local_count.clamp(min=1)
    if key == "labels":
        return num_items_in_batch
    return local_count * num_items_in_batch / local_tokens.clamp(min=1)
