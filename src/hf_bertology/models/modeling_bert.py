"""BERT pretraining (masked LM + next-sentence prediction) with sparse prediction.

Parameter names are exactly those of `transformers.BertForPreTraining` (`bert.*`, `cls.predictions.*`,
`cls.seq_relationship.*`), so `AutoModelForPreTraining` loads our checkpoints with plain `transformers`. What we add:

- **Sparse prediction**: the MLM head (transform + tied decoder) runs only on the positions that have a label, as
  in the official `get_masked_lm_output` (google-research/bert `run_pretraining.py`, which gathers
  `masked_lm_positions` first). `transformers` projects every position onto the vocabulary; we measured the
  sparse head to be faster (benchmarks/sparse_mlm.py).
- **Losses that add up across micro-batches and processes**: given the Trainer's `num_items_in_batch` (our
  `BertologyTrainer` passes one count per objective), each component is a sum divided by the count over the whole
  optimizer step, so gradient accumulation and DDP give the gradients of one large batch.

This file imports only torch, transformers and its own folder, so `save_pretrained` copies a self-contained module
for `trust_remote_code=True`.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import BertModel, BertPreTrainedModel
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertPreTrainingHeads

from .configuration_bert import BertologyBertConfig
from .fused_cross_entropy import sparse_mlm_loss

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


@dataclass
class BertologyBertForPreTrainingOutput(ModelOutput):
    """
    loss: `mlm_loss + nsp_loss`.
    prediction_logits: `(num_masked, vocab_size)` at the labelled positions when `labels` are given (sparse;
        None where the MLM loss is fused, see `return_logits`), else `(batch, seq_len, vocab_size)`.
    seq_relationship_logits: `(batch, 2)`; class 0 = B follows A, 1 = B is random.
    """

    # Copy source: fields
    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    nsp_accuracy: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    # End copy source: fields


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


class BertologyBertForPreTraining(BertPreTrainedModel):
    config_class = BertologyBertConfig
    _auto_class = "AutoModelForPreTraining"
    # The loss is normalised by `num_items_in_batch` (see `_denominator`), so the Trainer must pass it.
    accepts_loss_kwargs = True
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: BertologyBertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def mlm_head(self, states, targets, return_logits: bool | None = None, with_argmax: bool = True):
        """`(logits or None, summed cross-entropy, predicted ids or None)` of the MLM head at the `(M, H)` states of
        the targets: transform, then the output layer fused with the loss where it saves memory
        (`fused_cross_entropy.sparse_mlm_loss`)."""
        head = self.cls.predictions
        return sparse_mlm_loss(head.transform(states), head.decoder, targets, return_logits, with_argmax)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        return_metrics: bool = True,
        return_logits: bool | None = None,
        **kwargs,
    ) -> BertologyBertForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original token ids at the positions to predict, -100 elsewhere.
        next_sentence_label (`(batch,)`): 0 if segment B follows A, 1 if B is random.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`): one `(1, T)` row
            whose examples start at `cu_seq_lens_q[:-1]`; NSP reads each example's first token.
        return_metrics: also compute the accuracies. `BertologyTrainer` passes `False` at training steps it does not
            log (they change no gradient; on a GPU each operation is a kernel launch).
        return_logits: with `labels`, True always returns `prediction_logits`; None (default) returns them unless
            the MLM loss is fused, which it is in training where the logits would exceed one chunk
            (`fused_cross_entropy.sparse_mlm_loss`: no `(M, V)` logits in memory); False fuses wherever there is a
            gradient. Without `labels` the logits are always returned.
        """
        # Copy source: packed_backbone
        packed = kwargs.get("cu_seq_lens_q") is not None
        if packed and self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
            raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
        # Copy source: backbone_call
        outputs = self.bert(
            input_ids,
            attention_mask=None if packed else attention_mask,  # packed: the boundaries keep examples apart
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        # End copy source: backbone_call
        # End copy source: packed_backbone
        sequence_output, pooled_output = outputs.last_hidden_state, outputs.pooler_output
        if packed:  # the pooler on every example's [CLS], not only the row's first
            pooler = self.bert.pooler
            pooled_output = pooler.activation(pooler.dense(sequence_output[0, kwargs["cu_seq_lens_q"][:-1]]))
        nsp_logits = self.cls.seq_relationship(pooled_output)  # (B, 2)

        # Copy source: losses_and_output
        loss = mlm_loss = nsp_loss = mlm_accuracy = nsp_accuracy = None
        if labels is None:
            prediction_logits = self.cls.predictions(sequence_output)  # (B, T, V)
        else:
            at = (
                labels.flatten().ne(-100).nonzero().squeeze(1) if target_positions is None else target_positions
            )  # (M,)
            targets = labels.take(at)  # `take` reads labels as flat: no view first
            states = sequence_output.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
            # (M, V) logits (sparse prediction), or None where the loss is fused (`mlm_head`)
            prediction_logits, mlm_sum, predicted_ids = self.mlm_head(states, targets, return_logits, return_metrics)
            # local counts only where used: without the Trainer's counts per objective, and for the accuracies
            counted = isinstance(num_items_in_batch, Mapping) and "labels" in num_items_in_batch
            counted = counted and (next_sentence_label is None or "next_sentence_label" in num_items_in_batch)
            n_tokens = None if counted and not return_metrics else labels.ne(-100).sum()
            mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", n_tokens, n_tokens)
            if return_metrics:
                mlm_accuracy = (predicted_ids == targets).sum() / n_tokens  # none: NaN, logs skip it
            loss = mlm_loss
            if next_sentence_label is not None:
                next_sentence_label = next_sentence_label.flatten()  # (B,): no operation when it already is
                n_seq = None if counted else torch.full((), next_sentence_label.numel(), device=labels.device)
                nsp_sum = F.cross_entropy(nsp_logits.float(), next_sentence_label, reduction="sum")
                nsp_loss = nsp_sum / _denominator(num_items_in_batch, "next_sentence_label", n_seq, n_tokens)
                if return_metrics:
                    nsp_right = (nsp_logits.argmax(-1) == next_sentence_label).sum()
                    nsp_accuracy = nsp_right / next_sentence_label.ne(-100).sum()
                loss = loss + nsp_loss

        return BertologyBertForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            mlm_accuracy=mlm_accuracy,
            nsp_accuracy=nsp_accuracy,
            prediction_logits=prediction_logits,
            seq_relationship_logits=nsp_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        # End copy source: losses_and_output
