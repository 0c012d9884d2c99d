"""ModernBERT pretraining: masked LM with sparse prediction (Warner et al., 2024; AnswerDotAI/ModernBERT).

Parameter names are exactly those of `transformers.ModernBertForMaskedLM` (`model.*`, `head.*`, `decoder.*` with
the decoder tied to `model.embeddings.tok_embeddings`), so `AutoModelForMaskedLM` loads our checkpoints with plain
`transformers` and gives the same logits. As the official `sparse_prediction`, the head and decoder run only on the
labelled positions; unlike `ModernBertForMaskedLM`'s mean, the loss is a sum divided by the Trainer's
`num_items_in_batch["labels"]`, so gradient accumulation and DDP give the gradients of one large batch.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without
hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import ModernBertForMaskedLM
from transformers.modeling_outputs import ModelOutput

from .configuration_modernbert import BertologyModernBertConfig


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

    config_class = BertologyModernBertConfig
    _auto_class = "AutoModelForMaskedLM"
    accepts_loss_kwargs = True  # the loss is normalised by `num_items_in_batch`

    def __init__(self, config: BertologyModernBertConfig):
        if not isinstance(config, BertologyModernBertConfig):
            config = BertologyModernBertConfig(**config.to_dict())  # plain config under trust_remote_code
        super().__init__(config)

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
