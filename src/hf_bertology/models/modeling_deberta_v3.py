"""DeBERTa-v3 pretraining: ELECTRA-style replaced-token detection with gradient-disentangled embedding sharing.

Follows microsoft/DeBERTa `apps/tasks/rtd_task.py` (`RTDModel`, `make_electra_data`, `get_loss_fn`),
`apps/models/masked_language_model.py` (the generator) and `apps/models/replaced_token_detection_model.py` (the
discriminator), with the paper (He et al., 2021, "DeBERTaV3", §3). Every number and its source:
`docs/recipes/deberta_v3.md`.

1. The collator masks positions, all of them [MASK] (the RTD task's `NGramMaskGenerator(max_gram=1, keep_prob=0,
   mask_prob=1)`, `rtd_task.py:145`; one position per window, `collators/windows.py`). The generator, a
   `DebertaV2ForMaskedLM` at half the discriminator's depth, predicts the original token there through the
   **enhanced mask decoder** (EMD, `masked_language_model.py:30-82`): its last layer applied twice more, the
   query being the input of that layer plus the absolute position embeddings, keys and values that input; its head
   runs only on the chosen positions (sparse).
2. Every chosen position gets a token sampled from the generator's softmax (official `topk_sampling`: a multinomial
   draw; here Gumbel-max, the same distribution, in fp32 and without gradient).
3. The discriminator, a `DebertaV2Model` + the official `mask_predictions` head, labels a token "replaced" where the
   sample differs from the original; sigmoid BCE over every non-pad token.
4. `loss = generator_weight * mlm_loss + discriminator_weight * rtd_loss` (1 and λ = 10, `rtd_task.py:383,392`).

**Embedding sharing** (`config.embedding_sharing`, the official `embedding_sharing`), the one place the three
methods differ (`discriminator_input_embeddings` and `_tied_weights_keys`):
- "gdes": E_D = sg(E_G) + Δ (paper §3.3). Δ (`gdes.delta`, zero-initialised) is trained only by the RTD loss, E_G only
  by the MLM loss: the two losses no longer pull one table in two directions. The discriminator's own
  `deberta.embeddings.word_embeddings.weight` is not used while training (frozen); **every `state_dict()` writes
  E_G + Δ there**, so a saved checkpoint is a complete plain `DebertaV2Model`. The absolute position table is
  shared the same way (`gdes_positions.delta`, `rtd_task.py:59-64,120-122`) when the discriminator adds one to its
  input (`position_biased_input=True`); DeBERTa-v3's does not (`bert.py:260-261`: the official discriminator's table
  is then never read), so there only the generator's table exists, for its EMD.
- "es": one table (word, and position when the discriminator has one), declared in `_tied_weights_keys`
  (`rtd_task.py:123-130`; both losses train it).
- "nes": independent tables.
The embedding LayerNorm is each network's own, as officially.

Names: the discriminator is `deberta.*` + `mask_predictions.*` (the released discriminators' names: plain
`DebertaV2Model` / `AutoModelForSequenceClassification` load it with nothing missing), the generator a
`DebertaV2ForMaskedLM` at `generator.*` plus the EMD's position table at
`generator.deberta.embeddings.position_embeddings.weight` (the official name; plain `DebertaV2ForMaskedLM` ignores
it on loading, as it does in the released `pytorch_model.generator.bin`, and then predicts without EMD). Losses are
sums divided by the Trainer's per-objective counts (`num_items_in_batch["labels"]` for the generator,
`["attention_mask"]` for the discriminator).

Two optimizers: the official `--decoupled_training` (default True, `rtd_task.py:257-265,329-374`) steps the
generator and the discriminator with a trainer and an optimizer each, each clipping its own gradient norm. With
GDES the parameter sets are disjoint, so one AdamW on the summed loss updates each parameter as two do, and
`gradient_clipping_groups` tells `BertologyTrainer` to clip the two parts apart.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DebertaV2ForMaskedLM, DebertaV2Model, DebertaV2PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import ModelOutput

from .configuration_deberta_v3 import BertologyDebertaV3Config, generator_config

WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
POSITION_EMBEDDINGS = "embeddings.position_embeddings.weight"


@dataclass
class BertologyDebertaV3ForPreTrainingOutput(ModelOutput):
    """
    loss: `generator_weight * mlm_loss + discriminator_weight * rtd_loss`.
    mlm_loss / mlm_accuracy: the generator's masked-LM loss and argmax accuracy at the chosen positions.
    rtd_loss / rtd_accuracy: the discriminator's sigmoid BCE and accuracy over the non-pad tokens.
    replaced_fraction: share of the non-pad tokens whose sample differs from the original (label 1).
    sampled_accuracy: share of the chosen positions where the sample equals the original.
    prediction_logits: the generator's `(num_masked, vocab_size)` logits at the chosen positions.
    rtd_logits: `(batch, seq_len)` discriminator logits (> 0 means "replaced").
    replaced_input_ids: `(batch, seq_len)` the discriminator's input: originals, with samples at chosen positions.
    rtd_labels: `(batch, seq_len)` 1 where `replaced_input_ids` differs from the original token, else 0.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    rtd_loss: torch.Tensor | None = None
    mlm_accuracy: torch.Tensor | None = None
    rtd_accuracy: torch.Tensor | None = None
    replaced_fraction: torch.Tensor | None = None
    sampled_accuracy: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    replaced_input_ids: torch.Tensor | None = None
    rtd_labels: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# Copied from hf_bertology.models.modeling_bert._denominator
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


