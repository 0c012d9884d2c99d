"""One paper's objective on another paper's encoder: masked LM (+ NSP / SOP, + SBO) or replaced-token detection.

The backbone is always the family's own `transformers` model, built from the config, and every parameter keeps the
name plain `transformers` gives it, so the backbone's own classes load our checkpoint with nothing missing:

- **Masked-LM objectives** (BERT, RoBERTa, SpanBERT, ALBERT, ModernBERT masking): the backbone at its usual prefix
  (`bert`, `roberta`, `albert`, `electra`, `deberta`, `model`) and the head modules of the family's `*ForMaskedLM`
  (`cls`, `lm_head`, `predictions`, `generator_predictions` + `generator_lm_head`, `cls`/`lm_predictions`,
  `head` + `decoder`), which run only on the labelled positions (sparse prediction). Plain `AutoModelForMaskedLM`
  gives the same logits. The sentence task (NSP or SOP) reads each example's first token through the backbone's
  pooler where the family has one (BERT's NSP head exactly: pooler + 2-way classifier, `sentence_classifier`), else
  through our `sentence_pooler`; SpanBERT's SBO head (`sbo`, as `models/spanbert`) predicts span tokens from the
  boundary states and projects to the embedding width, so it also ties to ALBERT's and ELECTRA's smaller tables.
- **RTD objectives** (ELECTRA, DeBERTa-v3): the discriminator is the backbone + the objective's head: ELECTRA's
  (`discriminator_predictions.dense` / `.dense_prediction`) or DeBERTa-v3's `mask_predictions` (LayerNorm(h_[CLS] +
  h_i) first, microsoft/DeBERTa `replaced_token_detection_model.py:30-49`); the generator the family's
  `*ForMaskedLM` at `generator.*`, sized by `generator_hidden_fraction` / `generator_layers_fraction`. DeBERTa-v3's
  generator decodes through EMD only where the input carries no absolute positions (`masked_language_model.py:60,
  73-74`: with `position_biased_input` the official decoder is the last layer): so on BERT, RoBERTa, ALBERT and
  ELECTRA, whose inputs add a position table, the family's MLM head on the last layer is the official decoder;
  ModernBERT (rotary positions, no table) has no EMD here (its layers take no separate query). Embedding sharing:
  `"es"` ties every embedding table of equal shape (ELECTRA: token, position and type tables), `"gdes"` feeds the
  discriminator sg(E_G) + Δ for the word table and sg(P_G) + Δ_P for the absolute position table (DeBERTa-v3 §3.3;
  `rtd_task.py:56-64,113-122` shares both) and writes E_G + Δ, P_G + Δ_P into its tables in every state dict,
  `"nes"` shares nothing. Plain `AutoModel` / `AutoModelForSequenceClassification` load the discriminator.

An unused pooler (no sentence task) is kept and frozen, like the released SpanBERT checkpoints', so plain `AutoModel`
loads with nothing missing. Padding-free batches (`cu_seq_lens_q`) work on the backbones that call transformers'
`AttentionInterface` (BERT, RoBERTa, ALBERT, ELECTRA), with the same rules as the paper variants. Losses are sums
divided by the Trainer's per-objective counts (see `models/electra`), so accumulation and DDP equal one large batch.

The code, by concern (a checkpoint's `auto_map` names the classes at the end of this file; `save_pretrained` copies
every module of this folder that it imports, so `trust_remote_code=True` still needs no hf_bertology):
`configuration_composed` (the configs), `heads_composed` (the heads, GDES, the embedding-table names),
`outputs_composed` (the output and the per-objective counts), `masked_lm_composed` (MLM, NSP/SOP, SBO),
`rtd_composed` (the generator's config, embedding sharing, sampling and the RTD step), and here the model: its
construction and a forward that hands the batch to its objective.

The heads, the sampling and the GDES module repeat a few lines of `models/spanbert`, `models/electra` and
`models/deberta_v3`: a modeling file may import only torch, transformers and its own folder, so that a checkpoint
loads with `trust_remote_code=True` on a machine without hf_bertology.
"""

from collections.abc import Mapping

import torch
from torch import nn
from transformers import (
    AlbertForMaskedLM,
    AlbertModel,
    AlbertPreTrainedModel,
    BertForMaskedLM,
    BertModel,
    BertPreTrainedModel,
    DebertaV2ForMaskedLM,
    DebertaV2Model,
    DebertaV2PreTrainedModel,
    ElectraForMaskedLM,
    ElectraModel,
    ElectraPreTrainedModel,
    ModernBertForMaskedLM,
    ModernBertModel,
    ModernBertPreTrainedModel,
    RobertaForMaskedLM,
    RobertaModel,
    RobertaPreTrainedModel,
)
from transformers import initialization as init

