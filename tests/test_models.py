"""BERT and RoBERTa pretraining models: equivalence with transformers and sparse prediction (the checks every family
passes, tied decoder and Hub-format loading included, are in tests/test_model_common.py)."""

from __future__ import annotations

import torch
from transformers import BertForPreTraining, RobertaForMaskedLM

import hf_bertology as hb
from model_tester import tiny_config


def masked_batch(vocab_size: int, batch: int = 4, length: int = 24, seed: int = 0, pad_id: int = 0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -5:] = 0  # some padding
    input_ids[0, -5:] = pad_id
    labels = torch.full_like(input_ids, -100)
    chosen = (torch.rand(batch, length, generator=g) < 0.2) & attention_mask.bool()
    chosen[:, 1] = True
    labels[chosen] = input_ids[chosen]
    return input_ids, attention_mask, labels


def test_bert_loss_and_keys_equal_transformers():
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=120)
    ours = hb.BertologyBertForPreTraining(config).eval()
    reference = BertForPreTraining(config).eval()
    assert sorted(ours.state_dict()) == sorted(reference.state_dict())
    reference.load_state_dict(ours.state_dict())
    input_ids, attention_mask, labels = masked_batch(120)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 12:] = 1
    nsp = torch.tensor([0, 1, 1, 0])
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    a = ours(**kwargs, labels=labels, next_sentence_label=nsp)
    b = reference(**kwargs, labels=labels, next_sentence_label=nsp)
    assert torch.allclose(a.loss, b.loss, atol=1e-5)
    assert torch.allclose(a.mlm_loss + a.nsp_loss, a.loss)
    # sparse prediction: logits only at the labelled positions, equal to the dense ones there
    assert a.prediction_logits.shape == (int(labels.ne(-100).sum()), 120)
    assert torch.allclose(a.prediction_logits, b.prediction_logits[labels.ne(-100)], atol=1e-5)
    assert torch.allclose(a.seq_relationship_logits, b.seq_relationship_logits, atol=1e-6)


def test_roberta_loss_and_keys_equal_transformers():
    torch.manual_seed(0)
    config = tiny_config("roberta", vocab_size=130, max_position_embeddings=40)
    ours = hb.BertologyRobertaForPreTraining(config).eval()
    reference = RobertaForMaskedLM(config).eval()
    assert sorted(ours.state_dict()) == sorted(reference.state_dict())
    reference.load_state_dict(ours.state_dict())
    input_ids, attention_mask, labels = masked_batch(130, pad_id=1)
    a = ours(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    b = reference(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert torch.allclose(a.loss, b.loss, atol=1e-5)
    assert torch.allclose(a.logits, b.logits[labels.ne(-100)], atol=1e-5)
