"""XLNet pretraining: permutation language modelling with two-stream attention and partial prediction.

Parameter names are exactly those of `transformers.XLNetLMHeadModel` (`transformer.*`, `lm_loss.*`, with
`lm_loss.weight` tied to `transformer.word_embedding.weight`), so `AutoModelForPreTraining` /
`AutoModelForCausalLM` / `AutoModel` load our checkpoints with plain `transformers`. The backbone is
`transformers.XLNetModel` unchanged: it runs the content and query streams (`perm_mask`, `target_mapping`),
relative positions and segments, and caches `mems`. We add what pretraining needs (zihangdai/xlnet
`function_builder.two_stream_loss`): the LM head runs only on the real targets, the loss is a sum over the step's
count of targets, and `mems` are returned for the Trainer to feed into the next segment. docs/recipes/xlnet.md.
"""

from collections.abc import Mapping

import torch
from torch import nn
from transformers import XLNetModel, XLNetPreTrainedModel

from .configuration_xlnet import BertologyXLNetConfig
from .masked_lm import MaskedLM
from .outputs import BertologyForPreTrainingOutput
from .step import PreTrainingModel, pretraining_step


class BertologyXLNetForPreTraining(PreTrainingModel, XLNetPreTrainedModel):
    config_class = BertologyXLNetConfig
    takes_return_metrics = False  # the accuracy at every step (`XLNetTrainer`)
    _tied_weights_keys = {"lm_loss.weight": "transformer.word_embedding.weight"}  # as XLNetLMHeadModel

    def __init__(self, config: BertologyXLNetConfig):
        super().__init__(config)
        self.transformer = XLNetModel(config)
        self.lm_loss = nn.Linear(config.d_model, config.vocab_size, bias=True)
        # the permutation LM is masked LM's loss on the query stream at the targets (`target_mapping`'s rows)
        self.objectives = (MaskedLM("plm"),)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_loss

    def set_output_embeddings(self, new_embeddings):
        self.lm_loss = new_embeddings

    def predict(self, states):
        return self.lm_loss(states)  # XLNetLMHeadModel's name for its output layer

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mems: tuple[torch.Tensor, ...] | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_mems: bool | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BertologyForPreTrainingOutput:
        r"""
        perm_mask (`(batch, seq_len, seq_len)`): 1 where position i may NOT attend to j (XLNetModel's convention).
        target_mapping (`(batch, num_predict, seq_len)`): one-hot row per target, zero rows for padding.
        labels (`(batch, num_predict)`): the target tokens in `target_mapping`'s row order, -100 in padded rows.
        target_positions (`(M,)`): flat indices of the labelled tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the sparse head then gathers them with no host sync.
        mems: the previous segment's memory (from this model's `mems` output), or None at a stream start.
        use_mems: return the memory for the next segment; default: in training when `config.mem_len > 0`, and
            whenever `mems` are given.
        """
        if use_mems is None:
            use_mems = mems is not None or (self.training and bool(self.config.mem_len))
        inputs = dict(mems=mems, perm_mask=perm_mask, target_mapping=target_mapping, token_type_ids=token_type_ids,
                      inputs_embeds=inputs_embeds, use_mems=use_mems, output_attentions=output_attentions,
                      output_hidden_states=output_hidden_states, target_positions=target_positions)  # fmt: skip
        # (B, P, d): the query stream at the targets (the content stream without), then the real targets only
        return pretraining_step(
            self, input_ids, attention_mask, {"labels": labels}, num_items_in_batch, **inputs, **kwargs
        )
