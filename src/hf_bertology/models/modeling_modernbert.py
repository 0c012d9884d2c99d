"""ModernBERT pretraining: masked LM with sparse prediction (Warner et al., 2024; AnswerDotAI/ModernBERT).

Parameter names are exactly those of `transformers.ModernBertForMaskedLM` (`model.*`, `head.*`, `decoder.*` with
the decoder tied to `model.embeddings.tok_embeddings`), so `AutoModelForMaskedLM` loads our checkpoints with plain
`transformers` and gives the same logits. As the official `sparse_prediction`, the head and decoder run only on the
labelled positions; unlike `ModernBertForMaskedLM`'s mean, the loss is a sum divided by the Trainer's
`num_items_in_batch["labels"]`, so gradient accumulation and DDP give the gradients of one large batch.

Two things the official FlexBERT model does that transformers' ModernBERT needs told (docs/recipes/modernbert.md):
- documents packed in one row attend and count RoPE positions only inside themselves (official `padding: unpadded`
  with `cu_seqlens`, `src/bert_layers/model.py`): a padding-free batch brings `cu_seq_lens_q` per document and
  `position_ids` restarting at each, and the attention implementation reads them (`sdpa_packed`,
  `flash_attention_2`); the model passes no `attention_mask` for it. A padded batch of such rows (`--padding_free
  false`, `--streaming`) brings `document_starts` instead, from which the model builds per-document masks and
  positions (`document_masks`).
- dropout on the attention output only (`attn_out_dropout_prob: 0.1`, `src/bert_layers/attention.py:301`):
  `config.attention_output_dropout` sets each layer's `attn.out_drop`.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without
hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ModernBertConfig, ModernBertForMaskedLM
from transformers.modeling_outputs import ModelOutput

from .configuration_modernbert import BertologyModernBertConfig

# Attention implementations that read `cu_seq_lens_q` (hf_bertology.training.attention; repeated: remote-code rule).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


# Copied from hf_bertology.models.modeling_roberta.BertologyRobertaForPreTrainingOutput with Roberta->ModernBert
@dataclass
class BertologyModernBertForPreTrainingOutput(ModelOutput):
    """
    loss: equals `mlm_loss`.
    logits: `(num_masked, vocab_size)` at the labelled positions when `labels` are given (sparse), else
        `(batch, seq_len, vocab_size)`.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class BertologyModernBertForPreTraining(ModernBertForMaskedLM):
    """`ModernBertForMaskedLM`'s modules (and tied decoder), with a loss normalised by the step's masked count."""

    # transformers' own config class: `AutoModelForPreTraining` + remote code builds a plain `ModernBertConfig` (no
    # AutoConfig in auto_map) and, having no pretraining class for it, registers ours under it, which it allows only
    # when the names match (auto_factory.py `register`); `__init__` turns it into ours.
    config_class = ModernBertConfig
    # Listed under AutoModelForPreTraining, not AutoModelForMaskedLM: a masked-LM folder plain transformers derives
    # from ours inherits auto_map without this file, and AutoModelForMaskedLM must then pick the plain class.
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # the loss is normalised by `num_items_in_batch`

    def __init__(self, config: BertologyModernBertConfig):
        if not isinstance(config, BertologyModernBertConfig):
            config = BertologyModernBertConfig(**config.to_dict())  # plain config under trust_remote_code
        super().__init__(config)
        rate = getattr(config, "attention_output_dropout", None)
        if rate is not None:  # the official attn_out_dropout_prob, apart from the attention probabilities' dropout
            for layer in self.model.layers:
                layer.attn.out_drop = nn.Dropout(rate) if rate > 0 else nn.Identity()

    def document_masks(self, document_starts: torch.Tensor, attention_mask: torch.Tensor | None):
        """Padded rows holding several documents (`document_starts` 1 at each first token): the additive masks of
        the global and local layers (a token sees only its own document's real tokens, within the window on local
        layers) and the positions restarting at every document. Padding-free batches do this with `cu_seq_lens_q`."""
        length = document_starts.shape[1]
        real = torch.ones_like(document_starts, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        document = document_starts.long().cumsum(1)  # (B, L)
        keep = (document[:, :, None] == document[:, None, :]) & real[:, None, :]  # (B, L, L)
        column = torch.arange(length, device=document_starts.device)
        near = (column[:, None] - column[None, :]).abs() <= self.config.sliding_window  # transformers' local band
        start = torch.cummax(column * document_starts.long(), dim=1).values  # (B, L) each token's document start
        low = torch.finfo(self.dtype).min

        def additive(allowed):
            return torch.zeros(allowed.shape, dtype=self.dtype, device=allowed.device).masked_fill(~allowed, low)

        masks = {"full_attention": additive(keep)[:, None], "sliding_attention": additive(keep & near)[:, None]}
        return masks, column[None, :] - start

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        **kwargs,
    ) -> BertologyModernBertForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original token ids at the positions to predict, -100 elsewhere.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        """
        kwargs.pop("token_type_ids", None)  # ModernBERT has no token types; BERT-style tokenizers still send them
        document_starts = kwargs.pop("document_starts", None)
        if kwargs.get("cu_seq_lens_q") is not None:  # padding-free: the attention keeps every document apart
            if self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
                raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
            attention_mask = None
        elif document_starts is not None:  # a padded batch of packed rows: the same separation, by masks
            attention_mask, position_ids = self.document_masks(document_starts, attention_mask)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state
        loss = mlm_accuracy = None
        if labels is None:
            logits = self.decoder(self.head(sequence_output))  # (B, T, V)
        else:
            predicted = labels.ne(-100)  # (B, T)
            at = predicted.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
            targets = labels.flatten().index_select(0, at)
            states = sequence_output.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
            logits = self.decoder(self.head(states))  # (M, V): sparse prediction
            if isinstance(num_items_in_batch, Mapping):
                num_items_in_batch = num_items_in_batch.get("labels")
            denominator = predicted.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            loss = F.cross_entropy(logits.float(), targets, reduction="sum") / denominator
            mlm_accuracy = (logits.argmax(-1) == targets).float().mean()
        return BertologyModernBertForPreTrainingOutput(
            loss=loss,
            mlm_loss=loss,
            mlm_accuracy=mlm_accuracy,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
