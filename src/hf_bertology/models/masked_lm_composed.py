"""The masked-LM objectives of a composed model (BERT, RoBERTa, SpanBERT, ALBERT, ModernBERT masking), one method per
loss as the papers name them: masked LM on the labelled positions (BERT §3.1 Task #1), the sentence task on each
example's first token (NSP, BERT §3.1 Task #2; SOP, ALBERT §4.2) and SpanBERT's span boundary objective (§3.2).
`_masked_objectives` encodes once and sums them; each loss is a sum over its own count (`_denominator`)."""

import torch
import torch.nn.functional as F
from torch import nn

from .heads_composed import MLM_HEADS
from .outputs_composed import BertologyComposedForPreTrainingOutput, _denominator

SENTENCE_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label"}


class MaskedObjectives:
    """The step of a masked-LM objective, mixed into `ComposedForPreTraining` (modeling_composed.py), whose
    `__init__` adds the family's MLM head, `sentence_classifier` (+ `sentence_pooler`) and `sbo` as configured."""

    def _masked_objectives(
        self,
        input_ids,
        inputs: dict,
        labels,
        target_positions,
        next_sentence_label,
        sentence_order_label,
        sbo_labels,
        sbo_boundaries,
        sbo_relative_positions,
        sbo_target_positions,
        num_items_in_batch,
    ) -> BertologyComposedForPreTrainingOutput:
        """`loss = mlm + sentence task + sbo_loss_weight * sbo`, of the parts whose labels are given."""
        outputs = self.base_model(input_ids, **inputs)
        states = outputs.last_hidden_state  # (B, T, H)
        out = BertologyComposedForPreTrainingOutput(hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        losses = []
        if labels is None:
            out.logits = MLM_HEADS[self.config.model_type](self, states)  # (B, T, V)
        else:
            out.logits, out.mlm_loss, out.mlm_accuracy = self._masked_lm_loss(
                states, labels, target_positions, num_items_in_batch
            )
            losses.append(out.mlm_loss)
        task = self.config.sentence_task
        sentence_labels = next_sentence_label if task == "nsp" else sentence_order_label
        if task is not None and sentence_labels is not None:
            loss, accuracy = self._sentence_loss(
                states, sentence_labels, labels, inputs.get("cu_seq_lens_q"), num_items_in_batch
            )
            setattr(out, f"{task}_loss", loss)
            setattr(out, f"{task}_accuracy", accuracy)
            losses.append(loss)
        if self.config.span_boundary_objective and sbo_labels is not None:
            out.sbo_loss, out.sbo_accuracy = self._span_boundary_loss(
                states,
                labels,
                sbo_labels,
                sbo_boundaries,
                sbo_relative_positions,
                sbo_target_positions,
                num_items_in_batch,
            )
            losses.append(self.config.sbo_loss_weight * out.sbo_loss)
        out.loss = sum(losses) if losses else None
        return out

    def _masked_lm_loss(self, states, labels, target_positions, num_items_in_batch):
        """Masked LM (BERT §3.1 Task #1) on the labelled tokens only (sparse prediction): `(M, V)` logits, the summed
        cross-entropy over the step's masked-token count, and the accuracy."""
        predicted = labels.ne(-100)  # (B, T)
        at = predicted.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.flatten().index_select(0, at)
        labelled = states.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
        logits = MLM_HEADS[self.config.model_type](self, labelled)  # (M, V): sparse prediction
        n_masked = predicted.sum()
        loss = F.cross_entropy(logits.float(), targets, reduction="sum") / _denominator(
            num_items_in_batch, "labels", n_masked, n_masked
        )
        return logits, loss, (logits.argmax(-1) == targets).sum() / n_masked

    def _sentence_loss(self, states, sentence_labels, labels, cu_seq_lens, num_items_in_batch):
        """NSP (BERT §3.1 Task #2) or SOP (ALBERT §4.2): a two-way classifier on each example's pooled first token
        (in a padding-free row, the start of each example); the loss over the step's example count, and the
        accuracy."""
        first = states[:, 0] if cu_seq_lens is None else states[0, cu_seq_lens[:-1].long()]  # (B, H)
        logits = self.sentence_classifier(self._pool(first))  # (B, 2)
        n_examples = torch.full((), len(sentence_labels), device=logits.device)
        n_masked = labels.ne(-100).sum() if labels is not None else n_examples
        loss = F.cross_entropy(logits.float(), sentence_labels.long(), reduction="sum") / _denominator(
            num_items_in_batch, SENTENCE_LABELS[self.config.sentence_task], n_examples, n_masked
        )
        return loss, (logits.argmax(-1) == sentence_labels).sum() / sentence_labels.ne(-100).sum()

    def _pool(self, first: torch.Tensor) -> torch.Tensor:
        """tanh(W h) of each example's first token: the family's pooler (BERT/RoBERTa `dense`, ALBERT a Linear) or
        our `sentence_pooler`."""
        pooler = getattr(self.base_model, "pooler", None)
        if pooler is None:
            return torch.tanh(self.sentence_pooler(first))
        return torch.tanh(pooler(first) if isinstance(pooler, nn.Linear) else pooler.dense(first))

    def _span_boundary_loss(
        self,
        states,
        labels,
        sbo_labels,
        sbo_boundaries,
        sbo_relative_positions,
        sbo_target_positions,
        num_items_in_batch,
    ):
        """SpanBERT's span boundary objective (§3.2): each span token x_i predicted from the states of the span's
        boundaries, h_{s-1} and h_{e+1}, and its position p_{i-s} in the span (`sbo`); the loss over the step's SBO
        target count, and the accuracy."""
        has_target = sbo_labels.ne(-100)  # (B, T)
        at = has_target.flatten().nonzero().squeeze(1) if sbo_target_positions is None else sbo_target_positions
        sbo_targets = sbo_labels.flatten().index_select(0, at)  # (N,)
        width = sbo_labels.shape[1]
        # (N, 2) boundary positions (s-1, e+1) in the row (the flat row when packed), then in the (B * T, H) states
        boundaries = sbo_boundaries.flatten(0, 1).index_select(0, at) + (at // width * width)[:, None]
        ends = states.flatten(0, 1).index_select(0, boundaries.flatten()).unflatten(0, (-1, 2))
        sbo_logits = self.sbo(ends[:, 0], ends[:, 1], sbo_relative_positions.flatten().index_select(0, at))
        n_sbo = has_target.sum()
        n_masked = labels.ne(-100).sum() if labels is not None else n_sbo
        loss = F.cross_entropy(sbo_logits.float(), sbo_targets, reduction="sum") / _denominator(
            num_items_in_batch, "sbo_labels", n_sbo, n_masked
        )
        return loss, (sbo_logits.argmax(-1) == sbo_targets).sum() / n_sbo
