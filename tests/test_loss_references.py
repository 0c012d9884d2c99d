"""Every pretraining loss recomputed from the model's own logits and the batch's labels in plain torch (issue 30).

The models return (or a forward hook exposes) their logits; the references below are a few lines each, written
from the papers' definitions, never by calling the code under test: MLM and SBO are the mean negative
log-likelihood of the labelled tokens, RTD the mean binary cross-entropy over the real (non-padding) tokens with
"replaced" = the sampled token differs from the original, a sentence task the mean cross-entropy over the examples,
and the total is the documented weighted sum. Each family and composed cell runs on a real collator's padded batch
(with no counts: the evaluation path) and on its padding-free form where the encoder packs. Label smoothing in a
cross-entropy, padding counted in RTD or its denominator, or a composed cell dropping a loss term fails here. Every
logged diagnostic (accuracies, RTD's share replaced, AUC, precision, recall) is checked the same way, over the real
tokens only, and every RTD model logs the same ones.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from hf_bertology.collators.flatten import flatten_batch
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.recipes import BACKBONES, get_recipe
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention
from platform_support import no_dropout

# (recipe, documented loss weights) — docs/recipes/electra.md 1·MLM + 50·RTD, deberta_v3.md 1·MLM + 10·RTD,
# spanbert.md MLM + 1·SBO.
CASES = [
    "bert-tiny",
    "roberta-tiny",
    "albert-tiny",
    "modernbert-tiny",
    "xlnet-tiny",  # the PLM loss on the query stream's targets
    "spanbert-tiny",
    "electra-tiny",
    "deberta-v3-tiny",
    "bert-tiny@roberta",  # MLM + NSP on another encoder
    "albert-tiny@bert",  # MLM + SOP
    "spanbert-tiny@roberta",  # MLM + SBO
    "electra-tiny@bert",  # RTD
    "deberta-v3-tiny@roberta",
]
# (generator, discriminator) weights: ELECTRA §3.2 λ = 50; DeBERTa-v3's official rtd.sh leaves --rtd_lambda at its
# default 10 (DeBERTa/apps/tasks/rtd_task.py; docs/recipes/deberta_v3.md), also on another encoder.
RTD_WEIGHTS = {"electra": (1.0, 50.0), "deberta-v3": (1.0, 10.0)}
SBO_WEIGHT = 1.0  # SpanBERT README: --pair-loss-weight 1.0
LENGTH = 48
LABELLED_BIAS = 3.0  # logits' std is ~3 at initializer_range 0.5: the labelled tokens become likely, not certain


@pytest.fixture(scope="module")
def corpus(corpus_file):
    return load_corpus(train_files=[str(corpus_file)])


_SETUPS: dict = {}


def setup(name: str, corpus):
    """(model, padded batch) of recipe `name` (`objective-tiny[@backbone]`), built once."""
    if name not in _SETUPS:
        recipe_name, _, backbone = name.partition("@")
        # weights 25x the usual init spread the logits: near-uniform logits (std 0.02 init) make a label-smoothed
        # cross-entropy differ from the plain one by ~1e-5 relative, under the tolerance (`smoothing_shift`)
        overrides = {**no_dropout(name), "initializer_range": 0.5}
        recipe = get_recipe(recipe_name, **({"backbone": backbone} if backbone else {}), **overrides)
        tokenizer = recipe.train_tokenizer(corpus["text"], 300)
        recipe.adapt_to_tokenizer(tokenizer)
        recipe.fit_to_length(LENGTH)
        examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, LENGTH, 0)
        features = [dict(examples[i]) for i in range(6)]
        if len({len(f["input_ids"]) for f in features}) == 1:  # full rows (FULL-SENTENCES): shorten two of them
            for f in features[1::3]:
                n = len(f["input_ids"])
                f.update({k: v[: n - 8] + v[-1:] for k, v in f.items() if isinstance(v, list) and len(v) == n})
        batch = recipe.build_collator(tokenizer, seed=3)(features)
        torch.manual_seed(0)
        _SETUPS[name] = (recipe, batch)
    recipe, batch = _SETUPS[name]
    torch.manual_seed(0)
    model = recipe.build_model().train()
    # Label smoothing pulls a cross-entropy toward the vocabulary's mean -log p. At init a labelled token is an
    # average token, so that pull is ~0 and the draw (the tokenizer's ids, the seed) decided whether smoothing could
    # show: CI once drew 2e-5. Raising the labelled tokens in every vocabulary-sized output bias makes the pull
    # 0.025-0.066 over 16 draws here (`smoothing_shift`), as training would.
    labelled = batch["labels"][batch["labels"].ne(-100)].unique()
    with torch.no_grad():
        for key, parameter in model.named_parameters():
            if key.endswith("bias") and parameter.dim() == 1 and parameter.numel() == vocab_size(model):
                parameter[labelled] += LABELLED_BIAS
    return model, recipe, batch


def vocab_size(model) -> int:
    """The vocabulary of the model's (or its generator's) masked-LM head."""
    config = getattr(getattr(model, "generator", None), "config", model.config)
    return config.vocab_size


def nll(logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Mean negative log-likelihood of `targets` under `logits` `(N, V)`; with label smoothing eps, each target's
    (1 - eps) * -log p(target) + eps * the mean over the vocabulary of -log p (Szegedy et al. 2016, §7; transformers'
    `LabelSmoother`)."""
    log_probs = logits.double().log_softmax(-1)
    return (-(1 - smoothing) * log_probs.gather(1, targets[:, None]) - smoothing * log_probs.mean(-1)).mean()


