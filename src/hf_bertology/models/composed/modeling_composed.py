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

The heads, the sampling and the GDES module repeat a few lines of `models/spanbert`, `models/electra` and
`models/deberta_v3`: a modeling file may import only torch, transformers and its own folder, so that a checkpoint
loads with `trust_remote_code=True` on a machine without hf_bertology.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
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
from transformers.activations import ACT2FN
from transformers.modeling_outputs import ModelOutput

from .configuration_composed import (
    COMPOSED_CONFIGS,
    BertologyComposedAlbertConfig,
    BertologyComposedBertConfig,
    BertologyComposedDebertaV2Config,
    BertologyComposedElectraConfig,
    BertologyComposedModernBertConfig,
    BertologyComposedRobertaConfig,
)

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

# model_type -> the family's masked-LM head on `(M, H)` states of a `*ForMaskedLM` (or a model holding its modules).
MLM_HEADS = {
    "bert": lambda m, h: m.cls(h),
    "roberta": lambda m, h: m.lm_head(h),
    "albert": lambda m, h: m.predictions(h),
    "electra": lambda m, h: m.generator_lm_head(m.generator_predictions(h)),
    "deberta-v2": lambda m, h: (
        m.cls(h) if hasattr(m, "cls") else m.lm_predictions(h, m.deberta.embeddings.word_embeddings)
    ),
    "modernbert": lambda m, h: m.decoder(m.head(h)),
}

WORD_TABLES = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")
POSITION_TABLE = "embeddings.position_embeddings.weight"
OTHER_TABLES = (POSITION_TABLE, "embeddings.token_type_embeddings.weight")
SENTENCE_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label"}


