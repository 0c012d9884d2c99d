"""Fewer operations per step (issue 28): the chunked fused linear + cross-entropy of the MLM head, and accuracies
and diagnostics only at the training steps the Trainer logs (`return_metrics`)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers.trainer_utils import IntervalStrategy

import hf_bertology as hb
from hf_bertology.models import fused_cross_entropy as fce
from hf_bertology.models.configuration_electra import BertologyElectraConfig
from hf_bertology.models.lm_loss import language_model_loss
from hf_bertology.models.modeling_electra import BertologyElectraForPreTraining
from hf_bertology.training.trainer import BertologyTrainer

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}


def _problem(dtype=torch.float32, rows=37, width=16, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, width, generator=g, dtype=dtype, requires_grad=True)
    decoder = torch.nn.Linear(width, vocab).to(dtype)
    with torch.no_grad():
        decoder.weight.copy_(torch.randn(vocab, width, generator=g, dtype=dtype))
    targets = torch.randint(0, vocab, (rows,), generator=g)
    targets[::5] = -100  # ignored targets (fixed-shape batches pad theirs so)
    return hidden, decoder, targets


def _grads(hidden, decoder):
    grads = [hidden.grad, decoder.weight.grad, decoder.bias.grad]
    hidden.grad = None
    decoder.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows_per_chunk", [1, 8, 37, 100])
def test_chunked_loss_and_gradients_equal_unfused(rows_per_chunk, smoothing):
    """Summed loss and every gradient equal the unfused `cross_entropy(linear(h))` within 1e-5 (fp32), whether the
    chunks divide the targets or not, label smoothing included (exact, not bypassed); the argmax is the unfused
    logits'."""
    hidden, decoder, targets = _problem()
    reference = F.cross_entropy(decoder(hidden), targets, reduction="sum", label_smoothing=smoothing)
    (reference / 7).backward()  # a denominator, as the models divide by the step's count
    expected = _grads(hidden, decoder)
    loss, argmax = fce.ChunkedLinearLoss.apply(
        hidden, decoder.weight, decoder.bias, targets, rows_per_chunk, True, language_model_loss, smoothing
    )
    (loss / 7).backward()
    assert abs(loss.item() - reference.item()) <= 1e-5 * abs(reference.item())
    for got, want in zip(_grads(hidden, decoder), expected):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(argmax, decoder(hidden).argmax(-1))


def test_chunked_is_exact_in_float64_and_skips_frozen_weights():
    hidden, decoder, targets = _problem(torch.float64)
    decoder.weight.requires_grad_(False)
    (F.cross_entropy(decoder(hidden), targets, reduction="sum") * 3).backward()
    expected = _grads(hidden, decoder)
    loss, argmax = fce.ChunkedLinearLoss.apply(
        hidden, decoder.weight, decoder.bias, targets, 8, False, language_model_loss, 0.0
    )
    (loss * 3).backward()
    got = _grads(hidden, decoder)
    assert argmax.numel() == 0 and got[1] is None
    assert torch.allclose(got[0], expected[0], atol=1e-12) and torch.allclose(got[2], expected[2], atol=1e-12)


def test_the_unfused_head_is_kept_where_fusing_saves_nothing(monkeypatch):
    """Logits asked for, no gradient (evaluation) or everything in one chunk: the unfused head, logits returned.
    Past one chunk of logits: fused (no logits), equal loss."""
    hidden, decoder, targets = _problem()
    assert fce.sparse_mlm_loss(hidden, decoder, targets)[0] is not None  # 37 x 50 logits: one chunk
    monkeypatch.setattr(fce, "CHUNK_BYTES", 4 * 50 * 8)  # 8 targets a chunk
    logits, loss, argmax = fce.sparse_mlm_loss(hidden, decoder, targets)
    assert logits is None and argmax.shape == (37,)
    assert torch.allclose(loss, F.cross_entropy(decoder(hidden), targets, reduction="sum"), rtol=1e-6)
    assert fce.sparse_mlm_loss(hidden, decoder, targets, return_logits=True)[0].shape == (37, 50)
    with torch.no_grad():
        assert fce.sparse_mlm_loss(hidden, decoder, targets)[0] is not None


