"""ELECTRA pretraining: a generator (masked LM) and a discriminator (replaced-token detection), trained jointly.

Follows google-research/electra `run_pretraining.py` (docs/recipes/electra.md):

1. The collator masks an exact number of positions per sequence: 85% become [MASK], 15% keep their token, none
   are random (`pretrain_helpers.mask`). The generator predicts the original token at every chosen position; its
   head runs only on those positions (sparse, as `_get_masked_lm_output` gathers `masked_lm_positions`).
2. `_get_fake_data`: the input is first **unmasked**, then **every** chosen position (the kept 15% included) gets
   a token sampled from the generator's softmax by Gumbel-max, in fp32 and without gradient (`tf.stop_gradient`).
3. The discriminator reads that sequence; a token is labelled "replaced" (1) only where the sample differs from
   the original. Its loss is sigmoid BCE over every non-pad token, [CLS]/[SEP] included.
4. `loss = generator_weight * mlm_loss + discriminator_weight * rtd_loss` (1 and 50).

Both networks are `transformers` modules under the names plain `transformers` expects: the discriminator is
`electra.*` + `discriminator_predictions.*` (`ElectraForPreTraining`'s names, so `AutoModelForPreTraining`,
`AutoModel` and `AutoModelForSequenceClassification` load it from our checkpoint), the generator an
`ElectraForMaskedLM` at `generator.*`. Word, position and token-type embeddings and the embedding LayerNorm are the
same `Parameter`s in both (official: both build `electra/embeddings` with AUTO_REUSE), declared in
`_tied_weights_keys` so `save_pretrained` writes them once and `from_pretrained` ties them again; the generator's
output layer uses the same word table. Each network keeps its own `embeddings_project` when its hidden size differs
from the embedding size.

Initialisation as the official code: the layers it builds with `create_initializer` (attention, FFN, embedding
tables, the discriminator's hidden `dense`, the generator's `generator_predictions.dense`) get N(0,
`initializer_range`), transformers' ELECTRA init (the official draws a normal truncated at 2 sigma). The dense layers
it builds without an initializer get TensorFlow's default, Glorot uniform U(-a, a) with a = sqrt(6 / (fan_in +
fan_out)), and zero bias: `embeddings_project` in both networks (`model/modeling.py`) and the discriminator's output
layer `discriminator_predictions.dense_prediction` (`tf.layers.dense(hidden, units=1)` in `run_pretraining.py`).

Diagnostics beside the losses (official `metric_fn`): `disc_auc`, `disc_precision` and `disc_recall` of "replaced"
over the real tokens, a prediction being `logit > 0` (probability > 0.5). Near the constant-guess loss the RTD loss
alone hides whether the discriminator ranks replaced tokens above originals; the AUC shows it. They are exact per
batch (the official `tf.metrics.auc` streams 200 thresholds over the evaluation and counts padding as negatives).

Losses are sums divided by the Trainer's per-objective counts (`num_items_in_batch["labels"]` for the generator,
`["attention_mask"]` for the discriminator), so gradient accumulation and DDP give the gradients of one batch.

This file imports only torch, transformers and its own folder (`trust_remote_code=True` works without hf_bertology).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import ElectraForMaskedLM, ElectraModel, ElectraPreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.models.electra.modeling_electra import ElectraDiscriminatorPredictions

from .configuration_electra import BertologyElectraConfig, generator_config

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")

# Parameters the two networks share (paper §3.2 "tie token embeddings"; official: shared `electra/embeddings`).
SHARED_EMBEDDINGS = (
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
)
# Dense layers the official code builds without `kernel_initializer`: TensorFlow's default Glorot uniform.
GLOROT_UNIFORM_LAYERS = (
    "electra.embeddings_project",
    "generator.electra.embeddings_project",
    "discriminator_predictions.dense_prediction",
)


@dataclass
class BertologyElectraForPreTrainingOutput(ModelOutput):
    """
    loss: `generator_weight * mlm_loss + discriminator_weight * rtd_loss`.
    mlm_loss / mlm_accuracy: the generator's masked-LM loss and argmax accuracy at the chosen positions.
    rtd_loss / rtd_accuracy: the discriminator's sigmoid BCE and accuracy over the non-pad tokens.
    replaced_fraction: share of the non-pad tokens whose sample differs from the original (label 1).
    disc_auc / disc_precision / disc_recall: the discriminator's ROC AUC, and precision and recall of "replaced" at
        `logit > 0`, over the non-pad tokens of this batch (official `disc_*` metrics); NaN where undefined (AUC
        with one class only, precision with nothing predicted replaced, recall with nothing replaced).
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
    disc_auc: torch.Tensor | None = None
    disc_precision: torch.Tensor | None = None
    disc_recall: torch.Tensor | None = None
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


