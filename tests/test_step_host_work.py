"""Host work the Trainer path does once, not every step (issue 28, "The Trainer costs nothing";
benchmarks/trainer_overhead.py measures the whole step)."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForMaskedLM, TrainingArguments

from hf_bertology.training.trainer import BertologyTrainer


def test_clipping_looks_the_model_up_once(tmp_path):
    """`accelerator.unwrap_model` parses a package's metadata on every call (accelerate asks whether deepspeed is
    installed): the clipping groups are looked up for the first step only, and again for another model."""
    config = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    model = BertForMaskedLM(config)
    trainer = BertologyTrainer(model=model, args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True))
    calls = []
    unwrap = trainer.accelerator.unwrap_model
    trainer.accelerator.unwrap_model = lambda m, *a, **k: calls.append(m) or unwrap(m, *a, **k)
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)
    norms = [trainer._clip_grad_norm(model) for _ in range(3)]
    assert len(calls) == 1
    assert torch.allclose(norms[0], torch.tensor(10.0 * sum(p.numel() for p in model.parameters()) ** 0.5))
    other = BertForMaskedLM(config)
    for p in other.parameters():
        p.grad = torch.ones_like(p)
    trainer._clip_grad_norm(other)
    assert len(calls) == 2 and calls[-1] is other
