"""Masked LM and the sentence tasks, written once for every model that predicts masked tokens.

Sparse prediction (the head runs on the labelled positions only, as the official BERT gathers `masked_lm_positions`),
the language-model loss through the model's hook (`lm_loss.LanguageModelLoss`), each loss a sum over its step's count
(`outputs.step_mean`), and NSP / SOP on each example's first token. Used by BERT, RoBERTa, SpanBERT, ALBERT and
ModernBERT (`MaskedLMPreTraining`) and every masked-LM cell of `modeling_composed`; XLNet's sparse head reads
`labelled`.
"""

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .last_layer import KEY as LAST_LAYER_KEY
from .last_layer import install_subset, masked_lm_rows, scatter_rows
from .lm_loss import LanguageModelLoss
from .outputs import BertologyForPreTrainingOutput, step_mean
from .span_boundary import SpanTargets, span_boundary_loss

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")
# the sentence task of each label key, as the outputs name it
SENTENCE_TASKS = {"next_sentence_label": "nsp", "sentence_order_label": "sop"}


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


def pool_first_tokens(backbone: nn.Module, first: torch.Tensor, own_pooler: nn.Linear | None = None) -> torch.Tensor:
    """BERT's pooler, tanh(W h), on each example's first-token `(B, H)` states: the backbone's dense layer (BERT's and
    RoBERTa's `pooler.dense`, ALBERT's `pooler`, a Linear), or `own_pooler` for a backbone without one."""
    pooler = getattr(backbone, "pooler", None)
    if pooler is None:
        return torch.tanh(own_pooler(first))
    return torch.tanh(pooler(first) if isinstance(pooler, nn.Linear) else pooler.dense(first))


def is_packed(config, kwargs: Mapping) -> bool:
    """Whether the batch is padding-free (one `(1, T)` row whose examples `cu_seq_lens_q` keeps apart; the encoder
    then gets no attention mask), refused under an attention that does not read the boundaries."""
    packed = kwargs.get("cu_seq_lens_q") is not None
    if packed and config._attn_implementation not in PACKED_IMPLEMENTATIONS:
        raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
    return packed


