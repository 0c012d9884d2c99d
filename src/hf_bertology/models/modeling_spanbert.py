"""SpanBERT pretraining: masked LM + span boundary objective (SBO), sparse, no NSP (Joshi et al., 2020).

Parameter names: `bert.*` and `cls.predictions.*` are exactly those of `transformers.BertForMaskedLM`, so plain
`AutoModelForMaskedLM` / `AutoModel` load our checkpoints; the SBO head lives under `sbo.*` and follows
facebookresearch/SpanBERT `pretraining/fairseq/models/pair_bert.py: BertPairTargetPredictionHead` (names
included): each target token x_i of a span (s..e) is predicted from `[h_{s-1}; h_{e+1}; p_{i-s}]` through
`MLPWithLayerNorm` (Linear(2H+P→H), GELU, LayerNorm, Linear(H→H), GELU, LayerNorm) and the tied word embeddings plus
its own bias. The boundary states come from the last layer (`pair_target_layer=-1`).

The collator (`DataCollatorForSpanMasking` with `sbo_max_targets`) gives, per token, `sbo_labels` (-100 where no
SBO target), `sbo_boundaries` `(B, L, 2)` = `(s-1, e+1)` and `sbo_relative_positions` = `i - s`. Both heads run only
on their targets (sparse prediction). Loss = MLM_sum / n_mlm + sbo_loss_weight * SBO_sum / n_sbo
(`criterions/spanbert_loss.py`; it divides SBO by n_sbo + 1, a smoothing we drop), each divided by the Trainer's
per-objective counts when given, so gradient accumulation and DDP equal one large batch.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without
hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertModel, BertPreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from .configuration_spanbert import BertologySpanBertConfig

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


@dataclass
class BertologySpanBertForPreTrainingOutput(ModelOutput):
    """
    loss: `mlm_loss + sbo_loss_weight * sbo_loss`.
    logits: `(num_masked, vocab_size)` at the labelled positions when `labels` are given (sparse), else
        `(batch, seq_len, vocab_size)`.
    sbo_logits: `(num_sbo_targets, vocab_size)` when SBO targets are given.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    sbo_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    sbo_accuracy: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    sbo_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def _denominator(num_items_in_batch, key: str, local_count: torch.Tensor):
    """Count that turns a summed loss into the mean over the whole optimizer step (see modeling_bert.py).

    `BertologyTrainer` passes a dict of counts per label key; the stock Trainer one int (masked tokens), which only
    fits `labels`; without counts the local count gives the usual mean.
    """
    if isinstance(num_items_in_batch, Mapping):
        num_items_in_batch = num_items_in_batch.get(key)
    elif key != "labels":
        num_items_in_batch = None
    return local_count.clamp(min=1) if num_items_in_batch is None else num_items_in_batch


class MLPWithLayerNorm(nn.Module):
    """SpanBERT's two-layer MLP: Linear, activation, LayerNorm, twice."""

    def __init__(self, config, input_size: int):
        super().__init__()
        self.linear1 = nn.Linear(input_size, config.hidden_size)
        self.non_lin1 = ACT2FN[config.hidden_act]
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.linear2 = nn.Linear(config.hidden_size, config.hidden_size)
        self.non_lin2 = ACT2FN[config.hidden_act]
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_norm1(self.non_lin1(self.linear1(hidden)))
        return self.layer_norm2(self.non_lin2(self.linear2(hidden)))


class SpanBoundaryHead(nn.Module):
    """`BertPairTargetPredictionHead`: predict a span token from the two boundary states and its position."""

    def __init__(self, config):
        super().__init__()
        self.position_embeddings = nn.Embedding(config.sbo_max_targets, config.sbo_position_embedding_size)
        self.mlp_layer_norm = MLPWithLayerNorm(config, 2 * config.hidden_size + config.sbo_position_embedding_size)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # tied to the word embeddings
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        """`left`, `right`: `(M, H)` boundary states; `relative_positions`: `(M,)` -> `(M, V)` logits."""
        hidden = torch.cat([left, right, self.position_embeddings(relative_positions)], -1)  # (M, 2H + P)
        return self.decoder(self.mlp_layer_norm(hidden)) + self.bias