def binary_auc(scores: torch.Tensor, labels: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """ROC AUC of `scores` for binary `labels` (over the `real` entries only) by the Mann-Whitney rank sum, tied
    scores sharing their mean rank.

    AUC = (sum of the positives' ranks - P (P + 1) / 2) / (P N): the probability that a random positive scores
    above a random negative, ties counting one half (`sklearn.metrics.roc_auc_score`'s value). NaN if a class is
    absent. Every shape here is the input's (a tie group's ends come from `searchsorted`; the entries left out sort
    first, at -inf), so it runs on the device with no host sync, unlike `unique` or a boolean index.
    """
    scores, labels = scores.detach().flatten().float(), labels.detach().flatten().bool()
    real = torch.ones_like(labels) if real is None else real.flatten().bool()
    labels = labels & real
    n_out = (~real).sum()
    n_pos = labels.sum()
    n_neg = real.sum() - n_pos
    sorted_scores, order = scores.masked_fill(~real, float("-inf")).sort()
    # Twice the 1-based mean rank of each score's tie group, an integer: exact sums with no float64.
    first = torch.searchsorted(sorted_scores, sorted_scores, right=False)
    past = torch.searchsorted(sorted_scores, sorted_scores, right=True)
    double_rank = first + past + 1 - 2 * n_out  # ranks among the real entries (those left out rank below them)
    double_rank_sum = (double_rank * labels[order]).sum()
    return (double_rank_sum - n_pos * (n_pos + 1)).float() / (2 * n_pos * n_neg).float()


class BertologyElectraForPreTraining(ElectraPreTrainedModel):
    config_class = BertologyElectraConfig
    _auto_class = "AutoModelForPreTraining"
    accepts_loss_kwargs = True  # each loss is normalised by its `num_items_in_batch` count
    # target -> source: the generator's embeddings (and its output layer) are the discriminator's.
    _tied_weights_keys = {
        **{f"generator.electra.{name}": f"electra.{name}" for name in SHARED_EMBEDDINGS},
        "generator.generator_lm_head.weight": "electra.embeddings.word_embeddings.weight",
    }

    def __init__(self, config: BertologyElectraConfig):
        if not isinstance(config, BertologyElectraConfig):
            # e.g. a plain ElectraConfig from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = BertologyElectraConfig(**config.to_dict())
        super().__init__(config)
        self.electra = ElectraModel(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        gen_config = generator_config(config)
        # Tied at this level (to the discriminator's table); ElectraForMaskedLM's own tie would point at a target.
        gen_config.tie_word_embeddings = False
        self.generator = ElectraForMaskedLM(gen_config)
        self.training_stage = "joint" if config.two_stage_generator_steps is None else "generator"
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared embeddings

    def _initialize_weights(self, module, is_custom_code: bool = False):
        # transformers skips a custom-code module without parameters of its own (this top model): ours must run.
        super()._initialize_weights(module, is_custom_code=is_custom_code and module is not self)

    def _init_weights(self, module):
        super()._init_weights(module)
        # Last in `initialize_weights` (depth-first), after the sub-models `electra` and `generator` set their own.
        if module is self:
            for name, layer in self.named_modules():
                if name in GLOROT_UNIFORM_LAYERS:
                    init.xavier_uniform_(layer.weight)  # skips weights `from_pretrained` loaded
                    init.zeros_(layer.bias)

    def get_output_embeddings(self):
        return self.generator.generator_lm_head

    def set_output_embeddings(self, new_embeddings):
        self.generator.generator_lm_head = new_embeddings

    # -- two-stage training (paper §3.2) ---------------------------------------------------------------------
    def start_discriminator_stage(self, initialize: bool = True) -> None:
        """Switch from training the generator alone to training the discriminator with the generator frozen.

        `initialize=True` copies the generator's transformer weights into the discriminator (the embeddings are
        already shared); `False` only freezes (resuming from a checkpoint taken after the switch). The shared
        embeddings stay trainable: they are the discriminator's input layer.
        """
        sizes = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")
        generator_sizes = [getattr(self.generator.config, name) for name in sizes]
        discriminator_sizes = [getattr(self.config, name) for name in sizes]
        if generator_sizes != discriminator_sizes:
            raise ValueError(
                "two-stage training initialises the discriminator from the generator, so both must have the same "
                f"size ({', '.join(sizes)}: generator {generator_sizes}, discriminator {discriminator_sizes}); "
                "set generator_hidden_fraction=1.0"
            )
        if initialize:
            source = {k: v for k, v in self.generator.electra.state_dict().items() if k not in SHARED_EMBEDDINGS}
            with torch.no_grad():
                missing, unexpected = self.electra.load_state_dict(source, strict=False)
            if unexpected or set(missing) - set(SHARED_EMBEDDINGS):
                raise ValueError(f"generator and discriminator differ: missing {missing}, unexpected {unexpected}")
        shared = {id(p) for p in self.electra.embeddings.parameters()}
        for param in self.generator.parameters():
            if id(param) not in shared:
                param.requires_grad_(False)
        self.training_stage = "discriminator"

    # -- the step, in the paper's parts (§2) -------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        sample_keys: torch.Tensor | None = None,
        num_items_in_batch: Mapping | torch.Tensor | int | None = None,
        return_metrics: bool = True,
        **kwargs,
    ) -> BertologyElectraForPreTrainingOutput:
        r"""
        input_ids (`(batch, seq_len)`): the generator's input, `[MASK]` at 85% of the chosen positions.
        labels (`(batch, seq_len)`): original token ids at the chosen positions, -100 elsewhere. Without labels,
            only the discriminator runs, on `input_ids` (as `ElectraForPreTraining`).
        target_positions (`(M,)`): flat indices of the chosen tokens (`labels.flatten().ne(-100).nonzero()`),
            computed on the host by our collators: the generator's head then gathers them with no host sync.
        sample_keys (`(batch, seq_len)` int64): the collator's per-token keys of the sampling noise
            (`keyed_uniform`); without them the noise comes from torch's random state.
        return_metrics: also compute the accuracies and `disc_*` diagnostics (`diagnostics`). `BertologyTrainer`
            passes `False` at training steps it does not log: about 50 operations per step that change no gradient.
        cu_seq_lens_q (in `kwargs`): a padding-free batch (`hf_bertology.collators.flatten`); the generator and the
            discriminator both run on the flat row.
        """
        # the real tokens (RTD's weights), read before a packed batch drops the mask: a fixed-shape batch
        # (`collators.fixed_shape`) has filler slots that are not real
        real_mask = attention_mask
        encoder_inputs = self.encoder_inputs(attention_mask, token_type_ids, position_ids, **kwargs)
        if labels is None:
            hidden = self.discriminate(input_ids, **encoder_inputs).last_hidden_state
            return BertologyElectraForPreTrainingOutput(rtd_logits=self.discriminator_predictions(hidden))
        config = self.config
        # Copy source: chosen
        chosen = labels.ne(-100)  # (B, T)
        # the chosen tokens: the batch's flat positions (no host sync), else a boolean index (syncs)
        at = chosen.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
        targets = labels.take(at)  # `take` reads labels as flat: no view first
        n_chosen = chosen.sum()
        real = real_mask.bool() if real_mask is not None else torch.ones_like(chosen)
        n_real = real.sum()
        # End copy source: chosen

        # 1. the generator predicts the original token at every chosen position (masked LM)
        frozen_generator = self.training_stage == "discriminator"
        prediction_logits = self.generate_logits(input_ids, at, frozen_generator, **encoder_inputs)  # (M, V)
        mlm_sum = F.cross_entropy(prediction_logits.float(), targets, reduction="sum")
        mlm_loss = mlm_sum / _denominator(num_items_in_batch, "labels", n_chosen, n_chosen)
        if self.training_stage == "generator":
            mlm_accuracy = (prediction_logits.argmax(-1) == targets).sum() / n_chosen if return_metrics else None
            return BertologyElectraForPreTrainingOutput(
                loss=mlm_loss, mlm_loss=mlm_loss, mlm_accuracy=mlm_accuracy, prediction_logits=prediction_logits
            )

        # 2. corrupt (`_get_fake_data`): unmask, then replace every chosen token with a sample from the generator
        # Copy source: fake_data
        with torch.no_grad():
            sample_logits = prediction_logits.detach().float()
            if config.disallow_correct:
                sample_logits[torch.arange(len(targets), device=targets.device), targets] = -1e9
            keys = None if sample_keys is None else sample_keys.take(at)
            sampled = gumbel_sample(sample_logits, config.sampling_temperature, keys)  # (M,)
            original_ids = torch.where(chosen, labels, input_ids)
            replaced_input_ids = original_ids.put(at, sampled)  # flat positions, the batch's shape: no views
            rtd_labels = (replaced_input_ids != original_ids) & real  # (B, T)
        # End copy source: fake_data

        # 3. the discriminator tells every real token of the corrupted sequence: original or replaced
        disc_outputs = self.discriminate(replaced_input_ids, **encoder_inputs)
        rtd_logits = self.discriminator_predictions(disc_outputs.last_hidden_state)  # (B, T)
        # Copy source: rtd_loss
        # over the real tokens by weighting, not selecting: every shape stays the batch's (no host sync)
        rtd_sum = F.binary_cross_entropy_with_logits(
            rtd_logits.float(), rtd_labels.float(), weight=real.float(), reduction="sum"
        )
        rtd_loss = rtd_sum / _denominator(num_items_in_batch, "attention_mask", n_real, n_chosen)
        # End copy source: rtd_loss

        # 4. the combined loss (the generator's term left out while it is frozen)
        loss = config.discriminator_weight * rtd_loss
        if not frozen_generator:  # (a weight of 1, the paper's, multiplies nothing: one operation fewer)
            loss = loss + (mlm_loss if config.generator_weight == 1.0 else config.generator_weight * mlm_loss)
        metrics = (
            self.diagnostics(prediction_logits, targets, sampled, rtd_logits, rtd_labels, real)
            if return_metrics
            else {}
        )
        return BertologyElectraForPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            prediction_logits=prediction_logits,
            rtd_logits=rtd_logits,
            replaced_input_ids=replaced_input_ids,
            rtd_labels=rtd_labels.long(),
            hidden_states=disc_outputs.hidden_states,
            attentions=disc_outputs.attentions,
            **metrics,
        )

    def encoder_inputs(self, attention_mask, token_type_ids, position_ids, **kwargs) -> dict:
        """What both encoders take besides the ids; a padding-free batch (`cu_seq_lens_q`) drops the mask: the
        boundaries keep examples apart."""
        if kwargs.get("cu_seq_lens_q") is not None:
            if self.config._attn_implementation not in PACKED_IMPLEMENTATIONS:
                raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
            attention_mask = None
        return dict(attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids, **kwargs)

    def generate_logits(self, input_ids, at, frozen: bool = False, **encoder_inputs) -> torch.Tensor:
        """The generator's `(M, V)` logits at the chosen flat positions `at` only (sparse, as the official
        `_get_masked_lm_output` gathers `masked_lm_positions`); no gradient while the generator is frozen."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
            gen_hidden = self.generator.electra(input_ids, **encoder_inputs).last_hidden_state
            gen_hidden = gen_hidden.flatten(0, 1).index_select(0, at)  # (M, H_G): the chosen tokens
            gen_hidden = self.generator.generator_predictions(gen_hidden)  # (M, E)
            return self.generator.generator_lm_head(gen_hidden)  # (M, V)

    def discriminate(self, input_ids, **encoder_inputs) -> ModelOutput:
        """The discriminator's encoder on `input_ids` (its head, `discriminator_predictions`, gives the logits), as
        DeBERTa-v3's and the composed models' `discriminate`."""
        return self.electra(input_ids, **encoder_inputs)

    @torch.no_grad()
    def diagnostics(self, prediction_logits, targets, sampled, rtd_logits, rtd_labels, real) -> dict:
        """Accuracies and the official `metric_fn`'s `disc_*` over the real tokens (no gradient, no host sync)."""
        n_chosen, n_real = targets.ne(-100).sum(), real.sum()
        predicted, replaced = (rtd_logits > 0) & real, rtd_labels
        true_positives = (predicted & replaced).sum()
        return {
            "mlm_accuracy": (prediction_logits.argmax(-1) == targets).sum() / n_chosen,
            "rtd_accuracy": ((predicted == replaced) & real).sum() / n_real,
            "replaced_fraction": replaced.sum() / n_real,
            "disc_auc": binary_auc(rtd_logits, rtd_labels, real),
            "disc_precision": true_positives / predicted.sum(),  # 0 / 0 = NaN: undefined, not 0
            "disc_recall": true_positives / replaced.sum(),
            "sampled_accuracy": (sampled == targets).sum() / n_chosen,  # a fixed-shape batch pads the targets
        }