def smoothing_shift(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Relative change of the mean cross-entropy of `targets` under `logits` with label smoothing 0.1."""
    log_probs = logits.double().log_softmax(-1)
    plain = -log_probs.gather(1, targets[:, None]).mean()
    return (0.1 * (-log_probs.mean(-1).mean() - plain)).abs() / plain


def run(model, batch: dict) -> tuple[object, dict]:
    """The model's output on `batch`, with what the references need that the output does not carry: the
    generator's samples, the sentence classifier's and the SBO head's logits (forward hooks).

    An untrained generator over 300 tokens almost never samples the original token, so "replaced" would equal
    "chosen" and a model labelling every chosen token replaced would pass: every other sample is set to the
    original token here (the model uses what `sample_tokens` returns)."""
    seen: dict = {}
    targets = batch["labels"][batch["labels"].ne(-100)]  # (M,) in the row-major order the models sample in
    # every RTD step samples through `replaced_token_detection.fake_data`, which calls this module's `sample_tokens`
    module = sys.modules["hf_bertology.models.replaced_token_detection"]
    original = getattr(module, "sample_tokens", None)
    hooks = []
    for attr in ("sentence_classifier", "sbo"):
        if isinstance(getattr(model, attr, None), torch.nn.Module):
            hooks.append(
                getattr(model, attr).register_forward_hook(lambda m, a, out, key=attr: seen.__setitem__(key, out))
            )

    def recording(*args, **kwargs):
        sampled = original(*args, **kwargs)
        sampled[::2] = targets[::2]
        seen["sampled"] = sampled
        return sampled

    try:
        if original is not None:
            module.sample_tokens = recording
        torch.manual_seed(7)
        output = model(**batch)
    finally:
        if original is not None:
            module.sample_tokens = original
        for hook in hooks:
            hook.remove()
    return output, seen


def references(model, batch: dict, output, seen: dict, objective: str, smoothing: float) -> dict[str, torch.Tensor]:
    """Each component loss and the total, from logits and labels only; `objective`: the recipe family whose loss
    weights apply (`electra`, `deberta-v3`, ...); `smoothing`: the label smoothing of the language-model losses
    (MLM, PLM, SBO: vocabulary predictions), never of the sentence and RTD losses."""
    labels = batch["labels"]
    chosen = labels.ne(-100)
    ref: dict[str, torch.Tensor] = {}
    mlm_logits = output.prediction_logits if getattr(output, "prediction_logits", None) is not None else output.logits
    lm = "plm_loss" if objective == "xlnet" else "mlm_loss"
    ref[lm] = nll(mlm_logits, labels[chosen], smoothing)  # row-major order of the labelled tokens
    # the check has power: label smoothing would move the loss by 100x the tolerance of `check` at least
    assert smoothing_shift(mlm_logits, labels[chosen]) > 1e-3
    total = ref[lm]
    if "sampled" in seen:  # replaced-token detection
        real = batch["attention_mask"].bool()
        original = torch.where(chosen, labels, batch["input_ids"])
        replaced = original.clone()
        replaced[chosen] = seen["sampled"]
        is_replaced = (replaced != original).double()
        assert 0 < is_replaced[chosen].mean() < 1  # both kinds among the chosen tokens
        logits = output.rtd_logits.double()
        ref["rtd_loss"] = F.binary_cross_entropy_with_logits(logits[real], is_replaced[real])
        if getattr(output, "replaced_input_ids", None) is not None:
            assert torch.equal(output.replaced_input_ids, replaced)
        generator_weight, discriminator_weight = RTD_WEIGHTS[objective]
        total = generator_weight * ref["mlm_loss"] + discriminator_weight * ref["rtd_loss"]
    if "sbo_labels" in batch:
        sbo_logits = output.sbo_logits if getattr(output, "sbo_logits", None) is not None else seen.get("sbo")
        # a value check, not a KeyError: labels for a head the model never ran is a dropped loss term
        assert sbo_logits is not None and getattr(output, "sbo_loss", None) is not None, "SBO labels, no SBO loss"
        sbo_labels = batch["sbo_labels"]
        ref["sbo_loss"] = nll(sbo_logits, sbo_labels[sbo_labels.ne(-100)], smoothing)
        total = total + SBO_WEIGHT * ref["sbo_loss"]
    for key, task in (("next_sentence_label", "nsp_loss"), ("sentence_order_label", "sop_loss")):
        if key in batch:
            sentence_logits = getattr(output, "seq_relationship_logits", None)
            if sentence_logits is None:
                sentence_logits = getattr(output, "sop_logits", None)
            if sentence_logits is None:
                sentence_logits = seen.get("sentence_classifier")
            assert sentence_logits is not None and getattr(output, task, None) is not None, f"{key}, no {task}"
            ref[task] = nll(sentence_logits, batch[key])
            total = total + ref[task]
    ref["loss"] = total
    return ref


def metric_references(batch: dict, output, seen: dict) -> dict[str, torch.Tensor]:
    """Every logged diagnostic over the real tokens only, from logits and labels: the accuracies of each head, and
    for RTD the discriminator's accuracy, the share replaced, the samples' accuracy and the official `disc_auc`,
    `disc_precision`, `disc_recall` (sklearn's AUC; "replaced" at logit > 0)."""
    from sklearn.metrics import roc_auc_score

    labels = batch["labels"]
    chosen = labels.ne(-100)
    ref: dict[str, torch.Tensor] = {}

    def accuracy(logits, targets):
        return (logits.argmax(-1) == targets).double().mean()

    lm_logits = output.prediction_logits if getattr(output, "prediction_logits", None) is not None else output.logits
    ref["plm_accuracy" if getattr(output, "plm_loss", None) is not None else "mlm_accuracy"] = accuracy(
        lm_logits, labels[chosen]
    )
    if "sbo_labels" in batch:
        sbo = batch["sbo_labels"]
        logits = output.sbo_logits if getattr(output, "sbo_logits", None) is not None else seen["sbo"]
        ref["sbo_accuracy"] = accuracy(logits, sbo[sbo.ne(-100)])
    for key, task in (("next_sentence_label", "nsp"), ("sentence_order_label", "sop")):
        if key in batch:
            logits = getattr(output, "seq_relationship_logits", None)
            logits = logits if logits is not None else getattr(output, "sop_logits", None)
            logits = logits if logits is not None else seen["sentence_classifier"]
            ref[f"{task}_accuracy"] = accuracy(logits, batch[key])
    if "sampled" in seen:
        real = batch["attention_mask"].bool()
        original = torch.where(chosen, labels, batch["input_ids"])
        replaced = original.clone()
        replaced[chosen] = seen["sampled"]
        is_replaced = (replaced != original)[real]
        scores = output.rtd_logits.detach()[real]
        predicted = scores > 0
        ref["sampled_accuracy"] = (seen["sampled"] == labels[chosen]).double().mean()
        ref["rtd_accuracy"] = (predicted == is_replaced).double().mean()
        ref["replaced_fraction"] = is_replaced.double().mean()
        ref["disc_auc"] = torch.tensor(roc_auc_score(is_replaced.numpy(), scores.double().numpy()), dtype=torch.double)
        ref["disc_precision"] = (predicted & is_replaced).double().sum() / predicted.sum()
        ref["disc_recall"] = (predicted & is_replaced).double().sum() / is_replaced.sum()
    return ref


def check(model, batch: dict, name: str, smoothing: float = 0.0) -> None:
    model.token_loss.label_smoothing = smoothing  # what `BertologyTrainer` sets from --label_smoothing_factor
    output, seen = run(model, batch)
    objective = name.split("@")[0].rsplit("-", 1)[0]
    ref = references(model, batch, output, seen, objective, smoothing)
    assert set(ref) - {"loss"} == {k for k in ref if getattr(output, k, None) is not None} - {"loss"}
    for key, value in ref.items():
        torch.testing.assert_close(getattr(output, key).double(), value, rtol=1e-5, atol=1e-6, msg=key)
    # every other scalar the model logs is a diagnostic, and each equals its value over the real tokens
    metrics = metric_references(batch, output, seen)
    logged = {k for k, v in output.items() if torch.is_tensor(v) and v.dim() == 0 and not k.endswith("loss")}
    assert logged == set(metrics), (logged, set(metrics))
    for key, value in metrics.items():
        torch.testing.assert_close(output[key].double(), value, rtol=1e-5, atol=1e-6, equal_nan=True, msg=key)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("name", CASES)
def test_losses_equal_the_references_on_a_padded_batch(name, smoothing, corpus):
    model, recipe, batch = setup(name, corpus)
    real = batch["attention_mask"].bool()
    assert not real.all(), "the batch must hold padding, else padding in a loss cannot show"
    assert real.sum(1).min() > 0
    if "next_sentence_label" in batch or "sentence_order_label" in batch:
        labels = batch.get("next_sentence_label", batch.get("sentence_order_label"))
        assert 0 < labels.sum() < len(labels)
    check(model, batch, name, smoothing)


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in CASES
        if (get_recipe(n.split("@")[0]).variant.backbone if "@" not in n else n.split("@")[1]) is not None  # XLNet
        and BACKBONES[get_recipe(n.split("@")[0]).variant.backbone if "@" not in n else n.split("@")[1]].packable
    ],
)
def test_losses_equal_the_references_on_a_padding_free_batch(name, corpus):
    model, recipe, batch = setup(name, corpus)
    check(set_attention(model, PACKED_ATTENTION), flatten_batch(batch), name)