def test_liger_is_chosen_on_cuda_only_where_installed(monkeypatch):
    """No GPU here: only the selection is tested (a stand-in `liger_kernel` module). On CPU the torch version runs
    even with Liger installed; on a CUDA device Liger's function is the one called, with the summed reduction."""
    calls = []

    def fake_liger(hidden, weight, target, bias=None, reduction="mean", return_predicted_tokens=False, **kwargs):
        calls.append(reduction)
        logits = F.linear(hidden, weight, bias)
        return SimpleNamespace(loss=F.cross_entropy(logits, target, reduction=reduction), predicted_tokens=None)

    functional = types.ModuleType("liger_kernel.transformers.functional")
    functional.liger_fused_linear_cross_entropy = fake_liger
    package = types.ModuleType("liger_kernel")
    package.__spec__ = SimpleNamespace(name="liger_kernel")
    for name, module in [
        ("liger_kernel", package),
        ("liger_kernel.transformers", types.ModuleType("liger_kernel.transformers")),
        ("liger_kernel.transformers.functional", functional),
    ]:
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(fce.importlib.util, "find_spec", lambda name: object() if name == "liger_kernel" else None)
    assert fce.liger_linear_cross_entropy(torch.device("cpu")) is None
    assert fce.liger_linear_cross_entropy(torch.device("cuda")) is fake_liger
    with monkeypatch.context() as patch:
        patch.setattr(fce.importlib.util, "find_spec", lambda name: None)  # not installed
        assert fce.liger_linear_cross_entropy(torch.device("cuda")) is None
    hidden, decoder, targets = _problem()
    monkeypatch.setattr(fce, "liger_linear_cross_entropy", lambda device: fake_liger)  # as on a CUDA device
    logits, loss, _ = fce.sparse_mlm_loss(hidden, decoder, targets, return_logits=False)
    assert logits is None and calls == ["sum"]
    assert torch.allclose(loss, F.cross_entropy(decoder(hidden), targets, reduction="sum"))


def _bert_batch(vocab=120, batch=4, length=24):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab, (batch, length), generator=g)
    labels = torch.full_like(input_ids, -100)
    chosen = torch.rand(batch, length, generator=g) < 0.3
    labels[chosen] = input_ids[chosen]
    return dict(input_ids=input_ids, labels=labels, next_sentence_label=torch.tensor([0, 1, 1, 0]))


def _bert_step(model, batch, **kwargs):
    torch.manual_seed(1)  # the same dropout
    model.zero_grad(set_to_none=True)
    out = model(**batch, **kwargs)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_bert_fused_head_equals_unfused_in_training(monkeypatch):
    """The BERT model in training: fused (several chunks, no logits) = unfused, loss, accuracy and every gradient
    (the decoder weight is the tied word embedding) within 1e-5; logits when asked for, and in evaluation."""
    torch.manual_seed(0)
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=120, **TINY)).train()
    batch = _bert_batch()
    unfused, expected = _bert_step(model, batch, return_logits=True)
    monkeypatch.setattr(fce, "CHUNK_BYTES", 4 * 120 * 5)  # 5 targets a chunk
    fused, got = _bert_step(model, batch)
    assert fused.prediction_logits is None and unfused.prediction_logits.shape[1] == 120
    assert torch.allclose(fused.loss, unfused.loss, atol=1e-6)
    assert torch.equal(fused.mlm_accuracy, unfused.mlm_accuracy)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-5), name
    with torch.no_grad():
        assert model.eval()(**batch).prediction_logits is not None


def test_bert_without_metrics_has_the_same_loss_and_gradients():
    torch.manual_seed(0)
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=120, **TINY)).train()
    batch = _bert_batch()
    full, expected = _bert_step(model, batch)
    quiet, got = _bert_step(model, batch, return_metrics=False)
    assert torch.equal(full.loss, quiet.loss) and all(torch.equal(got[k], expected[k]) for k in expected)
    assert quiet.mlm_accuracy is None and quiet.nsp_accuracy is None
    labels = batch["labels"]
    reference = (full.prediction_logits.argmax(-1) == labels[labels.ne(-100)]).float().mean()
    assert torch.allclose(full.mlm_accuracy, reference)


def test_electra_without_metrics_has_the_same_loss_and_gradients():
    """ELECTRA's diagnostics (accuracies, AUC, precision, recall: ~50 operations) change nothing else."""
    config = BertologyElectraConfig(
        vocab_size=90, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = BertologyElectraForPreTraining(config).train()
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 90, (3, 20), generator=g)
    labels = torch.full_like(input_ids, -100)
    labels[:, 2::4] = input_ids[:, 2::4]
    batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
    full, expected = _bert_step(model, batch)
    quiet, got = _bert_step(model, batch, return_metrics=False)
    assert torch.equal(full.loss, quiet.loss) and all(torch.equal(got[k], expected[k]) for k in expected)
    assert torch.equal(full.replaced_input_ids, quiet.replaced_input_ids)
    names = ("mlm_accuracy", "rtd_accuracy", "replaced_fraction", "disc_auc", "disc_precision", "sampled_accuracy")
    assert all(getattr(quiet, name) is None for name in names)
    assert all(getattr(full, name) is not None for name in names)


