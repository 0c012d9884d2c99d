"""RoBERTa pretraining: masked LM only, with sparse prediction.

Parameter names are exactly those of `transformers.RobertaForMaskedLM` (`roberta.*`, `lm_head.*`), so
`AutoModelForMaskedLM` loads our checkpoints with plain `transformers`. The LM head runs only on the labelled
positions (fairseq's `RobertaLMHead` does the same with `masked_tokens`), and the loss is a sum divided by the
Trainer's `num_items_in_batch` so gradient accumulation and DDP give the gradients of one large batch.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without
hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import RobertaModel, RobertaPreTrainedModel
from transformers.modeling_outputs import ModelOutput
from transformers.models.roberta.modeling_roberta import RobertaLMHead

from .configuration_roberta import BertologyRobertaConfig

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


@dataclass
class BertologyRobertaForPreTrainingOutput(ModelOutput):
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


class BertologyRobertaForPreTraining(RobertaPreTrainedModel):
    config_class = BertologyRobertaConfig
    # Listed under AutoModelForPreTraining, not AutoModelForMaskedLM: a masked-LM folder plain transformers derives
    # from ours inherits auto_map without this file, and AutoModelForMaskedLM must then pick the plain class.
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # the loss is normalised by `num_items_in_batch`
    # The saved folder also holds RobertaModel's pooler (for RobertaForMultipleChoice); pretraining never uses it.
    _keys_to_ignore_on_load_unexpected = [r"^roberta\.pooler\."]
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: BertologyRobertaConfig):
        super().__init__(config)
        self.roberta = RobertaModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        **kwargs,
    ) -> BertologyRobertaForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original token ids at the positions to predict, -100 elsewhere.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`), `position_ids` from 0.
        """
        packed = kwargs.get("cu_seq_lens_q") is not None
        if packed:
            if self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
                raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
            position_ids = position_ids + self.config.pad_token_id + 1  # RoBERTa's positions start after padding
        # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.forward[backbone_call] with self.bert->self.roberta
        outputs = self.roberta(
            input_ids,
            attention_mask=None if packed else attention_mask,  # packed: the boundaries keep examples apart
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        # End copied block
        sequence_output = outputs.last_hidden_state
        loss = mlm_accuracy = None
        if labels is None:
            logits = self.lm_head(sequence_output)  # (B, T, V)
        else:
            predicted = labels.ne(-100)  # (B, T)
            at = predicted.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
            targets = labels.flatten().index_select(0, at)
            states = sequence_output.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
            logits = self.lm_head(states)  # (M, V): sparse prediction
            if isinstance(num_items_in_batch, Mapping):
                num_items_in_batch = num_items_in_batch.get("labels")
            denominator = predicted.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            loss = F.cross_entropy(logits.float(), targets, reduction="sum") / denominator
            mlm_accuracy = (logits.argmax(-1) == targets).sum() / targets.ne(-100).sum()

        return BertologyRobertaForPreTrainingOutput(
            loss=loss,
            mlm_loss=loss,
            mlm_accuracy=mlm_accuracy,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
