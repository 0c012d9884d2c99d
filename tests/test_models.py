"""BERT and RoBERTa pretraining models: equivalence with transformers, sparse prediction, Hub-format loading."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertForPreTraining, RobertaForMaskedLM

import hf_bertology as hb
from hf_bertology.hub import save_folder
from model_tester import assert_loads_in_plain_transformers

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}


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
    config = hb.BertologyBertConfig(vocab_size=120, **TINY)
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
    config = hb.BertologyRobertaConfig(
        vocab_size=130, max_position_embeddings=40, type_vocab_size=1, pad_token_id=1, **TINY
    )
    ours = hb.BertologyRobertaForPreTraining(config).eval()
    reference = RobertaForMaskedLM(config).eval()
    assert sorted(ours.state_dict()) == sorted(reference.state_dict())
    reference.load_state_dict(ours.state_dict())
    input_ids, attention_mask, labels = masked_batch(130, pad_id=1)
    a = ours(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    b = reference(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert torch.allclose(a.loss, b.loss, atol=1e-5)
    assert torch.allclose(a.logits, b.logits[labels.ne(-100)], atol=1e-5)


def test_decoder_is_tied_to_word_embeddings():
    model = hb.BertologyBertForPreTraining(hb.BertologyBertConfig(vocab_size=50, **TINY))
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    model = hb.BertologyRobertaForPreTraining(hb.BertologyRobertaConfig(vocab_size=50, **TINY))
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight


@pytest.mark.parametrize(
    "variant,auto_name,plain_name",
    [
        ("bert", "AutoModelForPreTraining", "BertForPreTraining"),
        ("roberta", "AutoModelForMaskedLM", "RobertaForMaskedLM"),
    ],
)
def test_saved_folder_loads_in_plain_transformers(
    tmp_path, variant, auto_name, plain_name, bert_tokenizer, roberta_tokenizer
):
    torch.manual_seed(0)
    tokenizer = bert_tokenizer if variant == "bert" else roberta_tokenizer
    recipe = hb.get_recipe(f"{variant}-tiny")
    recipe.adapt_to_tokenizer(tokenizer)
    model = recipe.build_model().eval()
    save_folder(model, tokenizer, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == variant
    # ours under AutoModelForPreTraining for every family (a masked LM derived from RoBERTa's folder by plain
    # transformers keeps auto_map without our file; AutoModelForMaskedLM must pick transformers' class there)
    assert config["auto_map"] == {"AutoModelForPreTraining": f"modeling_{variant}.{type(model).__name__}"}
    assert (tmp_path / f"modeling_{variant}.py").exists() and (tmp_path / f"configuration_{variant}.py").exists()
    assert not list(tmp_path.glob("*.bin"))
    batch = dict(tokenizer(["the cat sat on the mat .", "a dog"], return_tensors="pt", padding=True))
    # RoBERTa folders also ship RobertaModel's pooler (for RobertaForMultipleChoice, issue 31), which
    # RobertaForMaskedLM has no place for, as with the released roberta-base; nothing else is extra
    pooler = ["roberta.pooler.dense.bias", "roberta.pooler.dense.weight"] if variant == "roberta" else []
    assert_loads_in_plain_transformers(
        model,
        tmp_path,
        batch,
        auto_name,
        plain_name,
        logits="prediction_logits" if variant == "bert" else "logits",
        unexpected=pooler,
        save=False,
        remote_auto="AutoModelForPreTraining",
    )