from .configuration_composed import (
    BertologyComposedAlbertConfig,
    BertologyComposedBertConfig,
    BertologyComposedDebertaV2Config,
    BertologyComposedElectraConfig,
    BertologyComposedModernBertConfig,
    BertologyComposedRobertaConfig,
)
from .heads_composed import (
    MLM_HEADS,
    POSITION_TABLE,
    WORD_TABLES,
    ClsReplacedTokenDetectionHead,
    DiscriminatorHead,
    GradientDisentangledEmbedding,
    SpanBoundaryHead,
    _get,
    _has,
)
from .masked_lm_composed import MaskedObjectives
from .outputs_composed import BertologyComposedForPreTrainingOutput
from .rtd_composed import ReplacedTokenDetection, generator_config, gumbel_sample, keyed_uniform

__all__ = [  # the names this module had before it was split by concern
    "COMPOSED_MODELS",
    "FAMILIES",
    "MLM_HEADS",
    "PACKED_IMPLEMENTATIONS",
    "BertologyComposedAlbertForPreTraining",
    "BertologyComposedBertForPreTraining",
    "BertologyComposedDebertaV2ForPreTraining",
    "BertologyComposedElectraForPreTraining",
    "BertologyComposedForPreTrainingOutput",
    "BertologyComposedModernBertForPreTraining",
    "BertologyComposedRobertaForPreTraining",
    "ClsReplacedTokenDetectionHead",
    "ComposedForPreTraining",
    "DiscriminatorHead",
    "GradientDisentangledEmbedding",
    "SpanBoundaryHead",
    "generator_config",
    "gumbel_sample",
    "keyed_uniform",
]

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")

# model_type -> (backbone class, masked-LM class)
FAMILIES = {
    "bert": (BertModel, BertForMaskedLM),
    "roberta": (RobertaModel, RobertaForMaskedLM),
    "albert": (AlbertModel, AlbertForMaskedLM),
    "electra": (ElectraModel, ElectraForMaskedLM),
    "deberta-v2": (DebertaV2Model, DebertaV2ForMaskedLM),
    "modernbert": (ModernBertModel, ModernBertForMaskedLM),
}


