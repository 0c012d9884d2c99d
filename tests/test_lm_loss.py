"""One language-model loss (issue 46): `--label_smoothing_factor` through `bertology pretrain`, the swappable hook,
and a batch with no labelled token (finite losses, the empty terms 0) in training and in evaluation.

The per-family values (smoothed and not) against plain-torch references are tests/test_loss_references.py's.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.modules.module import register_module_forward_hook

from hf_bertology.data import load_corpus
from hf_bertology.models.lm_loss import language_model_loss
from hf_bertology.models.token_loss import TokenLoss, TokenLossHook
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
        if isinstance(module, TokenLossHook) and module.training and kwargs.get("labels") is not None:
            seen.append((module.token_loss.label_smoothing, kwargs["labels"].detach().clone(), output))

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
    """`model.token_loss = MyLoss()` reaches every LM term (here BERT's MLM through its fused head's chunks, SpanBERT's
    MLM and SBO, ELECTRA's generator), a knob of its own included; its `label_smoothing` is the hook's."""

    class Doubled(TokenLoss):  # a loss with a knob of its own
        def __init__(self, factor: float, label_smoothing: float = 0.0, calls: list | None = None):
            super().__init__(label_smoothing)
            self.factor, self.calls = factor, calls

        def __call__(self, logits, targets):
            self.calls.append(self.label_smoothing)
            return self.factor * language_model_loss(logits, targets, self.label_smoothing)

    for name, terms in (("bert-tiny", {"mlm_loss"}), ("spanbert-tiny", {"mlm_loss", "sbo_loss"})):
        model, _, batch = setup(name, corpus)
        calls = []
        plain = model(**batch)
        model.token_loss = Doubled(2.0, 0.25, calls)
        swapped = model(**batch)
        assert calls == [0.25] * len(terms)
        model.token_loss = TokenLoss(0.25)
        smoothed = model(**batch)
        for term in terms:
            torch.testing.assert_close(swapped[term], 2 * smoothed[term])
            assert not torch.allclose(smoothed[term], plain[term])  # smoothing 0.25 moves it

    model, _, batch = setup("electra-tiny", corpus)
    plain = model(**batch).mlm_loss
    model.token_loss = Doubled(0.5, calls=[])
    torch.testing.assert_close(model(**batch).mlm_loss, plain / 2)


def test_bert_fused_head_runs_the_hook_chunk_by_chunk(monkeypatch):
    """BERT's fused head (chunked, here one target a chunk) computes a swapped hook exactly, gradients included, and
    only the hook's own `language_model_loss` may take Liger's kernel (`TokenLoss.chunk_loss`)."""
    from hf_bertology.models import fused_cross_entropy

    class Tempered(TokenLoss):
        def __call__(self, logits, targets):
            return language_model_loss(logits / 2, targets, self.label_smoothing)

    assert TokenLoss().chunk_loss() is language_model_loss and Tempered().chunk_loss() is not language_model_loss
    monkeypatch.setattr(fused_cross_entropy, "CHUNK_BYTES", 1)  # every head fused, one row a chunk
    torch.manual_seed(0)
    hidden = torch.randn(7, 16, requires_grad=True)
    decoder = torch.nn.Linear(16, 50)
    targets = torch.randint(0, 50, (7,))
    hook = Tempered(0.1)
    logits, loss, _ = hook.linear(hidden, decoder, targets, return_logits=False)
    assert logits is None
    (grad,) = torch.autograd.grad(loss, hidden)
    expected = hook(decoder(hidden), targets)
    (expected_grad,) = torch.autograd.grad(expected, hidden)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)


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
