"""What a composed model's step returns, and how it turns each summed loss into a mean over the optimizer step."""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from transformers.modeling_outputs import ModelOutput


@dataclass
class BertologyComposedForPreTrainingOutput(ModelOutput):
    """
    loss: the weighted sum of the component losses below that apply.
    mlm_loss / mlm_accuracy: masked LM (the generator's under RTD) at the labelled positions.
    nsp_loss, sop_loss / *_accuracy: the sentence task. sbo_loss / sbo_accuracy: SpanBERT's span boundary objective.
    rtd_loss / rtd_accuracy / replaced_fraction: the discriminator's sigmoid BCE over the real tokens.
    logits: `(num_masked, vocab_size)` MLM logits when labels are given (sparse), else `(batch, seq_len, vocab)`.
    rtd_logits: `(batch, seq_len)` discriminator logits (> 0 means "replaced").
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    sop_loss: torch.Tensor | None = None
    sbo_loss: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    nsp_accuracy: torch.Tensor | None = None
    sop_accuracy: torch.Tensor | None = None
    sbo_accuracy: torch.Tensor | None = None
    rtd_accuracy: torch.Tensor | None = None
    replaced_fraction: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# Copied from hf_bertology.models.modeling_bert._denominator
def _denominator(num_items_in_batch, key: str, local_count: torch.Tensor, local_tokens: torch.Tensor):
    """Count that turns a summed loss into the mean over the whole optimizer step.

    `BertologyTrainer` passes a dict of counts per key (summed over accumulated micro-batches and processes). The
    stock Trainer passes one int (masked tokens); another loss is then weighted by this micro-batch's share of
    those tokens. Without any count (plain forward) the local count gives the usual mean.
    """
    if isinstance(num_items_in_batch, Mapping):
        if key in num_items_in_batch:
            return num_items_in_batch[key]
        num_items_in_batch = num_items_in_batch.get("labels")
    if num_items_in_batch is None:
        return local_count.clamp(min=1)
    if key == "labels":
        return num_items_in_batch
    return local_count * num_items_in_batch / local_tokens.clamp(min=1)