# Copied from hf_bertology.models.modeling_electra.keyed_uniform
def keyed_uniform(keys: torch.Tensor, size: int) -> torch.Tensor:
    """`(M, size)` float32 uniforms in [0, 1): entry (m, v) a hash of `keys[m]` (int64) and v (SplitMix64 on a
    counter, as hf_bertology's collators draw their masks), so the noise of an example's token does not depend on
    the process, the batch or the random state; 24 random bits, exact in float32."""
    golden, mix1, mix2 = -7046029254386353131, -4658895280553007687, -7723592293110705685  # SplitMix64's, signed
    golden_inverse = -1018231460777725123  # golden * golden_inverse = 1 (mod 2**64): golden is odd

    def shift(x: torch.Tensor, bits: int) -> torch.Tensor:  # logical right shift of int64 (`>>` keeps the sign)
        return (x >> bits) & ((1 << (64 - bits)) - 1)

    counters = torch.arange(1, size + 1, device=keys.device)
    if torch.compiler.is_compiling():  # the same values as (key * golden_inverse + v) * golden: no index times a
        # 64-bit constant, which Inductor (torch <= 2.11) folds into int32 index arithmetic that Triton refuses
        # (pytorch #183901); one operation more, which the compiled kernel fuses away
        x = torch.add(counters, keys[:, None], alpha=golden_inverse).mul_(golden)
    else:
        x = torch.add(keys[:, None], counters, alpha=golden)  # (M, size): key + v * golden, wrapping int64
    x = (x ^ shift(x, 30)) * mix1
    x = (x ^ shift(x, 27)) * mix2
    # SplitMix64's last step, x ^ (x >>> 31), leaves bits 40-63 as they are, and only those are kept: skipped.
    # int64 times a float is float32 (24-bit integers: exact), in one operation.
    return shift(x, 40) * 2.0**-24