def labelled(labels: torch.Tensor, target_positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(at, targets)`: the flat positions of the labelled tokens (the collator's `target_positions`, computed on the
    host, else a boolean index, which makes the host wait) and their labels."""
    at = labels.flatten().ne(-100).nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
    return at, labels.take(at)  # `take` reads labels as flat: no view first


def sentence_loss(logits, sentence_label, key: str, n_masked, num_items_in_batch, return_metrics: bool = True):
    """NSP (BERT §3.1 Task #2) or SOP (ALBERT §4.2): the `(B, 2)` logits' cross-entropy over the step's example
    count (label 1: B is random / swapped), and the accuracy."""
    sentence_label = sentence_label.flatten().long()  # (B,): no operation when it already is
    counted = isinstance(num_items_in_batch, Mapping) and key in num_items_in_batch
    n_examples = None if counted else torch.full((), sentence_label.numel(), device=logits.device)
    loss_sum = F.cross_entropy(logits.float(), sentence_label, reduction="sum")
    loss = loss_sum / step_mean(num_items_in_batch, key, n_examples, n_examples if n_masked is None else n_masked)
    if not return_metrics:
        return loss, None
    return loss, (logits.argmax(-1) == sentence_label).sum() / sentence_label.ne(-100).sum()


def pretraining_losses(
    mlm_head: Callable,
    sequence_output,
    labels,
    target_positions,
    sentence_logits,
    sentence_label,
    key: str,
    num_items_in_batch,
    return_metrics: bool = True,
    return_logits: bool | None = None,
    gathered: bool = False,
) -> dict:
    """Every masked-LM model's step: masked LM through `mlm_head` (`(logits or None, summed loss, predicted ids)`: BERT's
    fuses the output layer with the loss) plus the sentence task of `key`, given labels; the output's fields.
    `gathered`: `sequence_output` is already the `(M, H)` states of the labelled tokens (`last_layer`)."""
    at, targets = labelled(labels, target_positions)
    states = sequence_output if gathered else sequence_output.flatten(0, 1).index_select(0, at)  # (M, H)
    # (M, V) logits (sparse prediction), or None where the loss is fused
    logits, mlm_sum, predicted_ids = mlm_head(states, targets, return_logits, return_metrics)
    # local counts only where used: without the Trainer's counts per objective, and for the accuracies
    counted = isinstance(num_items_in_batch, Mapping) and "labels" in num_items_in_batch
    counted = counted and (sentence_label is None or key in num_items_in_batch)
    n_tokens = None if counted and not return_metrics else labels.ne(-100).sum()
    out = {"prediction_logits": logits}
    out["loss"] = out["mlm_loss"] = mlm_sum / step_mean(num_items_in_batch, "labels", n_tokens, n_tokens)
    if return_metrics:
        out["mlm_accuracy"] = (predicted_ids == targets).sum() / n_tokens  # none: NaN, logs skip it
    if sentence_label is not None:
        loss, accuracy = sentence_loss(
            sentence_logits, sentence_label, key, n_tokens, num_items_in_batch, return_metrics
        )
        task = SENTENCE_TASKS[key]
        out[f"{task}_loss"], out[f"{task}_accuracy"] = loss, accuracy
        out["loss"] = out["loss"] + loss
    return out


class PreTrainingStep(LanguageModelLoss):
    """What every step mixin shares (masked LM here, replaced-token detection), written once so a model holding
    both steps (a composed cell) inherits each name from one place."""

    accepts_loss_kwargs = True  # each loss is normalised by its `num_items_in_batch` count (`outputs.step_mean`)
    # Listed under AutoModelForPreTraining, not AutoModelForMaskedLM: a masked-LM folder plain transformers derives
    # from ours inherits auto_map without our files, and AutoModelForMaskedLM must then pick the plain class.
    _auto_class = "AutoModelForPreTraining"
    takes_return_metrics = True  # `BertologyTrainer` asks for the metrics at the steps it logs only

    def post_init(self):
        super().post_init()
        # the last layer on the rows the LM loss reads (`last_layer`): the generator's, where there is one
        generator = getattr(self, "generator", None)
        install_subset(self.base_model if generator is None else generator.base_model)


class MaskedLMPreTraining(PreTrainingStep):
    """The step of every masked-LM model, mixed in before the family's `PreTrainedModel`.

    A model names its parts: `encode` (its encoder on the inputs), `predict` (its MLM head on `(…, H)` states;
    `mlm_head` when it fuses the loss; the loss itself is the hook `loss_function`), and where it has them `sentence_logits` (NSP / SOP on each example's first
    token) and `sbo` (SpanBERT's head). Its `forward` names the labels it takes (the Trainer reads them from the
    signature) and hands the batch to `pretraining_step`.
    """

    logits_name = "logits"  # the output field of the MLM logits, as the plain class names it
    sentence_key: str | None = None  # the sentence task's label: "next_sentence_label" or "sentence_order_label"
    sentence_logits_name: str | None = None  # its logits' output field

    def encode(self, input_ids, inputs: dict):
        return self.base_model(input_ids, return_dict=True, **inputs)

    def sentence_logits(self, outputs, cu_seq_lens: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def first_token_logits(self, first: torch.Tensor) -> torch.Tensor:
        """NSP / SOP `(B, 2)` logits from each example's first-token `(B, H)` states (its pooler, its classifier)."""
        raise NotImplementedError

    def pretraining_step(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_label: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        sbo_labels: torch.Tensor | None = None,
        sbo_boundaries: torch.Tensor | None = None,
        sbo_relative_positions: torch.Tensor | None = None,
        sbo_target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        return_metrics: bool = True,
        return_logits: bool | None = None,
        **inputs,
    ):
        r"""
        labels (`(batch, seq_len)`): original token ids at the positions to predict, -100 elsewhere.
        sentence_label (`(batch,)`): the sentence task's label (1: B is random / swapped).
        target_positions (`(M,)`): flat indices of the labelled tokens, computed on the host by our collators: the
            sparse head then gathers them with no host sync.
        sbo_labels, sbo_boundaries, sbo_relative_positions, sbo_target_positions: the span collator's SBO targets
            (`span_boundary.SpanTargets`).
        return_metrics: also compute the accuracies (`BertologyTrainer` passes `False` at steps it does not log:
            they change no gradient, and on a GPU each operation is a kernel launch).
        return_logits: BERT's fused head (`fused_cross_entropy.sparse_mlm_loss`): True always returns the logits.
        inputs: the encoder's (`token_type_ids`, `position_ids`, `inputs_embeds`, ...); `cu_seq_lens_q` makes a
            padding-free batch (`hf_bertology.collators.flatten`): one `(1, T)` row whose boundaries keep its
            examples apart, so the encoder gets no attention mask.
        """
        packed = is_packed(self.config, inputs)
        reads_first = self.sentence_key is not None and (self.sentence_logits_name or sentence_label is not None)
        # the last layer on the rows the losses read (`last_layer`): its output is then those rows, in `sizes` parts
        subset, sizes = {}, None
        if labels is not None:
            sbo = (sbo_labels, sbo_boundaries, sbo_target_positions)
            subset, sizes = masked_lm_rows(self.base_model, labels, target_positions, reads_first, sbo, inputs)
        outputs = self.encode(input_ids, {"attention_mask": None if packed else attention_mask, **inputs, **subset})
        states = outputs.last_hidden_state  # (B, T, H), or (1, M, H) with a subset
        out = {"hidden_states": outputs.hidden_states, "attentions": outputs.attentions}
        if subset:
            rows = states.flatten(0, 1)  # (M, H): a view, whose gradient is one too
            target_states, first_states, _ = rows.split(sizes)
            if sizes[2]:  # SBO reads its boundaries from the batch's layout
                states = scatter_rows(rows, subset[LAST_LAYER_KEY], labels.shape, repeats=True)
        sentence_logits = None
        if reads_first:
            cu_seq_lens = inputs.get("cu_seq_lens_q")
            sentence_logits = (  # (B, 2)
                self.first_token_logits(first_states) if subset else self.sentence_logits(outputs, cu_seq_lens)
            )
            if self.sentence_logits_name:
                out[self.sentence_logits_name] = sentence_logits
        if labels is None:
            out[self.logits_name] = self.predict(states)  # (B, T, V)
            losses = {}
            if sentence_label is not None:  # the sentence task alone
                task = SENTENCE_TASKS[self.sentence_key]
                loss, accuracy = sentence_loss(
                    sentence_logits, sentence_label, self.sentence_key, None, num_items_in_batch, return_metrics
                )
                losses = {"loss": loss, f"{task}_loss": loss, f"{task}_accuracy": accuracy}
        else:
            losses = pretraining_losses(
                self.mlm_head,
                target_states if subset else states,
                labels,
                target_positions,
                sentence_logits,
                sentence_label,
                self.sentence_key,
                num_items_in_batch,
                return_metrics,
                return_logits,
                gathered=bool(subset),
            )
            out[self.logits_name] = losses.pop("prediction_logits")
        if sbo_labels is not None:
            span = SpanTargets(sbo_labels, sbo_boundaries, sbo_relative_positions, sbo_target_positions)
            n_masked = None if labels is None else labels.ne(-100).sum()
            out["sbo_logits"], losses["sbo_loss"], losses["sbo_accuracy"] = span_boundary_loss(
                self.sbo, states, span, n_masked, num_items_in_batch, self.lm_loss_sum
            )
            weighted = self.config.sbo_loss_weight * losses["sbo_loss"]
            losses["loss"] = losses["loss"] + weighted if "loss" in losses else weighted
        return BertologyForPreTrainingOutput(**out, **losses)