class ComposedForPreTraining(MaskedObjectives, ReplacedTokenDetection):
    """The composed pretraining model; one subclass per family below (each subclasses that family's
    `PreTrainedModel`, so weights are initialised as the family's)."""

    accepts_loss_kwargs = True  # each loss is normalised by its `num_items_in_batch` count
    # `trust_remote_code=True` loads this class through AutoModelForPreTraining (one class-level entry point for every
    # objective; plain AutoModelForMaskedLM / AutoModel load transformers' own classes).
    _auto_class = "AutoModelForPreTraining"

    def __init__(self, config):
        if not isinstance(config, self.config_class):
            # e.g. the family's plain config from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = self.config_class(**config.to_dict())
        super().__init__(config)
        backbone_class, masked_lm_class = FAMILIES[config.model_type]
        if config.sentence_task is not None and getattr(config, "type_vocab_size", 0) < 2:
            raise ValueError(f"a sentence task needs two token types; {config.model_type} has none")
        prefix = self.base_model_prefix
        setattr(self, prefix, backbone_class(config))  # with the family's pooler, if it has one
        word_table = next(name for name in WORD_TABLES if _has(self.base_model, name))
        self.rtd = config.replaced_token_detection
        tied: dict[str, str] = {}
        if self.rtd:
            if config.objective == "deberta-v3":
                self.mask_predictions = ClsReplacedTokenDetectionHead(config)
            else:
                self.discriminator_predictions = DiscriminatorHead(config)
            self.generator = masked_lm_class(generator_config(config))
            tied = self._share_embeddings(config, masked_lm_class, prefix, word_table)
        else:
            masked_lm = masked_lm_class(config)
            for name, module in masked_lm.named_children():
                if name != prefix:
                    self.add_module(name, module)  # the family's MLM head, under its own name
            if hasattr(masked_lm, "legacy"):  # DeBERTa-v2's head layout, read by its output-embedding accessors
                self.legacy = masked_lm.legacy
            tied.update(masked_lm_class._tied_weights_keys or {})
            if config.span_boundary_objective:
                table = _get(self.base_model, word_table)
                self.sbo = SpanBoundaryHead(config, table.shape[1])
                tied["sbo.decoder.weight"] = f"{prefix}.{word_table}"
            if config.sentence_task is not None:
                if getattr(self.base_model, "pooler", None) is None:
                    self.sentence_pooler = nn.Linear(config.hidden_size, config.hidden_size)
                self.sentence_classifier = nn.Linear(config.hidden_size, 2)
        self._tied_weights_keys = tied
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared tables
        self._freeze_unused()

    def _freeze_unused(self) -> None:
        """Freeze what no loss trains (so DDP waits for no gradient): an unused pooler, and under GDES the
        discriminator's word table, a slot for E_G + Δ that only saving fills."""
        pooler = getattr(self.base_model, "pooler", None)
        if pooler is not None and (self.rtd or self.config.sentence_task is None):
            pooler.requires_grad_(False)
        if self.rtd and self.config.embedding_sharing == "gdes":
            _get(self.base_model, self._gdes_tables[1]).requires_grad_(False)
            if hasattr(self, "gdes_positions"):
                _get(self.base_model, POSITION_TABLE).requires_grad_(False)

    def get_output_embeddings(self):
        """The MLM decoder, found as the family's `*ForMaskedLM` finds it (its head modules are ours under the same
        names), so `resize_token_embeddings` resizes it with the word table; None for replaced-token detection (two
        networks: resize the exported `generator/` and `discriminator/`)."""
        if self.rtd:
            return None
        return FAMILIES[self.config.model_type][1].get_output_embeddings(self)

    def set_output_embeddings(self, new_embeddings):
        FAMILIES[self.config.model_type][1].set_output_embeddings(self, new_embeddings)

    # Copied from hf_bertology.models.modeling_spanbert.BertologySpanBertForPreTraining.resize_token_embeddings
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

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_unused()  # loading makes new Parameters
        return loaded

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, SpanBoundaryHead):
            init.zeros_(module.bias)
        if isinstance(module, GradientDisentangledEmbedding):
            init.zeros_(module.delta)

    # -- the step ------------------------------------------------------------------------------------------------
    def _backbone_inputs(self, attention_mask, token_type_ids, position_ids, kwargs: dict) -> dict:
        packed = kwargs.get("cu_seq_lens_q") is not None
        if packed and self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
            raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
        if packed and self.config.model_type == "roberta":
            position_ids = position_ids + self.config.pad_token_id + 1  # RoBERTa's positions start after padding
        inputs = {"attention_mask": None if packed else attention_mask, "position_ids": position_ids, **kwargs}
        if self.config.model_type != "modernbert":  # ModernBERT has no token types
            inputs["token_type_ids"] = token_type_ids
        return inputs

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
        sbo_labels: torch.Tensor | None = None,
        sbo_boundaries: torch.Tensor | None = None,
        sbo_relative_positions: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        sbo_target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        **kwargs,
    ) -> BertologyComposedForPreTrainingOutput:
        r"""
        labels (`(batch, seq_len)`): original ids at the masked (RTD: chosen) positions, -100 elsewhere.
        next_sentence_label / sentence_order_label (`(batch,)`): the sentence task's label (1: random / swapped).
        sbo_labels, sbo_boundaries, sbo_relative_positions: the span collator's SBO targets (see `models/spanbert`).
        target_positions, sbo_target_positions (`(M,)`, `(N,)`): flat indices of the tokens with a label, computed
            on the host by our collators, so that the sparse heads gather them with no host sync.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`).
        """
        sample_keys = kwargs.pop("sample_keys", None)  # RTD: the collator's per-token noise keys (`keyed_uniform`)
        inputs = self._backbone_inputs(attention_mask, token_type_ids, position_ids, kwargs)
        if self.rtd:  # rtd_composed.py
            return self._replaced_token_detection(
                input_ids, attention_mask, labels, target_positions, inputs, num_items_in_batch, sample_keys
            )
        return self._masked_objectives(  # masked_lm_composed.py
            input_ids,
            inputs,
            labels,
            target_positions,
            next_sentence_label,
            sentence_order_label,
            sbo_labels,
            sbo_boundaries,
            sbo_relative_positions,
            sbo_target_positions,
            num_items_in_batch,
        )


class BertologyComposedBertForPreTraining(ComposedForPreTraining, BertPreTrainedModel):
    config_class = BertologyComposedBertConfig


class BertologyComposedRobertaForPreTraining(ComposedForPreTraining, RobertaPreTrainedModel):
    config_class = BertologyComposedRobertaConfig


class BertologyComposedAlbertForPreTraining(ComposedForPreTraining, AlbertPreTrainedModel):
    config_class = BertologyComposedAlbertConfig


class BertologyComposedElectraForPreTraining(ComposedForPreTraining, ElectraPreTrainedModel):
    config_class = BertologyComposedElectraConfig


class BertologyComposedDebertaV2ForPreTraining(ComposedForPreTraining, DebertaV2PreTrainedModel):
    config_class = BertologyComposedDebertaV2Config


class BertologyComposedModernBertForPreTraining(ComposedForPreTraining, ModernBertPreTrainedModel):
    config_class = BertologyComposedModernBertConfig


COMPOSED_MODELS = {
    cls.config_class.model_type: cls
    for cls in (
        BertologyComposedBertForPreTraining,
        BertologyComposedRobertaForPreTraining,
        BertologyComposedAlbertForPreTraining,
        BertologyComposedElectraForPreTraining,
        BertologyComposedDebertaV2ForPreTraining,
        BertologyComposedModernBertForPreTraining,
    )
}
