"""Replaced-token detection on a composed model (ELECTRA §2, DeBERTa-v3 §3): the generator's config, the embedding
sharing (ES, GDES §3.3, NES), the Gumbel sampling of the fake tokens, and the step cut into the paper's parts:
the generator's masked LM on the chosen positions, the fake data, the discriminator's loss over the real tokens.

The sampling and several blocks are marked copies of `models/electra` (`utils/check_copies.py`).
"""

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_composed import COMPOSED_CONFIGS
from .heads_composed import (
    MLM_HEADS,
    OTHER_TABLES,
    POSITION_TABLE,
    WORD_TABLES,
    GradientDisentangledEmbedding,
    _get,
    _has,
)
from .outputs_composed import BertologyComposedForPreTrainingOutput, _denominator


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


class ReplacedTokenDetection:
    """The RTD step, mixed into `ComposedForPreTraining` (modeling_composed.py), whose `__init__` builds `generator`
    (the family's `*ForMaskedLM` at `generator_config`), the discriminator's head and the shared tables."""

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

    def gdes_pairs(self) -> list[tuple[nn.Parameter, nn.Parameter, nn.Parameter]]:
        """(the discriminator's saved table, the generator's table, Δ) of each table GDES shares (`_merge_gdes`)."""
        if self.config.embedding_sharing != "gdes":
            return []
        names = [(self._gdes_tables[1], self.gdes)]
        if hasattr(self, "gdes_positions"):
            names.append((POSITION_TABLE, self.gdes_positions))
        return [(_get(self.base_model, n), _get(self.generator.base_model, n), gdes.delta) for n, gdes in names]

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
        """ELECTRA's step (§2; see `models/electra`): generator MLM on the chosen positions, a Gumbel sample at every
        one of them, the discriminator's BCE over every real token; `loss = w_G * mlm + w_D * rtd`."""
        config = self.config
        if labels is None:
            hidden = self.discriminate(input_ids, **inputs).last_hidden_state
            return BertologyComposedForPreTrainingOutput(rtd_logits=self._rtd_logits(hidden, inputs))
        # Copied from hf_bertology.models.modeling_electra.BertologyElectraForPreTraining.forward[chosen] with real_mask->attention_mask
        chosen = labels.ne(-100)  # (B, T)
        # the chosen tokens: the batch's flat positions (no host sync), else a boolean index (syncs)
        at = chosen.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.take(at)  # `take` reads labels as flat: no view first
        n_chosen = chosen.sum()
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(chosen)
        n_real = real.sum()
        # End copied block

        prediction_logits, mlm_loss = self._generator_loss(
            input_ids, inputs, at, targets, n_chosen, num_items_in_batch
        )
        replaced_input_ids, rtd_labels = self._fake_data(
            input_ids, labels, chosen, real, at, targets, prediction_logits, sample_keys
        )
        disc_outputs = self.discriminate(replaced_input_ids, **inputs)
        rtd_logits = self._rtd_logits(disc_outputs.last_hidden_state, inputs)  # (B, T)
        rtd_loss = self._rtd_loss(rtd_logits, rtd_labels, real, n_real, n_chosen, num_items_in_batch)
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

    def _generator_loss(self, input_ids, inputs, at, targets, n_chosen, num_items_in_batch):
        """The generator's masked LM (ELECTRA §2) on the chosen positions only: `(M, V)` logits and the summed
        cross-entropy over the step's chosen-token count."""
        gen_hidden = self.generator.base_model(input_ids, **inputs).last_hidden_state
        gen_hidden = gen_hidden.flatten(0, 1).index_select(0, at)  # (M, H_G)
        prediction_logits = MLM_HEADS[self.config.model_type](self.generator, gen_hidden)  # (M, V)
        mlm_loss = F.cross_entropy(prediction_logits.float(), targets, reduction="sum") / _denominator(
            num_items_in_batch, "labels", n_chosen, n_chosen
        )
        return prediction_logits, mlm_loss

    def _fake_data(self, input_ids, labels, chosen, real, at, targets, prediction_logits, sample_keys):
        """ELECTRA's fake data (`_get_fake_data`): the chosen positions unmasked, then each replaced by a Gumbel
        sample of the generator's softmax; `(replaced_input_ids, rtd_labels)`, both `(B, T)`."""
        config = self.config
        # Copied from hf_bertology.models.modeling_electra.BertologyElectraForPreTraining.forward[fake_data]
        with torch.no_grad():
            sample_logits = prediction_logits.detach().float()
            if config.disallow_correct:
                sample_logits[torch.arange(len(targets), device=targets.device), targets] = -1e9
            keys = None if sample_keys is None else sample_keys.take(at)
            sampled = gumbel_sample(sample_logits, config.sampling_temperature, keys)  # (M,)
            original_ids = torch.where(chosen, labels, input_ids)
            replaced_input_ids = original_ids.put(at, sampled)  # flat positions, the batch's shape: no views
            rtd_labels = (replaced_input_ids != original_ids) & real  # (B, T)
        # End copied block
        return replaced_input_ids, rtd_labels

    def _rtd_loss(self, rtd_logits, rtd_labels, real, n_real, n_chosen, num_items_in_batch):
        """The discriminator's sigmoid BCE (ELECTRA §2) summed over the real tokens, over the step's real-token count."""
        # Copied from hf_bertology.models.modeling_electra.BertologyElectraForPreTraining.forward[rtd_loss]
        # over the real tokens by weighting, not selecting: every shape stays the batch's (no host sync)
        rtd_sum = F.binary_cross_entropy_with_logits(
            rtd_logits.float(), rtd_labels.float(), weight=real.float(), reduction="sum"
        )
        rtd_loss = rtd_sum / _denominator(num_items_in_batch, "attention_mask", n_real, n_chosen)
        # End copied block
        return rtd_loss