@dataclass
class BertologyComposedForPreTrainingOutput(ModelOutput):
    """
    loss: the weighted sum of the component losses below that apply.
    mlm_loss / mlm_accuracy: masked LM (the generator's under RTD) at the labelled positions.
    nsp_loss, sop_loss / *_accuracy: the sentence task. sbo_loss / sbo_accuracy: SpanBERT's span boundary objective.
    rtd_loss / rtd_accuracy / replaced_fraction: the discriminator's sigmoid BCE over the real tokens.
    logits: `(num_masked, vocab_size)` MLM logits when labels are given (sparse), else `(batch, seq_len, vocab)`.
    rtd_logits: `(batch, seq_len)` discriminator logits (> 0 means "replaced").
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    sop_loss: torch.Tensor | None = None
    sbo_loss: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    nsp_accuracy: torch.Tensor | None = None
    sop_accuracy: torch.Tensor | None = None
    sbo_accuracy: torch.Tensor | None = None
    rtd_accuracy: torch.Tensor | None = None
    replaced_fraction: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# Copied from hf_bertology.models.bert.modeling_bert._denominator
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


def _activation(config):
    name = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", "gelu")
    return ACT2FN[name] if isinstance(name, str) else name


def _layer_norm_eps(config) -> float:
    return getattr(config, "layer_norm_eps", None) or getattr(config, "norm_eps", 1e-12)


# Copied from hf_bertology.models.electra.modeling_electra.keyed_uniform
def keyed_uniform(keys: torch.Tensor, size: int) -> torch.Tensor:
    """`(M, size)` float32 uniforms in [0, 1): entry (m, v) a hash of `keys[m]` (int64) and v (SplitMix64 on a
    counter, as hf_bertology's collators draw their masks), so the noise of an example's token does not depend on
    the process, the batch or the random state; 24 random bits, exact in float32."""
    golden, mix1, mix2 = -7046029254386353131, -4658895280553007687, -7723592293110705685  # SplitMix64's, signed

    def shift(x: torch.Tensor, bits: int) -> torch.Tensor:  # logical right shift of int64 (`>>` keeps the sign)
        return (x >> bits) & ((1 << (64 - bits)) - 1)

    counters = torch.arange(1, size + 1, device=keys.device)
    x = torch.add(keys[:, None], counters, alpha=golden)  # (M, size): key + v * golden, wrapping int64
    x = (x ^ shift(x, 30)) * mix1
    x = (x ^ shift(x, 27)) * mix2
    # SplitMix64's last step, x ^ (x >>> 31), leaves bits 40-63 as they are, and only those are kept: skipped.
    # int64 times a float is float32 (24-bit integers: exact), in one operation.
    return shift(x, 40) * 2.0**-24


# Copied from hf_bertology.models.electra.modeling_electra.gumbel_sample
def gumbel_sample(logits: torch.Tensor, temperature: float = 1.0, keys: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids drawn from `softmax(logits / temperature)` by Gumbel-max, in fp32 (ELECTRA's `sample_from_softmax`).

    fp32 because Gumbel noise in half precision is biased (pytorch #41663); the 1e-9 keep `log` finite, as in
    ELECTRA's code. `argmax(l / T + g) == argmax(l + T * g)`; the noise is built in place (it is (M, vocab) large).
    """
    if keys is None:
        noise = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    elif len(keys):  # in blocks of rows: the int64 hash of a whole (M, vocab) block would take 2x the noise's memory
        blocks = [keyed_uniform(block, logits.shape[-1]) for block in keys.split(1024)]
        noise = blocks[0] if len(blocks) == 1 else torch.cat(blocks)  # one block: no copy
    else:
        noise = torch.zeros(logits.shape, device=logits.device, dtype=torch.float32)
    noise.add_(1e-9).log_().neg_().add_(1e-9).log_()  # log(-log(U)) = -Gumbel(0, 1)
    if temperature != 1.0:
        noise.mul_(temperature)
    # argmax(logits + T g) as argmin(-T g - logits): the same values exactly negated, one operation fewer
    return noise.sub_(logits.detach().float()).argmin(-1)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's `BertPairTargetPredictionHead` (see `models/spanbert`): `[h_{s-1}; h_{e+1}; p_{i-s}]` -> MLP ->
    the tied word table. The MLP's second layer maps to the table's width (the hidden size, or ALBERT's/ELECTRA's
    smaller embedding size)."""

    def __init__(self, config, embedding_size: int):
        super().__init__()
        hidden, positions = config.hidden_size, config.sbo_position_embedding_size
        self.position_embeddings = nn.Embedding(config.sbo_max_targets, positions)
        self.linear1 = nn.Linear(2 * hidden + positions, hidden)
        self.layer_norm1 = nn.LayerNorm(hidden, eps=_layer_norm_eps(config))
        self.linear2 = nn.Linear(hidden, embedding_size)
        self.layer_norm2 = nn.LayerNorm(embedding_size, eps=_layer_norm_eps(config))
        self.act = _activation(config)
        self.decoder = nn.Linear(embedding_size, config.vocab_size, bias=False)  # tied to the word embeddings
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        hidden = torch.cat([left, right, self.position_embeddings(relative_positions)], -1)  # (M, 2H + P)
        hidden = self.layer_norm1(self.act(self.linear1(hidden)))
        hidden = self.layer_norm2(self.act(self.linear2(hidden)))
        return self.decoder(hidden) + self.bias  # (M, V)


class DiscriminatorHead(nn.Module):
    """ELECTRA's `ElectraDiscriminatorPredictions` (same names): dense -> activation -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = _activation(config)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)  # (B, T)


class ClsReplacedTokenDetectionHead(nn.Module):
    """DeBERTa-v3's `LMMaskPredictionHead` (see `models/deberta_v3`; microsoft/DeBERTa
    `replaced_token_detection_model.py:30-49`): LayerNorm(h_[CLS] + h_i) -> dense -> act -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = _activation(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=_layer_norm_eps(config))
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor, first: torch.Tensor | None = None) -> torch.Tensor:
        """`first`: `(B, T)` index of each token's [CLS] (a padding-free row holds several examples)."""
        cls = hidden_states[:, :1] if first is None else hidden_states[0, first][None]  # (B, 1 or T, H)
        states = self.LayerNorm(cls + hidden_states)  # every token sees its example's [CLS]
        return self.classifier(self.transform_act_fn(self.dense(states))).squeeze(-1)  # (B, T)


class GradientDisentangledEmbedding(nn.Module):
    """GDES (DeBERTa-v3 §3.3; see `models/deberta_v3`): E_D = sg(E_G) + Δ with Δ zero-initialised."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor, generator_table: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, generator_table).detach() + F.embedding(input_ids, self.delta)


def generator_config(config):
    """The RTD generator's config: the family's plain config at `generator_hidden_fraction` of the width (heads of the
    same size, FFN scaled alike) and `generator_layers_fraction` of the depth; a factorised embedding (ALBERT,
    ELECTRA, DeBERTa `embedding_size`) keeps the discriminator's width so the tables can be shared."""
    family_config = type(config).__mro__[2] if type(config) in COMPOSED_CONFIGS.values() else type(config)
    generator = family_config(**config.to_dict())
    head_size = config.hidden_size // config.num_attention_heads
    generator.hidden_size = max(head_size, round(config.hidden_size * config.generator_hidden_fraction))
    generator.num_attention_heads = max(1, generator.hidden_size // head_size)
    generator.intermediate_size = max(1, round(config.intermediate_size * config.generator_hidden_fraction))
    generator.num_hidden_layers = max(1, round(config.num_hidden_layers * config.generator_layers_fraction))
    if config.model_type == "deberta-v2" and generator.hidden_size != config.hidden_size:
        generator.embedding_size = getattr(config, "embedding_size", config.hidden_size)
    generator.tie_word_embeddings = False  # tied at the top level (to the discriminator's table under "es")
    generator.replaced_token_detection = False
    return generator


class ComposedForPreTraining:
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

    # -- construction helpers ------------------------------------------------------------------------------------
    def _share_embeddings(self, config, masked_lm_class, prefix: str, word_table: str) -> dict[str, str]:
        """`_tied_weights_keys` of an RTD model: the generator's own ties, and the tables `embedding_sharing` shares."""
        sharing = config.embedding_sharing
        generator_backbone = self.generator.base_model
        same_shape = [
            name
            for name in WORD_TABLES + OTHER_TABLES
            if _has(self.base_model, name)
            and _has(generator_backbone, name)
            and _get(self.base_model, name).shape == _get(generator_backbone, name).shape
        ]
        if sharing in ("es", "gdes") and word_table not in same_shape:
            raise ValueError(
                f"embedding_sharing={sharing!r} needs word tables of one width: the generator's is "
                f"{tuple(_get(generator_backbone, word_table).shape)}, the discriminator's "
                f"{tuple(_get(self.base_model, word_table).shape)}; set embedding_sharing='nes' or "
                "generator_hidden_fraction=1.0"
            )
        shared = same_shape if sharing == "es" else []
        tied = {f"generator.{prefix}.{name}": f"{prefix}.{name}" for name in shared}
        for target, source in (masked_lm_class._tied_weights_keys or {}).items():
            inner = source.split(".", 1)[1] if source.startswith(f"{prefix}.") else None
            tied[f"generator.{target}"] = f"{prefix}.{inner}" if inner in shared else f"generator.{source}"
        if sharing == "gdes":
            self.gdes = GradientDisentangledEmbedding(*_get(self.base_model, word_table).shape)
            self._gdes_tables = (f"{prefix}.{word_table}", word_table)
            if POSITION_TABLE in same_shape:  # the official shares the position table the same way
                self.gdes_positions = GradientDisentangledEmbedding(*_get(self.base_model, POSITION_TABLE).shape)
            self.register_state_dict_post_hook(_merge_gdes)
        return tied

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
        if self.rtd:
            return self._replaced_token_detection(
                input_ids, attention_mask, labels, target_positions, inputs, num_items_in_batch, sample_keys
            )
        outputs = self.base_model(input_ids, **inputs)
        states = outputs.last_hidden_state  # (B, T, H)
        out = BertologyComposedForPreTrainingOutput(hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        losses = []
        if labels is None:
            out.logits = MLM_HEADS[self.config.model_type](self, states)  # (B, T, V)
        else:
            predicted = labels.ne(-100)  # (B, T)
            at = predicted.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
            targets = labels.flatten().index_select(0, at)
            labelled = states.flatten(0, 1).index_select(0, at)  # (M, H): the labelled tokens
            out.logits = MLM_HEADS[self.config.model_type](self, labelled)  # (M, V): sparse prediction
            n_masked = predicted.sum()
            out.mlm_loss = F.cross_entropy(out.logits.float(), targets, reduction="sum") / _denominator(
                num_items_in_batch, "labels", n_masked, n_masked
            )
            out.mlm_accuracy = (out.logits.argmax(-1) == targets).sum() / n_masked
            losses.append(out.mlm_loss)
        task = self.config.sentence_task
        sentence_labels = next_sentence_label if task == "nsp" else sentence_order_label
        if task is not None and sentence_labels is not None:
            cu_seq_lens = kwargs.get("cu_seq_lens_q")
            first = states[:, 0] if cu_seq_lens is None else states[0, cu_seq_lens[:-1].long()]  # (B, H)
            logits = self.sentence_classifier(self._pool(first))  # (B, 2)
            n_examples = torch.full((), len(sentence_labels), device=logits.device)
            n_masked = labels.ne(-100).sum() if labels is not None else n_examples
            loss = F.cross_entropy(logits.float(), sentence_labels.long(), reduction="sum") / _denominator(
                num_items_in_batch, SENTENCE_LABELS[task], n_examples, n_masked
            )
            setattr(out, f"{task}_loss", loss)
            setattr(
                out, f"{task}_accuracy", (logits.argmax(-1) == sentence_labels).sum() / sentence_labels.ne(-100).sum()
            )
            losses.append(loss)
        if self.config.span_boundary_objective and sbo_labels is not None:
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
            out.sbo_loss = F.cross_entropy(sbo_logits.float(), sbo_targets, reduction="sum") / _denominator(
                num_items_in_batch, "sbo_labels", n_sbo, n_masked
            )
            out.sbo_accuracy = (sbo_logits.argmax(-1) == sbo_targets).sum() / n_sbo
            losses.append(self.config.sbo_loss_weight * out.sbo_loss)
        out.loss = sum(losses) if losses else None
        return out

    def _pool(self, first: torch.Tensor) -> torch.Tensor:
        """tanh(W h) of each example's first token: the family's pooler (BERT/RoBERTa `dense`, ALBERT a Linear) or
        our `sentence_pooler`."""
        pooler = getattr(self.base_model, "pooler", None)
        if pooler is None:
            return torch.tanh(self.sentence_pooler(first))
        return torch.tanh(pooler(first) if isinstance(pooler, nn.Linear) else pooler.dense(first))

    def discriminate(self, input_ids: torch.Tensor, **inputs):
        """The discriminator backbone's outputs on `input_ids` (under GDES, on sg(E_G) + Δ)."""
        if self.config.embedding_sharing == "gdes":
            generator_table = _get(self.generator.base_model, self._gdes_tables[1])
            inputs_embeds = self.gdes(input_ids, generator_table)
            if not hasattr(self, "gdes_positions"):
                return self.base_model(inputs_embeds=inputs_embeds, **inputs)
            # the position table is sg(P_G) + Δ_P for this call (official `rtd_task.py:120-122`)
            positions = _get(self.generator.base_model, POSITION_TABLE).detach() + self.gdes_positions.delta
            call = {"inputs_embeds": inputs_embeds, **inputs}
            return torch.func.functional_call(self.base_model, {POSITION_TABLE: positions}, (), call)
        return self.base_model(input_ids, **inputs)

    def _rtd_logits(self, hidden_states: torch.Tensor, inputs: dict) -> torch.Tensor:
        """`(B, T)` discriminator logits: DeBERTa-v3's head reads each example's [CLS] (the row's start, or in a
        padding-free row the start of its example), ELECTRA's reads each token alone."""
        if not hasattr(self, "mask_predictions"):
            return self.discriminator_predictions(hidden_states)
        cu_seq_lens = inputs.get("cu_seq_lens_q")
        first = None
        if cu_seq_lens is not None:  # (T,) the start of each token's example
            lengths = cu_seq_lens[1:] - cu_seq_lens[:-1]
            first = torch.repeat_interleave(
                cu_seq_lens[:-1].long(), lengths.long(), output_size=hidden_states.shape[1]
            )
        return self.mask_predictions(hidden_states, first)

    def _replaced_token_detection(
        self, input_ids, attention_mask, labels, target_positions, inputs, num_items_in_batch, sample_keys=None
    ):
        """ELECTRA's step (see `models/electra`): generator MLM on the chosen positions, a Gumbel sample at every
        one of them, the discriminator's BCE over every real token; `loss = w_G * mlm + w_D * rtd`."""
        config = self.config
        if labels is None:
            hidden = self.discriminate(input_ids, **inputs).last_hidden_state
            return BertologyComposedForPreTrainingOutput(rtd_logits=self._rtd_logits(hidden, inputs))
        # Copied from hf_bertology.models.electra.modeling_electra.BertologyElectraForPreTraining.forward[chosen] with real_mask->attention_mask
        chosen = labels.ne(-100)  # (B, T)
        # the chosen tokens: the batch's flat positions (no host sync), else a boolean index (syncs)
        at = chosen.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.flatten().index_select(0, at)
        n_chosen = chosen.sum()
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(chosen)
        n_real = real.sum()
        # End copied block

        gen_hidden = self.generator.base_model(input_ids, **inputs).last_hidden_state
        gen_hidden = gen_hidden.flatten(0, 1).index_select(0, at)  # (M, H_G)
        prediction_logits = MLM_HEADS[config.model_type](self.generator, gen_hidden)  # (M, V)
        mlm_loss = F.cross_entropy(prediction_logits.float(), targets, reduction="sum") / _denominator(
            num_items_in_batch, "labels", n_chosen, n_chosen
        )
        # Copied from hf_bertology.models.electra.modeling_electra.BertologyElectraForPreTraining.forward[fake_data]
        with torch.no_grad():
            sample_logits = prediction_logits.detach().float()
            if config.disallow_correct:
                sample_logits[torch.arange(len(targets), device=targets.device), targets] = -1e9
            keys = None if sample_keys is None else sample_keys.flatten().index_select(0, at)
            sampled = gumbel_sample(sample_logits, config.sampling_temperature, keys)  # (M,)
            original_ids = torch.where(chosen, labels, input_ids)
            replaced_input_ids = original_ids.flatten().index_copy(0, at, sampled).view_as(original_ids)
            rtd_labels = (replaced_input_ids != original_ids) & real  # (B, T)
        # End copied block

        disc_outputs = self.discriminate(replaced_input_ids, **inputs)
        rtd_logits = self._rtd_logits(disc_outputs.last_hidden_state, inputs)  # (B, T)
        # Copied from hf_bertology.models.electra.modeling_electra.BertologyElectraForPreTraining.forward[rtd_loss]
        # over the real tokens by weighting, not selecting: every shape stays the batch's (no host sync)
        rtd_sum = F.binary_cross_entropy_with_logits(
            rtd_logits.float(), rtd_labels.float(), weight=real.float(), reduction="sum"
        )
        rtd_loss = rtd_sum / _denominator(num_items_in_batch, "attention_mask", n_real, n_chosen)
        # End copied block
        predicted = (rtd_logits.detach() > 0) & real
        return BertologyComposedForPreTrainingOutput(
            loss=config.generator_weight * mlm_loss + config.discriminator_weight * rtd_loss,
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            mlm_accuracy=(prediction_logits.argmax(-1) == targets).sum() / n_chosen,
            rtd_accuracy=((predicted == rtd_labels) & real).sum() / n_real,
            replaced_fraction=rtd_labels.sum() / n_real,
            logits=prediction_logits,
            rtd_logits=rtd_logits,
            hidden_states=disc_outputs.hidden_states,
            attentions=disc_outputs.attentions,
        )


def _has(module: nn.Module, name: str) -> bool:
    try:
        _get(module, name)
    except AttributeError:
        return False
    return True


def _get(module: nn.Module, name: str) -> torch.Tensor:
    return module.get_parameter(name)


def _merge_gdes(module, state_dict: dict, prefix: str, local_metadata) -> None:
    """State-dict hook: write E_G + Δ (and P_G + Δ_P) as the discriminator's tables, so a checkpoint is a complete
    plain backbone.
    Only plain state dicts (`keep_vars=False`, what saving uses) are rewritten; the parameters never change."""
    merges = [(module._gdes_tables[1], module.gdes)]
    if hasattr(module, "gdes_positions"):
        merges.append((POSITION_TABLE, module.gdes_positions))
    for name, gdes in merges:
        key = f"{prefix}{module.base_model_prefix}.{name}"
        if key not in state_dict or isinstance(state_dict[key], nn.Parameter) or state_dict[key].is_meta:
            continue
        state_dict[key] = _get(module.generator.base_model, name).detach() + gdes.delta.detach()


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