class BertologySpanBertForPreTraining(BertPreTrainedModel):
    config_class = BertologySpanBertConfig
    # Listed under AutoModelForPreTraining, not AutoModelForMaskedLM: a masked-LM folder plain transformers derives
    # from ours inherits auto_map without this file, and AutoModelForMaskedLM must then pick the plain class.
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # the losses are normalised by `num_items_in_batch`
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
        self.post_init()
        # SpanBERT has no NSP, so no loss reaches the pooler. It is kept (frozen at its initialisation, like the
        # released SpanBERT checkpoints' untrained pooler) so that plain `AutoModel` loads with nothing missing;
        # frozen, it is no "unused parameter" under DDP either.
        self.bert.pooler.requires_grad_(False)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SpanBoundaryHead):
            init.zeros_(module.bias)  # transformers' `init` skips weights loaded from a checkpoint

    # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.get_output_embeddings
    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.set_output_embeddings
    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def resize_token_embeddings(self, *args, **kwargs):
        """transformers' resize; the SBO head's decoder is tied to the word table (resized with it), its own output
        bias is grown here too (new words get 0, its initial value)."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        sbo = getattr(self, "sbo", None)
        if sbo is not None and sbo.bias.shape[0] != embeddings.weight.shape[0]:
            bias = sbo.bias.new_zeros(embeddings.weight.shape[0])
            keep = min(len(bias), len(sbo.bias))
            bias[:keep] = sbo.bias.detach()[:keep]
            sbo.bias = nn.Parameter(bias)
        return embeddings

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        sbo_labels: torch.Tensor | None = None,
        sbo_boundaries: torch.Tensor | None = None,
        sbo_relative_positions: torch.Tensor | None = None,
        sbo_target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        **kwargs,
    ) -> BertologySpanBertForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original token ids at the masked positions, -100 elsewhere.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        sbo_labels (`(batch, seq_len)`): original ids of the SBO targets, -100 elsewhere.
        sbo_boundaries (`(batch, seq_len, 2)`): positions `(s-1, e+1)` of each target's span boundaries.
        sbo_relative_positions (`(batch, seq_len)`): offset `i - s` of each target inside its span.
        sbo_target_positions (`(N,)`): flat indices of the SBO targets, as `target_positions` for `labels`.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`); `sbo_boundaries` are
            then positions in the flat row.
        """
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        sequence_output = outputs.last_hidden_state  # (B, T, H)
        loss = mlm_loss = sbo_loss = mlm_accuracy = sbo_accuracy = sbo_logits = None
        if labels is None:
            logits = self.cls(sequence_output)  # (B, T, V)
        else:
            logits, mlm_loss, mlm_accuracy = self._masked_lm_loss(
                sequence_output, labels, target_positions, num_items_in_batch
            )
            loss = mlm_loss
        if sbo_labels is not None:
            sbo_logits, sbo_loss, sbo_accuracy = self._span_boundary_loss(
                sequence_output,
                sbo_labels,
                sbo_boundaries,
                sbo_relative_positions,
                sbo_target_positions,
                num_items_in_batch,
            )
            weighted = self.config.sbo_loss_weight * sbo_loss
            loss = weighted if loss is None else loss + weighted

        return BertologySpanBertForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            sbo_loss=sbo_loss,
            mlm_accuracy=mlm_accuracy,
            sbo_accuracy=sbo_accuracy,
            logits=logits,
            sbo_logits=sbo_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def _encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        """The BERT encoder's outputs (BERT's; SpanBERT §3.3 trains on one segment, no NSP); a padding-free batch runs
        as one flat row whose boundaries (`cu_seq_lens_q`) keep its examples apart."""
        # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.forward[packed_backbone]
        packed = kwargs.get("cu_seq_lens_q") is not None
        if packed and self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
            raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
        outputs = self.bert(
            input_ids,
            attention_mask=None if packed else attention_mask,  # packed: the boundaries keep examples apart
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        # End copied block
        return outputs

    def _masked_lm_loss(self, sequence_output, labels, target_positions, num_items_in_batch):
        """Masked LM (BERT's objective on the tokens of the masked spans, SpanBERT §3.1) at the labelled positions only (sparse
        prediction): `(M, V)` logits, the summed cross-entropy over the step's masked-token count, and the
        accuracy."""
        predicted = labels.ne(-100)  # (B, T)
        at = predicted.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.flatten().index_select(0, at)
        states = sequence_output.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
        logits = self.cls(states)  # (M, V): sparse prediction
        mlm_sum = F.cross_entropy(logits.float(), targets, reduction="sum")
        mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", predicted.sum())
        mlm_accuracy = (logits.argmax(-1) == targets).sum() / targets.ne(-100).sum()
        return logits, mlm_loss, mlm_accuracy

    def _span_boundary_loss(
        self,
        sequence_output,
        sbo_labels,
        sbo_boundaries,
        sbo_relative_positions,
        sbo_target_positions,
        num_items_in_batch,
    ):
        """The span boundary objective (SpanBERT §3.2): each token x_i of a span (s..e) predicted from the boundary
        states h_{s-1}, h_{e+1} and its position p_{i-s} (`sbo`), on the SBO targets only: `(N, V)` logits, the
        summed cross-entropy over the step's SBO-target count, and the accuracy."""
        if sbo_boundaries is None or sbo_relative_positions is None:
            raise ValueError("sbo_labels need sbo_boundaries and sbo_relative_positions (the span collator's)")
        has_target = sbo_labels.ne(-100)  # (B, T)
        at = has_target.flatten().nonzero().squeeze(1) if sbo_target_positions is None else sbo_target_positions
        sbo_targets = sbo_labels.flatten().index_select(0, at)  # (N,)
        width = sbo_labels.shape[1]
        boundaries = sbo_boundaries.flatten(0, 1).index_select(0, at) + (at // width * width)[:, None]  # (N, 2)
        # the boundary states (s-1, e+1) of every target, flat positions in the (B * T, H) states
        ends = sequence_output.flatten(0, 1).index_select(0, boundaries.flatten()).unflatten(0, (-1, 2))
        sbo_logits = self.sbo(ends[:, 0], ends[:, 1], sbo_relative_positions.flatten().index_select(0, at))
        sbo_sum = F.cross_entropy(sbo_logits.float(), sbo_targets, reduction="sum")
        n_sbo = has_target.sum()
        sbo_loss = sbo_sum / _denominator(num_items_in_batch, "sbo_labels", n_sbo)
        sbo_accuracy = (sbo_logits.argmax(-1) == sbo_targets).sum() / n_sbo
        return sbo_logits, sbo_loss, sbo_accuracy