def test_stock_trainer_count_weights_nsp_by_the_share_of_masked_tokens(corpus):
    """The stock Trainer passes one int (the step's masked tokens, N): MLM is then sum / N and NSP its mean
    weighted by this micro-batch's share of N (README, "Loss normalisation")."""
    model, recipe, batch = setup("bert-tiny", corpus)
    n_step = 3 * int(batch["labels"].ne(-100).sum())  # as if this were one micro-batch of three
    output = model(**batch, num_items_in_batch=n_step)
    labels = batch["labels"]
    chosen = labels.ne(-100)
    share = chosen.sum() / n_step
    mlm = nll(output.prediction_logits, labels[chosen]) * chosen.sum() / n_step
    nsp = nll(output.seq_relationship_logits, batch["next_sentence_label"]) * share
    torch.testing.assert_close(output.mlm_loss.double(), mlm, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(output.nsp_loss.double(), nsp, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(output.loss.double(), mlm + nsp, rtol=1e-5, atol=1e-7)


def test_every_rtd_model_returns_the_same_fields_and_diagnostics(corpus):
    """ELECTRA, DeBERTa-v3 and the RTD cells: one output contract (the same fields under the same names, the
    generator's logits as `prediction_logits`, the discriminator's input and labels) and the same diagnostics."""
    fields = {}
    for name in ("electra-tiny", "deberta-v3-tiny", "electra-tiny@bert", "deberta-v3-tiny@roberta"):
        model, _, batch = setup(name, corpus)
        fields[name] = frozenset(model(**batch).keys())
    assert len(set(fields.values())) == 1, fields
    assert {"prediction_logits", "replaced_input_ids", "rtd_labels", "disc_auc", "sampled_accuracy"} <= fields[name]