# Copied from hf_bertology.models.modeling_electra.gumbel_sample
def gumbel_sample(logits: torch.Tensor, temperature: float = 1.0, keys: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids drawn from `softmax(logits / temperature)` by Gumbel-max, in fp32 (ELECTRA's `sample_from_softmax`).

    fp32 because Gumbel noise in half precision is biased (pytorch #41663); the 1e-9 keep `log` finite, as in
    ELECTRA's code. `argmax(l / T + g) == argmax(l + T * g)`; the noise is built in place (it is (M, vocab) large).
    """
    if keys is None:
        noise = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    elif len(keys) > 1024:  # in blocks of rows: the int64 hash of a whole (M, vocab) block would take 2x the noise's
        noise = torch.cat([keyed_uniform(block, logits.shape[-1]) for block in keys.split(1024)])  # memory
    elif len(keys):  # one block: no split (a view), no cat (a copy)
        noise = keyed_uniform(keys, logits.shape[-1])
    else:
        noise = torch.zeros(logits.shape, device=logits.device, dtype=torch.float32)
    noise.add_(1e-9).log_().neg_().add_(1e-9).log_()  # log(-log(U)) = -Gumbel(0, 1)
    if temperature != 1.0:
        noise.mul_(temperature)
    # argmax(logits + T g) as argmin(-T g - logits): the same values exactly negated, one operation fewer; logits
    # without a gradient (ELECTRA's, sampled under no_grad) need no detach (a view)
    return noise.sub_((logits.detach() if logits.requires_grad else logits).float()).argmin(-1)


class GradientDisentangledEmbedding(nn.Module):
    """GDES (paper §3.3, official `RTDModel.register_discriminator_fw_hook`): E_D = sg(E_G) + Δ, Δ starts at zero.

    The rows are gathered before the sum, so no (vocab, hidden) tensor is built per step; the result is the same.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor, generator_table: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, generator_table).detach() + F.embedding(input_ids, self.delta)  # (B, T, E)

    def merged(self, generator_table: torch.Tensor) -> torch.Tensor:
        """E_G + Δ: the discriminator's table as plain `transformers` must see it."""
        return generator_table.detach() + self.delta.detach()

    def merged_with_gradient(self, generator_table: torch.Tensor) -> torch.Tensor:
        """sg(E_G) + Δ as a whole table (for a small table, the positions), Δ trainable."""
        return generator_table.detach() + self.delta


def enhanced_mask_decoder(
    deberta: DebertaV2Model, hidden_states: tuple, attention_mask: torch.Tensor | None, positions: torch.Tensor
) -> torch.Tensor:
    """EMD (paper DeBERTa §3.2; official `EnhancedMaskDecoder.emd_context_layer`, `masked_language_model.py:51-82`).

    `hidden_states`: every layer's output (`output_hidden_states=True`); `positions`: `(B, T, H)` absolute position
    embeddings. The last layer is applied twice more (`range(2)`, line 61), keys and values the input of that layer
    (`encoder_layers[-2]`, line 59), the first query that input plus the positions (line 62), the next the previous
    output (line 71). Returns `(B, T, H)`; the caller gathers the chosen tokens (line 76).
    """
    encoder = deberta.encoder
    keys = hidden_states[-2]  # (B, T, H): the input of the last layer
    mask = torch.ones(keys.shape[:2], device=keys.device) if attention_mask is None else attention_mask
    mask = encoder.get_attention_mask(mask)  # (B, 1, T, T)
    relative_pos = encoder.get_rel_pos(keys)
    rel_embeddings = encoder.get_rel_embedding()
    query = positions + keys
    for _ in range(2):
        query = encoder.layer[-1](
            keys, mask, query_states=query, relative_pos=relative_pos, rel_embeddings=rel_embeddings
        )[0]
    return query


class ReplacedTokenDetectionHead(nn.Module):
    """The official `LMMaskPredictionHead` (`replaced_token_detection_model.py:30-49`): LayerNorm(h_[CLS] + h_i) ->
    dense -> act -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        states = self.LayerNorm(hidden_states[:, :1] + hidden_states)  # (B, T, H): every token sees [CLS]
        return self.classifier(self.transform_act_fn(self.dense(states))).squeeze(-1)  # (B, T)


class BertologyDebertaV3ForPreTraining(DebertaV2PreTrainedModel):
    config_class = BertologyDebertaV3Config
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # each loss is normalised by its `num_items_in_batch` count

    def __init__(self, config: BertologyDebertaV3Config):
        if not isinstance(config, BertologyDebertaV3Config):
            # e.g. a plain DebertaV2Config from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = BertologyDebertaV3Config(**config.to_dict())
        super().__init__(config)
        self.deberta = DebertaV2Model(config)
        self.mask_predictions = ReplacedTokenDetectionHead(config)
        self.generator = DebertaV2ForMaskedLM(generator_config(config))
        embeddings = self.generator.deberta.embeddings
        if embeddings.position_embeddings is None:
            # EMD's absolute positions: every official DeBERTa has this table (`bert.py:232`), used by EMD only
            embeddings.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        # -- embedding sharing: the only lines where GDES, ES and NES differ ------------------------------------
        self.sharing = config.embedding_sharing
        self._tied_weights_keys = {}
        shared = [WORD_EMBEDDINGS] + ([POSITION_EMBEDDINGS] if config.position_biased_input else [])
        if self.sharing == "es":
            self._tied_weights_keys = {f"generator.deberta.{name}": f"deberta.{name}" for name in shared}
        if self.sharing == "gdes":
            table = self.deberta.embeddings.word_embeddings.weight
            self.gdes = GradientDisentangledEmbedding(*table.shape)
            if config.position_biased_input:  # the official shares the position table too (rtd_task.py:59-64)
                positions = self.deberta.embeddings.position_embeddings.weight
                self.gdes_positions = GradientDisentangledEmbedding(*positions.shape)
            self.register_state_dict_post_hook(_merge_gdes)
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared table
        self._freeze_gdes_slot()

    def _freeze_gdes_slot(self) -> None:
        """Under GDES the discriminator's own table is a slot for E_G + Δ, saved but never trained (and unused:
        frozen, so DDP does not wait for its gradient)."""
        if self.sharing == "gdes":
            self.deberta.embeddings.word_embeddings.weight.requires_grad_(False)
            if hasattr(self, "gdes_positions"):
                self.deberta.embeddings.position_embeddings.weight.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_gdes_slot()  # loading makes new Parameters
        return loaded

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, GradientDisentangledEmbedding):
            nn.init.zeros_(module.delta)

    def gdes_pairs(self) -> list[tuple[nn.Parameter, nn.Parameter, nn.Parameter]]:
        """(the discriminator's saved table, the generator's table, Δ) of each table GDES shares: the saved table
        is the generator's + Δ (`_merge_gdes`); starting from two released networks sets Δ from the other two."""
        if self.sharing != "gdes":
            return []
        generator = self.generator.deberta.embeddings
        pairs = [(self.deberta.embeddings.word_embeddings.weight, generator.word_embeddings.weight, self.gdes.delta)]
        if hasattr(self, "gdes_positions"):
            slot = self.deberta.embeddings.position_embeddings.weight
            pairs.append((slot, generator.position_embeddings.weight, self.gdes_positions.delta))
        return pairs

    def discriminator_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The discriminator's word embeddings of `input_ids` under GDES (`None`: its own table, shared or not)."""
        if self.sharing != "gdes":
            return None
        return self.gdes(input_ids, self.generator.deberta.embeddings.word_embeddings.weight)

    def discriminate(self, input_ids: torch.Tensor, **kwargs):
        """`DebertaV2Model` outputs of the discriminator on `input_ids`, with its (shared) embeddings."""
        inputs_embeds = self.discriminator_input_embeddings(input_ids)
        if inputs_embeds is None:
            return self.deberta(input_ids, **kwargs)
        if not hasattr(self, "gdes_positions"):
            return self.deberta(inputs_embeds=inputs_embeds, **kwargs)
        # GDES on the position table: the discriminator's table is sg(P_G) + Δ_P for this call (`rtd_task.py:120-122`)
        positions = self.gdes_positions.merged_with_gradient(
            self.generator.deberta.embeddings.position_embeddings.weight
        )
        tables = {POSITION_EMBEDDINGS: positions}
        return torch.func.functional_call(self.deberta, tables, (), {"inputs_embeds": inputs_embeds, **kwargs})

    def gradient_clipping_groups(self) -> list[list[nn.Parameter]]:
        """The parameters whose gradient norms are clipped apart (`BertologyTrainer`): the generator's, then the
        discriminator's (with `mask_predictions` and GDES's Δ). Officially each network has its own trainer and
        optimizer (`rtd_task.py:265,351`), and each optimizer clips its own global norm (`max_grad_norm`,
        `DeBERTa/optims/args.py:69-72`, `training/optimizer_utils.py:167`, `optims/fp16_optimizer.py:221-231`).
        A table shared under "es" goes with the generator, whose parameter it is officially (`rtd_task.py:126`)."""
        generator = [p for p in self.generator.parameters() if p.requires_grad]
        in_generator = {id(p) for p in generator}
        return [generator, [p for p in self.parameters() if p.requires_grad and id(p) not in in_generator]]

    def _generator_states(self, outputs, input_ids, attention_mask, position_ids) -> torch.Tensor:
        """`(B, T, H)` states the generator's head reads: EMD's where the input carries no absolute positions
        (officially only then, `masked_language_model.py:60,73-74`), else the last layer's."""
        generator = self.generator.deberta
        if generator.config.position_biased_input:
            return outputs.last_hidden_state
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
        positions = generator.embeddings.position_embeddings(position_ids.long())  # z_states, raw (`bert.py:253`)
        return enhanced_mask_decoder(generator, outputs.hidden_states, attention_mask, positions)

    # -- the step ----------------------------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        **kwargs,
    ) -> BertologyDebertaV3ForPreTrainingOutput:
        r"""
        input_ids (`(batch, seq_len)`): the generator's input, `[MASK]` at the chosen positions.
        labels (`(batch, seq_len)`): original token ids at the chosen positions, -100 elsewhere. Without labels,
            only the discriminator runs, on `input_ids`.
        target_positions (`(M,)`): flat indices of the chosen tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the generator's head then gathers them with no host sync.
        """
        inputs = dict(attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids)
        if labels is None:
            hidden = self.discriminate(input_ids, **inputs).last_hidden_state
            return BertologyDebertaV3ForPreTrainingOutput(rtd_logits=self.mask_predictions(hidden))
        config = self.config
        # Copied from hf_bertology.models.modeling_electra.BertologyElectraForPreTraining.forward[chosen] with real_mask->attention_mask
        chosen = labels.ne(-100)  # (B, T)
        # the chosen tokens: the batch's flat positions (no host sync), else a boolean index (syncs)
        at = chosen.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.take(at)  # `take` reads labels as flat: no view first
        n_chosen = chosen.sum()
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(chosen)
        n_real = real.sum()
        # End copied block

        # -- generator: masked LM on the chosen positions only ---------------------------------------------------
        generator = self.generator
        gen_outputs = generator.deberta(input_ids, **inputs, output_hidden_states=True)
        gen_hidden = self._generator_states(gen_outputs, input_ids, attention_mask, position_ids)
        gen_hidden = gen_hidden.flatten(0, 1).index_select(0, at)  # (M, H): the chosen tokens
        prediction_logits = generator.lm_predictions(gen_hidden, generator.deberta.embeddings.word_embeddings)
        mlm_sum = F.cross_entropy(prediction_logits.float(), targets, reduction="sum")  # logits (M, V)
        mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", n_chosen, n_chosen)

        # -- fake data (`make_electra_data`): a sample at every chosen position ----------------------------------
        with torch.no_grad():
            keys = kwargs.pop("sample_keys", None)  # the collator's per-token noise keys (`keyed_uniform`)
            keys = None if keys is None else keys.flatten().index_select(0, at)
            sampled = gumbel_sample(prediction_logits, config.sampling_temperature, keys)  # (M,)
            original_ids = torch.where(chosen, labels, input_ids)
            replaced_input_ids = original_ids.flatten().index_copy(0, at, sampled).view_as(original_ids)
            rtd_labels = (replaced_input_ids != original_ids) & real  # (B, T)

        # -- discriminator: replaced-token detection over every non-pad token -----------------------------------
        disc_outputs = self.discriminate(replaced_input_ids, **inputs, **kwargs)
        rtd_logits = self.mask_predictions(disc_outputs.last_hidden_state)  # (B, T)
        # Copied from hf_bertology.models.modeling_electra.BertologyElectraForPreTraining.forward[rtd_loss]
        # over the real tokens by weighting, not selecting: every shape stays the batch's (no host sync)
        rtd_sum = F.binary_cross_entropy_with_logits(
            rtd_logits.float(), rtd_labels.float(), weight=real.float(), reduction="sum"
        )
        rtd_loss = rtd_sum / _denominator(num_items_in_batch, "attention_mask", n_real, n_chosen)
        # End copied block
        predicted = (rtd_logits.detach() > 0) & real

        return BertologyDebertaV3ForPreTrainingOutput(
            loss=config.generator_weight * mlm_loss + config.discriminator_weight * rtd_loss,
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            mlm_accuracy=(prediction_logits.argmax(-1) == targets).float().mean(),
            rtd_accuracy=((predicted == rtd_labels) & real).sum() / n_real,
            replaced_fraction=rtd_labels.sum() / n_real,
            sampled_accuracy=(sampled == targets).float().mean(),
            prediction_logits=prediction_logits,
            rtd_logits=rtd_logits,
            replaced_input_ids=replaced_input_ids,
            rtd_labels=rtd_labels.long(),
            hidden_states=disc_outputs.hidden_states,
            attentions=disc_outputs.attentions,
        )


def _merge_gdes(module: BertologyDebertaV3ForPreTraining, state_dict: dict, prefix: str, local_metadata) -> None:
    """State-dict hook: write E_G + Δ as the discriminator's word (and GDES-shared position) table, so checkpoints
    hold the merged embedding.

    Only plain state dicts (`keep_vars=False`, what saving uses) are rewritten; parameters themselves never change.
    """
    generator = module.generator.deberta.embeddings
    merges = [(WORD_EMBEDDINGS, module.gdes, generator.word_embeddings)]
    if hasattr(module, "gdes_positions"):
        merges.append((POSITION_EMBEDDINGS, module.gdes_positions, generator.position_embeddings))
    for name, gdes, table in merges:
        key = f"{prefix}deberta.{name}"
        if key not in state_dict or isinstance(state_dict[key], nn.Parameter) or state_dict[key].is_meta:
            continue
        state_dict[key] = gdes.merged(table.weight)
