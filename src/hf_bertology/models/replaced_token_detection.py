"""Replaced-token detection (ELECTRA §2, DeBERTa-v3 §3) as two objectives, written once: `Generator` (the generator's
masked LM and the sampling of the fake tokens, which become the backbone's input) and `ReplacedTokenDetection` (the
discriminator's head and loss over the real tokens); the heads, the diagnostics, and DeBERTa-v3's
gradient-disentangled embedding sharing (GDES, §3.3).

Used by ELECTRA, DeBERTa-v3 and every RTD cell of `modeling_composed` (`[Generator, ReplacedTokenDetection]`).
"""

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .masked_lm import MLM_HEADS
from .objective import EVERY_ROW, Batch, Objective
from .outputs import step_mean
from .span_boundary import activation, layer_norm_eps
from .step import encoder_rows

# parameter names of the backbones' embedding tables (ModernBERT's word table is `tok_embeddings`)
WORD_TABLES = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")
POSITION_TABLE = "embeddings.position_embeddings.weight"
OTHER_TABLES = (POSITION_TABLE, "embeddings.token_type_embeddings.weight")


def keyed_uniform(keys: torch.Tensor, size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`(M, size)` uniforms in [0, 1): entry (m, v) a hash of `keys[m]` (int64) and v (SplitMix64 on a counter, as
    hf_bertology's collators draw their masks), so the noise of an example's token does not depend on the process,
    the batch or the random state. The top 24 bits (float32) or 53 (float64, whose top 24 are float32's) of
    SplitMix64's finaliser without its last step, each exact. Sampling reads one float64 a row (`size=1`)."""
    golden, mix1, mix2 = -7046029254386353131, -4658895280553007687, -7723592293110705685  # SplitMix64's, signed
    golden_inverse = -1018231460777725123  # golden * golden_inverse = 1 (mod 2**64): golden is odd

    def shift(x: torch.Tensor, bits: int) -> torch.Tensor:  # logical right shift of int64 (`>>` keeps the sign)
        return (x >> bits) & ((1 << (64 - bits)) - 1)

    counters = torch.arange(1, size + 1, device=keys.device) if size > 1 else None
    if counters is None:  # one a row (sampling): counter 1, `key + golden`, no index tensor
        x = (keys + golden)[:, None]
    elif torch.compiler.is_compiling():  # the same values as (key * golden_inverse + v) * golden: no index times a
        # 64-bit constant, which Inductor (torch <= 2.11) folds into int32 index arithmetic that Triton refuses
        # (pytorch #183901); one operation more, which the compiled kernel fuses away
        x = torch.add(counters, keys[:, None], alpha=golden_inverse).mul_(golden)
    else:
        x = torch.add(keys[:, None], counters, alpha=golden)  # (M, size): key + v * golden, wrapping int64
    x = (x ^ shift(x, 30)) * mix1
    x = (x ^ shift(x, 27)) * mix2
    # SplitMix64's last step, x ^ (x >>> 31), leaves bits 40-63 as they are: float32's are SplitMix64's. Below them
    # it changes bits 11-32 of float64's, which two rounds have mixed already and which only place a draw within a
    # 2**-24 slice: skipped too, three operations a step (tests/test_keyed_sampling.py: uniform below 2**-24).
    if dtype == torch.float64:  # (53-bit integers: exact); int64 times a float would be float32
        return shift(x, 11).double() * 2.0**-53
    return shift(x, 40) * 2.0**-24  # int64 times a float is float32 (24-bit integers: exact), in one operation


def softmax_cdf(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """`(M, V)` float64: the running sums of `softmax(logits / temperature)` computed in float64 (the division too),
    the CDF `sample_tokens` inverts. A float32 softmax and running sum were off the softmax by a total variation of
    3e-4 at 30k tokens, 1e-3 at 128k (`benchmarks/rtd_sampling_accuracy.py`, docs/speed.md)."""
    if temperature != 1.0:
        logits = logits.double() / temperature
    return torch.softmax(logits, -1, dtype=torch.float64).cumsum_(-1)


@torch.no_grad()
def sample_tokens(logits: torch.Tensor, temperature: float = 1.0, keys: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids drawn from `softmax(logits / temperature)` (ELECTRA's `sample_from_softmax`), one uniform a row:
    the first token whose cumulative probability exceeds it (inverse CDF), in float64, without gradient.

    ELECTRA draws Gumbel noise for every (row, token), (M, V) random values; the inverse CDF gives the same
    distribution from M (issue 44: 75M hashed values per ELECTRA-small step before). `keys` (`(M,)` int64) make
    row m's uniform a hash of its key (`keyed_uniform`), else it comes from torch's random state; 53 bits either
    way, so a token of probability below 2**-24 is drawn at its rate. A token of probability 0 (the original under
    `disallow`: its logit -1e9) is never drawn: the CDF is flat across it.
    """
    cdf = softmax_cdf(logits, temperature)  # (M, V), non-decreasing
    total = cdf[:, -1:]  # (M, 1): 1 up to rounding
    uniform = (
        torch.rand(len(cdf), 1, device=cdf.device, dtype=torch.float64)
        if keys is None
        else keyed_uniform(keys, 1, torch.float64)
    )
    # u (at most 1 - 2**-53) times the total rounds to below the total (to nearest: its distance exceeds half a unit
    # in the last place, or at a power of 2 the product is exact): the first index whose cdf exceeds it is inside
    # the vocabulary
    return torch.searchsorted(cdf, uniform * total, right=True).squeeze(1)  # (M,)


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


def last_layer_states(backbone: nn.Module, input_ids: torch.Tensor, at: torch.Tensor, inputs: dict) -> torch.Tensor:
    """`(M, H)` states of `backbone`'s last layer at the chosen tokens `at`, the layer run on those rows only where
    it can (`last_layer.subset_inputs`), as the official `_get_masked_lm_output` gathers `masked_lm_positions`."""
    return encoder_rows(lambda ids, kwargs: backbone(ids, **kwargs), backbone, input_ids, at, inputs)[1]  # (M, H)


def discriminator_logits(head: nn.Module, hidden_states: torch.Tensor, cu_seq_lens) -> torch.Tensor:
    """`(B, T)` logits of the discriminator's head: DeBERTa-v3's reads each example's [CLS] (its start in a
    padding-free row, `cu_seq_lens`), ELECTRA's each token alone."""
    if isinstance(head, ClsReplacedTokenDetectionHead):
        return head(hidden_states, cu_seq_lens)
    return head(hidden_states)


class Chosen(NamedTuple):
    """The chosen tokens of a batch: where (`mask`, `(B, T)`; `at`, their flat indices, the collator's or else a
    boolean index, which syncs), their labels (`targets`, `(M,)`) and count, and the real tokens (RTD's weights)."""

    mask: torch.Tensor
    at: torch.Tensor
    targets: torch.Tensor
    count: torch.Tensor
    real: torch.Tensor
    n_real: torch.Tensor


def chosen_tokens(
    labels: torch.Tensor, target_positions: torch.Tensor | None, real_mask: torch.Tensor | None
) -> Chosen:
    chosen = labels.ne(-100)  # (B, T)
    at = chosen.flatten().nonzero().squeeze(1) if target_positions is None else target_positions  # (M,)
    real = real_mask.bool() if real_mask is not None else torch.ones_like(chosen)
    return Chosen(chosen, at, labels.take(at), chosen.sum(), real, real.sum())


@torch.no_grad()
def fake_data(chosen: Chosen, prediction_logits, labels, input_ids, sample_keys, temperature, disallow=False):
    """ELECTRA's `_get_fake_data`: the input unmasked, then every chosen token replaced by a sample of the
    generator's softmax (`sample_tokens`), without gradient. `(sampled (M,), replaced_input_ids, rtd_labels (B,
    T))`; a token is "replaced" (1) only where the sample differs from the original."""
    sample_logits = prediction_logits  # read without gradient (no_grad): no detached view
    if disallow:  # the official `disallow_correct`: never sample the original (a copy: the logits feed the MLM loss)
        rows = torch.arange(len(chosen.targets), device=labels.device)
        sample_logits = sample_logits.index_put((rows, chosen.targets), torch.tensor(-1e9, device=labels.device))
    keys = None if sample_keys is None else sample_keys.take(chosen.at)
    sampled = sample_tokens(sample_logits, temperature, keys)  # (M,)
    original_ids = torch.where(chosen.mask, labels, input_ids)
    replaced_input_ids = original_ids.put(chosen.at, sampled)  # flat positions, the batch's shape: no views
    return sampled, replaced_input_ids, (replaced_input_ids != original_ids) & chosen.real


def rtd_loss(rtd_logits, rtd_labels, chosen: Chosen, num_items_in_batch, key: str = "attention_mask") -> torch.Tensor:
    """The discriminator's sigmoid BCE summed over every real token ([CLS]/[SEP] included), over the step's count
    of them (`key`: the Trainer's count of those tokens); by weighting, not selecting, so every shape stays the
    batch's (no host sync)."""
    weight = chosen.real.float()
    rtd_sum = F.binary_cross_entropy_with_logits(
        rtd_logits.float(), rtd_labels.float(), weight=weight, reduction="sum"
    )
    return rtd_sum / step_mean(num_items_in_batch, key, chosen.n_real, chosen.count)


@torch.no_grad()
def generator_diagnostics(prediction_logits, sampled, chosen: Chosen, name: str = "mlm") -> dict:
    """The generator's accuracy and its samples' (`sampled_accuracy`) over the chosen tokens (no gradient)."""
    return {
        f"{name}_accuracy": (prediction_logits.argmax(-1) == chosen.targets).sum() / chosen.count,
        "sampled_accuracy": (sampled == chosen.targets).sum() / chosen.count,
    }


@torch.no_grad()
def rtd_diagnostics(rtd_logits, rtd_labels, chosen: Chosen) -> dict:
    """The discriminator's diagnostics over the real tokens (no gradient, no host sync): its accuracy, the share of
    real tokens replaced, and the official ELECTRA `metric_fn`'s `disc_auc`, `disc_precision`, `disc_recall`
    ("replaced" at logit > 0; 0 / 0 = NaN: undefined, not 0)."""
    real, n_real = chosen.real, chosen.n_real
    predicted = (rtd_logits > 0) & real
    true_positives = (predicted & rtd_labels).sum()
    return {
        "rtd_accuracy": ((predicted == rtd_labels) & real).sum() / n_real,
        "replaced_fraction": rtd_labels.sum() / n_real,
        "disc_auc": binary_auc(rtd_logits, rtd_labels, real),
        "disc_precision": true_positives / predicted.sum(),
        "disc_recall": true_positives / rtd_labels.sum(),
    }


class DiscriminatorHead(nn.Module):
    """ELECTRA's `ElectraDiscriminatorPredictions` (same names) on any encoder: dense -> act -> one logit a token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)  # (B, T)


class ClsReplacedTokenDetectionHead(nn.Module):
    """DeBERTa-v3's `LMMaskPredictionHead` (official `replaced_token_detection_model.py:30-49`): LayerNorm(h_[CLS] +
    h_i) -> dense -> act -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = activation(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=layer_norm_eps(config))
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor, cu_seq_lens: torch.Tensor | None = None) -> torch.Tensor:
        """`cu_seq_lens`: a padding-free row's example starts, so each token reads its own example's [CLS]."""
        if cu_seq_lens is None:
            cls = hidden_states[:, :1]  # (B, 1, H)
        else:  # (T,) the start of each token's example
            lengths = (cu_seq_lens[1:] - cu_seq_lens[:-1]).long()
            first = torch.repeat_interleave(cu_seq_lens[:-1].long(), lengths, output_size=hidden_states.shape[1])
            cls = hidden_states[0, first][None]  # (1, T, H)
        states = self.LayerNorm(cls + hidden_states)  # every token sees its example's [CLS]
        return self.classifier(self.transform_act_fn(self.dense(states))).squeeze(-1)  # (B, T)


class GradientDisentangledEmbedding(nn.Module):
    """GDES (DeBERTa-v3 §3.3, official `RTDModel.register_discriminator_fw_hook`): E_D = sg(E_G) + Δ, Δ starting at
    zero. The rows are gathered before the sum, so no (vocab, hidden) tensor is built per step."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor, generator_table: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, generator_table).detach() + F.embedding(input_ids, self.delta)  # (B, T, E)


def _table(module: nn.Module, name: str) -> nn.Parameter:
    return module.get_parameter(name)


def add_gdes(model: nn.Module, word_table: str, share_positions: bool) -> None:
    """Give `model` (a discriminator at `model.base_model`, a generator at `model.generator`) GDES on its word table
    and, where `share_positions` (the official shares both, `rtd_task.py:56-64`), its absolute position table."""
    model.gdes = GradientDisentangledEmbedding(*_table(model.base_model, word_table).shape)
    model._gdes_tables = (f"{model.base_model_prefix}.{word_table}", word_table)
    if share_positions:
        model.gdes_positions = GradientDisentangledEmbedding(*_table(model.base_model, POSITION_TABLE).shape)
    model.register_state_dict_post_hook(merge_gdes)


def gdes_tables(model: nn.Module) -> list[tuple[str, GradientDisentangledEmbedding]]:
    """(table name in the backbone, its GDES) of each table GDES shares; none without GDES."""
    if not hasattr(model, "gdes"):
        return []
    tables = [(model._gdes_tables[1], model.gdes)]
    if hasattr(model, "gdes_positions"):
        tables.append((POSITION_TABLE, model.gdes_positions))
    return tables


def merge_gdes(module: nn.Module, state_dict: dict, prefix: str, local_metadata) -> None:
    """State-dict hook: E_G + Δ written as the discriminator's table (so a checkpoint is a complete plain backbone);
    only plain state dicts (`keep_vars=False`, what saving uses) are rewritten, the parameters never change."""
    for name, gdes in gdes_tables(module):
        key = f"{prefix}{module.base_model_prefix}.{name}"
        if key not in state_dict or isinstance(state_dict[key], nn.Parameter) or state_dict[key].is_meta:
            continue
        state_dict[key] = _table(module.generator.base_model, name).detach() + gdes.delta.detach()


def gdes_pairs(model: nn.Module) -> list[tuple[nn.Parameter, nn.Parameter, nn.Parameter]]:
    """(the discriminator's saved table, the generator's table, Δ) of each table GDES shares: the saved table is the
    generator's + Δ (`merge_gdes`); starting from two released networks sets Δ from the other two."""
    return [
        (_table(model.base_model, name), _table(model.generator.base_model, name), gdes.delta)
        for name, gdes in gdes_tables(model)
    ]


def freeze_gdes_slots(model: nn.Module) -> None:
    """Under GDES the discriminator's own tables are slots for E_G + Δ that only saving fills: frozen (so DDP waits
    for no gradient of theirs)."""
    for name, _ in gdes_tables(model):
        _table(model.base_model, name).requires_grad_(False)


def discriminate(model: nn.Module, input_ids: torch.Tensor, **inputs):
    """The discriminator backbone's outputs on `input_ids`; under GDES on sg(E_G) + Δ, and its position table
    sg(P_G) + Δ_P for this call where shared (official `rtd_task.py:120-122`)."""
    if not hasattr(model, "gdes"):
        return model.base_model(input_ids, **inputs)
    generator = model.generator.base_model
    inputs_embeds = model.gdes(input_ids, _table(generator, model._gdes_tables[1]))
    if not hasattr(model, "gdes_positions"):
        return model.base_model(inputs_embeds=inputs_embeds, **inputs)
    positions = _table(generator, POSITION_TABLE).detach() + model.gdes_positions.delta
    call = {"inputs_embeds": inputs_embeds, **inputs}
    return torch.func.functional_call(model.base_model, {POSITION_TABLE: positions}, (), call)


class Generator(Objective):
    """ELECTRA's generator as the objective that corrupts the input (§2): its masked LM on the chosen tokens, then
    every chosen token replaced by a sample of its softmax (`fake_data`); the backbone then reads the samples.

    Reads `labels` (the originals at the chosen positions), `target_positions` and `sample_keys`; returns
    `<name>_loss` (its term, `weight` = `generator_weight`), the logits (`logits_name`), `<name>_accuracy`,
    `sampled_accuracy` and `replaced_input_ids` (ELECTRA's names: `mlm_*`, `prediction_logits`), and leaves the chosen tokens and the samples for the next objective
    (`batch.outputs`). The network is the model's `generator` (a family `*ForMaskedLM`); `states(backbone,
    input_ids, at, inputs) -> (M, H)` its states at the chosen tokens (DeBERTa-v3's: its enhanced mask decoder),
    `family`: the generator's `model_type`, whose head reads the states (`masked_lm.MLM_HEADS`). In ELECTRA's two stages it
    trains alone, then is frozen. `clips_apart`: its gradient norm clipped apart from the rest (DeBERTa-v3's one
    optimizer a network, `rtd_task.py:265,351`; `gradient_clipping_groups`)."""

    name = "mlm"
    reads = ("labels", "target_positions", "sample_keys")
    counted_in = ("joint", "generator")  # frozen in the discriminator stage
    corrupts = True

    def __init__(self, config, family: str, states: Callable = last_layer_states, clips_apart: bool = False,
                 name: str = "mlm", logits_name: str = "prediction_logits"):  # fmt: skip
        super().__init__()
        self.family, self.states, self.clips_apart = family, states, clips_apart
        self.name, self.logits_name = name, logits_name
        self.weight = config.generator_weight
        self.temperature = config.sampling_temperature
        self.disallow = getattr(config, "disallow_correct", False)

    def corrupt(self, model, batch: Batch, input_ids, inputs: dict):
        labels = batch.get("labels")
        if labels is None:  # only the discriminator runs, on `input_ids`
            return input_ids, {}
        # the real tokens (RTD's weights) come from the mask before a packed batch drops it: a fixed-shape batch
        # (`collators.fixed_shape`) has filler slots that are not real
        chosen = chosen_tokens(labels, batch.get("target_positions"), batch.get("attention_mask"))
        # 1. the generator predicts the original token at every chosen position (masked LM, sparse)
        frozen = model.training_stage not in self.counted_in
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
            states = self.states(model.generator.base_model, input_ids, chosen.at, inputs)  # (M, H)
            prediction_logits = MLM_HEADS[self.family](model.generator, states)  # (M, V)
        mlm_sum = model.token_loss(prediction_logits, chosen.targets)  # the language-model loss (`token_loss`)
        mlm_loss = mlm_sum / step_mean(batch.num_items_in_batch, "labels", chosen.count, chosen.count)
        out = {"loss": mlm_loss, self.logits_name: prediction_logits, f"{self.name}_loss": mlm_loss}
        if model.training_stage == "generator":  # the generator alone: nothing is sampled
            if batch.return_metrics:
                out[f"{self.name}_accuracy"] = (prediction_logits.argmax(-1) == chosen.targets).sum() / chosen.count
            return input_ids, out
        # 2. the fake data: every chosen token replaced by a sample of the generator's softmax
        sampled, replaced_input_ids, rtd_labels = fake_data(
            chosen, prediction_logits, labels, input_ids, batch.get("sample_keys"), self.temperature, self.disallow
        )
        batch.outputs.update(chosen=chosen, rtd_labels=rtd_labels)
        if batch.return_metrics:
            out.update(generator_diagnostics(prediction_logits, sampled, chosen, self.name))
        return replaced_input_ids, {**out, "replaced_input_ids": replaced_input_ids}


class ReplacedTokenDetection(Objective):
    """The discriminator (ELECTRA §2): every real token of the generator's corrupted input told original or replaced.

    Reads what `Generator` left (`batch.outputs`: the chosen tokens, `rtd_labels`); every row of the backbone;
    returns `rtd_loss` (its term, `weight` = `discriminator_weight`, λ = 50), `rtd_logits` `(B, T)`, `rtd_labels` and
    the diagnostics (`rtd_diagnostics`). The head is the model's attribute `head_name` (ELECTRA's
    `discriminator_predictions`, DeBERTa-v3's `mask_predictions`). Without labels: the logits alone."""

    name = "rtd"
    stages = ("joint", "discriminator")
    reads_every_row = True
    count_key = "attention_mask"  # the Trainer's count of the tokens its loss reads: the real tokens

    def __init__(self, config, head_name: str = "discriminator_predictions"):
        super().__init__()
        self.head_name, self.weight = head_name, config.discriminator_weight

    def rows(self, batch: Batch):
        return EVERY_ROW

    def forward(self, model, states, batch: Batch) -> dict:
        # 3. the discriminator tells every real token of the corrupted sequence: original or replaced
        rtd_logits = discriminator_logits(getattr(model, self.head_name), states, batch.cu_seq_lens)  # (B, T)
        if "rtd_labels" not in batch.outputs:
            return {"rtd_logits": rtd_logits}
        chosen, rtd_labels = batch.outputs["chosen"], batch.outputs["rtd_labels"]
        loss = rtd_loss(rtd_logits, rtd_labels, self.scored(chosen), batch.num_items_in_batch, self.count_key)
        out = {"loss": loss, "rtd_loss": loss, "rtd_logits": rtd_logits, "rtd_labels": rtd_labels.long()}
        if batch.return_metrics:
            out.update(rtd_diagnostics(rtd_logits, rtd_labels, chosen))
        return out

    def scored(self, chosen: Chosen) -> Chosen:
        """The tokens the loss reads (`chosen.real`, `chosen.n_real`): every real token."""
        return chosen


class MaskedTokenDetection(ReplacedTokenDetection):
    """ELECTRA 15% (ELECTRA §3.2, Table 5): replaced-token detection whose loss comes from the chosen tokens only (the
    15% the generator predicts), not from every real token; the rest, the diagnostics over every real token included
    (the others are all originals), is ELECTRA's."""

    count_key = "labels"  # the Trainer's count of the chosen tokens

    def scored(self, chosen: Chosen) -> Chosen:
        return chosen._replace(real=chosen.mask & chosen.real, n_real=chosen.count)


# `rtd_loss_positions` -> the discriminator's objective: which tokens its loss reads
RTD_LOSSES = {"all": ReplacedTokenDetection, "masked": MaskedTokenDetection}


def rtd_objective(config, head_name: str = "discriminator_predictions") -> ReplacedTokenDetection:
    """The discriminator's objective its config names (`rtd_loss_positions`, absent: every real token)."""
    positions = getattr(config, "rtd_loss_positions", "all")
    if positions not in RTD_LOSSES:
        raise ValueError(f"rtd_loss_positions must be one of {tuple(RTD_LOSSES)}, got {positions!r}")
    return RTD_LOSSES[positions](config, head_name)


def clipping_groups(model: nn.Module) -> list[list[nn.Parameter]] | None:
    """The gradient-norm groups of a model whose generator is clipped apart (`Generator.clips_apart`): the
    generator's parameters, then the rest (`BertologyTrainer` reads `gradient_clipping_groups`); None: the whole
    model at once (ELECTRA: one optimizer, `model/optimization.py:62`)."""
    if not any(getattr(objective, "clips_apart", False) for objective in model.objectives):
        return None
    generator = [p for p in model.generator.parameters() if p.requires_grad]
    in_generator = {id(p) for p in generator}
    return [generator, [p for p in model.parameters() if p.requires_grad and id(p) not in in_generator]]
