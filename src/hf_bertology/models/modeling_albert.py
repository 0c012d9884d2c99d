"""ALBERT pretraining: masked LM (n-gram masked, sparse) + sentence-order prediction (SOP).

Parameter names are exactly those of `transformers.AlbertForPreTraining` (`albert.*`, `predictions.*`,
`sop_classifier.*`), so plain `AutoModelForPreTraining` loads our checkpoints. The backbone is `AlbertModel`:
factorized embeddings (V×E then E→H) and one group of layers shared by all `num_hidden_layers`. The MLM head
projects to E and decodes with the tied E×V embedding table plus a bias (google-research/albert
`run_pretraining.py: get_masked_lm_output`); it runs only on labelled positions, as the official code gathers
`masked_lm_positions` first. SOP is a 2-way classifier on the pooled [CLS] (label 1 = swapped). Each loss is a sum
divided by the Trainer's per-objective count (`num_items_in_batch`), so gradient accumulation and DDP equal one
large batch; without counts both are plain means and the total equals `AlbertForPreTraining`'s loss.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without
hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AlbertModel, AlbertPreTrainedModel
from transformers.modeling_outputs import ModelOutput
from transformers.models.albert.modeling_albert import AlbertMLMHead, AlbertSOPHead

from .configuration_albert import BertologyAlbertConfig

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


@dataclass
class BertologyAlbertForPreTrainingOutput(ModelOutput):
    """
    loss: `mlm_loss + sop_loss`.
    prediction_logits: `(num_masked, vocab_size)` at the labelled positions when `labels` are given (sparse),
        else `(batch, seq_len, vocab_size)`.
    sop_logits: `(batch, 2)`; class 0 = original order, 1 = swapped.
    """

    # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTrainingOutput[fields] with seq_relationship_logits->sop_logits, nsp->sop
    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    sop_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    sop_accuracy: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    # End copied block


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


class BertologyAlbertForPreTraining(AlbertPreTrainedModel):
    config_class = BertologyAlbertConfig
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # the losses are normalised by `num_items_in_batch`
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

    def mlm_head(self, states, targets, return_logits: bool | None = None, with_argmax: bool = True):
        """`(logits, summed cross-entropy, predicted ids or None)` at the `(M, H)` states of the targets (the
        interface of BERT's `mlm_head`; unfused: this file imports nothing from BERT's folder)."""
        logits = self.predictions(states)  # (M, V)
        loss = F.cross_entropy(logits.float(), targets, reduction="sum")
        return logits, loss, logits.argmax(-1) if with_argmax else None

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        return_metrics: bool = True,
        return_logits: bool | None = None,
        **kwargs,
    ) -> BertologyAlbertForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original token ids at the positions to predict, -100 elsewhere.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        sentence_order_label (`(batch,)`): 0 if A precedes B in the document, 1 if they were swapped.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`): one `(1, T)` row
            whose examples start at `cu_seq_lens_q[:-1]`; SOP reads each example's first token.
        return_metrics: also compute the accuracies (`BertologyTrainer` passes `False` at steps it does not log).
        return_logits: accepted for BERT's interface; ALBERT's head always returns its logits (`mlm_head`).
        """
        # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.forward[packed_backbone] with self.bert->self.albert
        packed = kwargs.get("cu_seq_lens_q") is not None
        if packed and self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
            raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
        outputs = self.albert(
            input_ids,
            attention_mask=None if packed else attention_mask,  # packed: the boundaries keep examples apart
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        # End copied block
        sequence_output, pooled_output = outputs.last_hidden_state, outputs.pooler_output
        if packed:  # the pooler on every example's [CLS], not only the row's first
            first_tokens = sequence_output[0, kwargs["cu_seq_lens_q"][:-1].long()]  # (B, H)
            pooled_output = self.albert.pooler_activation(self.albert.pooler(first_tokens))
        sop_logits = self.sop_classifier(pooled_output)  # (B, 2)

        # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.forward[losses_and_output] with seq_relationship_logits->sop_logits, nsp->sop, next_sentence_label->sentence_order_label, cls.predictions->predictions, BertologyBert->BertologyAlbert
        loss = mlm_loss = sop_loss = mlm_accuracy = sop_accuracy = None
        if labels is None:
            prediction_logits = self.predictions(sequence_output)  # (B, T, V)
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
            counted = counted and (sentence_order_label is None or "sentence_order_label" in num_items_in_batch)
            n_tokens = None if counted and not return_metrics else labels.ne(-100).sum()
            mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", n_tokens, n_tokens)
            if return_metrics:
                mlm_accuracy = (predicted_ids == targets).sum() / n_tokens  # none: NaN, logs skip it
            loss = mlm_loss
            if sentence_order_label is not None:
                sentence_order_label = sentence_order_label.flatten()  # (B,): no operation when it already is
                n_seq = None if counted else torch.full((), sentence_order_label.numel(), device=labels.device)
                sop_sum = F.cross_entropy(sop_logits.float(), sentence_order_label, reduction="sum")
                sop_loss = sop_sum / _denominator(num_items_in_batch, "sentence_order_label", n_seq, n_tokens)
                if return_metrics:
                    sop_right = (sop_logits.argmax(-1) == sentence_order_label).sum()
                    sop_accuracy = sop_right / sentence_order_label.ne(-100).sum()
                loss = loss + sop_loss

        return BertologyAlbertForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            sop_loss=sop_loss,
            mlm_accuracy=mlm_accuracy,
            sop_accuracy=sop_accuracy,
            prediction_logits=prediction_logits,
            sop_logits=sop_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        # End copied block
