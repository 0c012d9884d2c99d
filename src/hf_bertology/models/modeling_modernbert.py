"""ModernBERT pretraining: masked LM with sparse prediction (Warner et al., 2024; AnswerDotAI/ModernBERT).

Parameter names are exactly `transformers.ModernBertForMaskedLM`'s (`model.*`, `head.*`, `decoder.*`), so plain
`AutoModelForMaskedLM` loads our checkpoints. The loss is `masked_lm`'s. What the official model does that
transformers' needs told: documents packed in one row kept apart (`cu_seq_lens_q`, or `document_starts` in a padded
batch), and dropout on the attention output only. docs/recipes/modernbert.md.
"""

import torch
from torch import nn
from transformers import ModernBertConfig, ModernBertForMaskedLM

from .configuration_modernbert import BertologyModernBertConfig
from .masked_lm import MLM_HEADS, MaskedLM
from .step import PreTrainingModel, pretraining_step


class BertologyModernBertForPreTraining(PreTrainingModel, ModernBertForMaskedLM):
    """`ModernBertForMaskedLM`'s modules (and tied decoder), with a loss normalised by the step's masked count."""

    # transformers' own config class: `AutoModelForPreTraining` + remote code builds a plain `ModernBertConfig` (no
    # AutoConfig in auto_map) and, having no pretraining class for it, registers ours under it, which it allows only
    # when the names match (auto_factory.py `register`); `__init__` turns it into ours.
    config_class = ModernBertConfig

    def __init__(self, config: BertologyModernBertConfig):
        if not isinstance(config, BertologyModernBertConfig):
            config = BertologyModernBertConfig(**config.to_dict())  # plain config under trust_remote_code
        super().__init__(config)
        self.objectives = (MaskedLM(),)
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

    def encode(self, input_ids, inputs):
        inputs = dict(inputs)
        document_starts = inputs.pop("document_starts", None)
        if document_starts is not None and inputs.get("cu_seq_lens_q") is None:  # packed rows, padded: by masks
            inputs["attention_mask"], inputs["position_ids"] = self.document_masks(
                document_starts, inputs["attention_mask"]
            )
        return self.model(input_ids=input_ids, **inputs)

    def predict(self, states):
        return MLM_HEADS["modernbert"](self, states)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, **inputs):
        """Masked LM with sparse prediction (ModernBERT §2.2); `step.pretraining_step`."""
        return pretraining_step(self, input_ids, attention_mask, {"labels": labels}, **inputs)
