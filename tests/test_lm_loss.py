"""One language-model loss (issue 46): `--label_smoothing_factor` through `bertology pretrain`, the swappable hook,
and a batch with no labelled token (finite losses, the empty terms 0) in training and in evaluation.

The per-family values (smoothed and not) against plain-torch references are tests/test_loss_references.py's.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.modules.module import register_module_forward_hook

from hf_bertology.data import load_corpus
from hf_bertology.models.lm_loss import LanguageModelLoss, language_model_loss
from hf_bertology.training.trainer import is_count_key
from test_loss_references import CASES, nll, setup


@pytest.fixture(scope="module")
def corpus(corpus_file):
    return load_corpus(train_files=[str(corpus_file)])


@pytest.mark.parametrize("recipe", ["bert-tiny", "roberta-tiny", "electra-tiny", "xlnet-tiny"])
def test_pretrain_smooths_the_language_model_loss(recipe, tmp_path, corpus_file):
    """`bertology pretrain --label_smoothing_factor 0.1` trains (transformers' `LabelSmoother` used to fail on our
    outputs), and the LM loss of its first step equals the plain-torch smoothed cross-entropy of the step's logits
    and labels; the model's total is more than that term (the other losses, unsmoothed, are there)."""
    from hf_bertology.training.pretrain import main

    seen = []

    def record(module, args, kwargs, output):
        if isinstance(module, LanguageModelLoss) and module.training and kwargs.get("labels") is not None:
            seen.append((module.label_smoothing, kwargs["labels"].detach().clone(), output))

    argv = ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run")]
    flags = ["--vocab_size", "300", "--max_steps", "2", "--per_device_train_batch_size", "4", "--disable_tqdm", "true"]
    flags += ["--gradient_accumulation_steps", "1"]  # the step's count is this micro-batch's: one a step
    handle = register_module_forward_hook(record, with_kwargs=True)
    try:
        main([*argv, *flags, "--label_smoothing_factor", "0.1", "--save_strategy", "no", "--report_to", "none"])
    finally:
        handle.remove()
    assert len(seen) >= 2 and all(eps == 0.1 for eps, _, _ in seen)
    _, labels, output = seen[0]
    logits = output.get("prediction_logits", output.get("logits")).detach()
    lm = "plm_loss" if recipe.startswith("xlnet") else "mlm_loss"
    reference = nll(logits, labels[labels.ne(-100)], 0.1)
    torch.testing.assert_close(output[lm].detach().double(), reference, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(output["loss"])


def test_the_hook_is_swapped_by_a_user_and_by_a_subclass(corpus):
    """`model.loss_function = fn` reaches every LM term (here BERT's MLM, SpanBERT's MLM and SBO, ELECTRA's
    generator), with the model's `label_smoothing`; a subclass overriding `loss_function` does too."""
    for name, terms in (("bert-tiny", {"mlm_loss"}), ("spanbert-tiny", {"mlm_loss", "sbo_loss"})):
        model, _, batch = setup(name, corpus)
        calls = []

        def doubled(logits, targets, label_smoothing=0.0, calls=calls):
            calls.append(label_smoothing)
            return 2 * language_model_loss(logits, targets, label_smoothing)

        plain = model(**batch)
        model.loss_function, model.label_smoothing = doubled, 0.25
        swapped = model(**batch)
        assert calls == [0.25] * len(terms)
        model.loss_function = language_model_loss
        smoothed = model(**batch)
        for term in terms:
            torch.testing.assert_close(swapped[term], 2 * smoothed[term])
            assert not torch.allclose(smoothed[term], plain[term])  # smoothing 0.25 moves it

    class Halved(type(setup("electra-tiny", corpus)[0])):
        @property
        def loss_function(self):
            return lambda logits, targets, label_smoothing: language_model_loss(logits, targets) / 2

    model, _, batch = setup("electra-tiny", corpus)
    plain = model(**batch).mlm_loss
    model.__class__ = Halved
    torch.testing.assert_close(model(**batch).mlm_loss, plain / 2)


def without_labelled_tokens(batch: dict) -> dict:
    """The batch with no labelled token: every label -100, every target list empty."""
    batch = dict(batch)
    for key in ("labels", "sbo_labels"):
        if key in batch:
            batch[key] = torch.full_like(batch[key], -100)
    for key in [k for k in batch if k.endswith("target_positions")]:
        batch[key] = batch[key][:0]
    return batch


@pytest.mark.parametrize("name", CASES)
def test_a_batch_with_no_labelled_token_gives_finite_losses(name, corpus):
    """In training (the Trainer's counts per objective, here all 0 for the LM terms) and in evaluation (no counts):
    every loss finite, the LM terms 0, and a backward step runs."""
    model, _, batch = setup(name, corpus)
    batch = without_labelled_tokens(batch)
    counts = {
        key: value.sum() if key == "attention_mask" else value.ne(-100).sum()
        for key, value in batch.items()
        if is_count_key(key) or key == "attention_mask"
    }
    model.train()
    output = model(**batch, num_items_in_batch=counts)
    output.loss.backward()
    model.eval()
    with torch.no_grad():
        evaluated = model(**batch)
    for out in (output, evaluated):
        losses = {key: value for key, value in out.items() if key.endswith("loss")}
        assert all(torch.isfinite(value) for value in losses.values()), losses
        for term in ("mlm_loss", "plm_loss", "sbo_loss"):
            if term in losses:
                assert losses[term].item() == 0.0, (term, losses[term])