@pytest.mark.parametrize(
    "strategy, steps, first, expected",
    [
        (IntervalStrategy.STEPS, 3, False, [False, False, True, False, False, True, False]),
        (IntervalStrategy.STEPS, 3, True, [True, False, True, False, False, True, False]),
        (IntervalStrategy.NO, 3, True, [False] * 7),
        (IntervalStrategy.EPOCH, 3, False, [True] * 7),
    ],
)
def test_metrics_at_the_steps_the_trainer_logs(strategy, steps, first, expected):
    """`DefaultFlowCallback` logs after step `global_step` when it is a multiple of `logging_steps` (or the first,
    with `logging_first_step`): the step running while `state.global_step` is N is step N + 1."""
    trainer = SimpleNamespace(
        args=SimpleNamespace(logging_strategy=strategy, logging_first_step=first), state=SimpleNamespace()
    )
    seen = []
    for global_step in range(7):
        trainer.state = SimpleNamespace(global_step=global_step, logging_steps=steps)
        seen.append(BertologyTrainer._logs_this_step(trainer))
    assert seen == expected


def test_keyed_noise_is_the_top_24_bits_of_splitmix64():
    """`keyed_uniform` skips SplitMix64's last xor-shift (it leaves the kept top 24 bits alone): still entry (m, v)
    = the top 24 bits of the full finaliser of `key_m + (v + 1) * golden` (the collators' numpy SplitMix64); in
    float64, the top 53 bits of the finaliser without that step, counter 1 (sampling's) included."""
    import numpy as np

    from hf_bertology.collators.base import _GOLDEN, _MIX1, _MIX2, _mix64
    from hf_bertology.models.replaced_token_detection import keyed_uniform

    g = torch.Generator().manual_seed(0)
    keys = torch.cat([torch.randint(-(2**62), 2**62, (200,), generator=g), torch.tensor([0, -1, 2**63 - 1, -(2**63)])])
    with np.errstate(over="ignore"):
        counters = keys.numpy().view(np.uint64)[:, None] + np.arange(1, 38, dtype=np.uint64) * _GOLDEN
        expected = (_mix64(counters) >> np.uint64(40)).astype(np.float64) * 2.0**-24
        rounds = (counters ^ (counters >> np.uint64(30))) * _MIX1  # `_mix64` but its last step
        rounds = (rounds ^ (rounds >> np.uint64(27))) * _MIX2
    assert np.array_equal(keyed_uniform(keys, 37).double().numpy(), expected)
    expected = (rounds >> np.uint64(11)).astype(np.float64) * 2.0**-53
    assert np.array_equal(keyed_uniform(keys, 37, torch.float64).numpy(), expected)
    assert np.array_equal(keyed_uniform(keys, 1, torch.float64).numpy(), expected[:, :1])


def test_pretrain_computes_accuracies_at_logged_steps_only(tmp_path, corpus_file, monkeypatch):
    """Through `bertology pretrain` (4 steps, logging every 2): the forward is asked for metrics at steps 2 and 4
    only, and both logs carry the losses and the accuracies."""
    import functools
    import json

    from hf_bertology.models.modeling_bert import BertologyBertForPreTraining
    from hf_bertology.training.pretrain import main

    asked = []
    forward = BertologyBertForPreTraining.forward

    @functools.wraps(forward)
    def recording(self, *args, **kwargs):
        if self.training:
            asked.append(kwargs.get("return_metrics"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BertologyBertForPreTraining, "forward", recording)
    out = tmp_path / "run"
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(out), "--vocab_size", "300"]
    flags = [
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--gradient_accumulation_steps",  # one forward a step
        "1",
        "--logging_steps",
        "2",
        "--disable_tqdm",
        "true",
    ]
    main([*argv, *flags])
    assert asked == [False, True, False, True]
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    logs = [log for log in state["log_history"] if "loss" in log]
    assert [log["step"] for log in logs] == [2, 4]
    for log in logs:
        assert {"mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"} <= log.keys(), log


def test_keyed_noise_compiled_form_is_the_same(monkeypatch):
    """Under `torch.compile` the noise's counters enter as a sum, `(key * golden^-1 + v) * golden`, not as the
    product `v * golden` that Inductor on torch <= 2.11 folds into int32 index arithmetic (a Triton compile error
    for ELECTRA-small on an H200, docs/speed.md): the same 64-bit values, bit for bit."""
    from hf_bertology.models.replaced_token_detection import keyed_uniform

    g = torch.Generator().manual_seed(0)
    keys = torch.cat([torch.randint(-(2**62), 2**62, (300,), generator=g), torch.tensor([0, -1, 2**63 - 1, -(2**63)])])
    eager = keyed_uniform(keys, 4099)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert torch.equal(keyed_uniform(keys, 4099), eager)
