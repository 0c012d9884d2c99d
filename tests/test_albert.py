"""ALBERT: parameter counts, SOP pairs, unigram tokenizer, checkpoint compatibility, loss equivalence, smoke."""

from __future__ import annotations

import json
import math
import random

import datasets
import pytest
import torch
from transformers import AlbertForPreTraining, AlbertModel, AlbertTokenizer

import hf_bertology as hb
from hf_bertology.data import build_sop_pairs
from hf_bertology.training.pretrain import main as pretrain_main
from model_tester import tiny_family_model
from platform_support import assert_folder_reloads_alike

TEXT = [
    "The river flows past the old mill. Fishermen wait on the bank at dawn. Birds sing in the tall trees.",
    "Engineers tested the new bridge. Heavy trucks crossed it slowly. Nobody noticed any movement at all.",
    "Music filled the square all night. Dancers moved between the stalls. The baker sold warm bread.",
]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("albert-base", 11_683_584),
        ("albert-large", 17_683_968),
        ("albert-xlarge", 58_724_864),
        ("albert-xxlarge", 222_595_584),
    ],
)
def test_backbone_parameter_counts(name, expected):
    config = hb.get_recipe(name).config  # docs/recipes/albert.md, "Sizes"
    with torch.device("meta"):
        backbone = AlbertModel(config)
    assert sum(p.numel() for p in backbone.parameters()) == expected
    assert config.num_hidden_groups == 1 and config.hidden_act == "gelu_new" and config.hidden_dropout_prob == 0


def synthetic_corpus(documents: int, seed: int) -> datasets.Dataset:
    """Documents of sentences whose ids encode (document, running token index), so order and origin are visible."""
    rng = random.Random(seed)
    rows = {"input_ids": [], "word_starts": []}
    for d in range(documents):
        sentences, starts, token = [], [], 0
        for _ in range(rng.randint(1, 6)):
            n = rng.randint(1, 12)
            sentences.append([10_000 * (d + 1) + token + i for i in range(n)])
            starts.append([1] * n)
            token += n
        rows["input_ids"].append(sentences)
        rows["word_starts"].append(starts)
    return datasets.Dataset.from_dict(rows)


class _Tok:  # what build_sop_pairs needs of a tokenizer
    cls_token_id, sep_token_id = 2, 3


def test_sop_pairs_balanced_consecutive_and_within_one_document():
    pairs = build_sop_pairs(synthetic_corpus(3000, 0), _Tok(), max_seq_length=128, short_seq_prob=0.0, seed=1)
    labels = torch.tensor(pairs["sentence_order_label"])
    assert len(labels) > 2000
    assert abs(labels.float().mean().item() - 0.5) < 0.03
    for ids, types, label in zip(pairs["input_ids"], pairs["token_type_ids"], pairs["sentence_order_label"]):
        sep = ids.index(3)
        first, second = ids[1:sep], ids[sep + 1 : -1]
        assert ids[0] == 2 and ids[-1] == 3 and first and second
        assert types == [0] * (len(first) + 2) + [1] * (len(second) + 1)
        assert len({token // 10_000 for token in first + second}) == 1  # one document
        a, b = (second, first) if label == 1 else (first, second)
        # Unswapped: B continues A exactly; swapped: exactly that pair reversed.
        stream = a + b
        assert stream == list(range(stream[0], stream[0] + len(stream)))


def test_sop_pairs_truncated_stay_in_one_document():
    pairs = build_sop_pairs(synthetic_corpus(500, 1), _Tok(), max_seq_length=12, short_seq_prob=0.1, seed=2)
    for ids in pairs["input_ids"]:
        assert len(ids) <= 12
        assert len({token // 10_000 for token in ids if token >= 10_000}) == 1


def test_unigram_tokenizer_special_ids(tmp_path):
    texts = [" ".join(TEXT)] * 20
    tokenizer = hb.get_recipe("albert-tiny").train_tokenizer(texts, vocab_size=150)
    assert isinstance(tokenizer, AlbertTokenizer)
    ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("pad", "unk", "cls", "sep", "mask")}
    assert ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    encoded = tokenizer("The River flows")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens[1].startswith("▁")
    assert tokenizer.decode(encoded["input_ids"], skip_special_tokens=True) == "the river flows"  # lower-cased
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "AlbertTokenizer"


def tiny_model() -> hb.BertologyAlbertForPreTraining:
    return tiny_family_model("albert")  # seed 0, eval


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 100, (3, 12), generator=generator)
    labels = torch.full_like(input_ids, -100)
    labels[:, [2, 3, 7]] = input_ids[:, [2, 3, 7]]
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": labels,
        "sentence_order_label": torch.tensor([0, 1, 1]),
    }


def test_loss_equals_transformers_albert_for_pretraining():
    model = tiny_model()
    reference = AlbertForPreTraining(model.config).eval()
    missing, unexpected = reference.load_state_dict(model.state_dict(), strict=False)
    assert not missing and not unexpected
    inputs = batch()
    with torch.no_grad():
        ours, theirs = model(**inputs), reference(**inputs)
    assert torch.allclose(ours.loss, theirs.loss, atol=1e-5)
    assert torch.allclose(ours.loss, ours.mlm_loss + ours.sop_loss)
    assert torch.allclose(ours.sop_logits, theirs.sop_logits, atol=1e-5)
    predicted = inputs["labels"] != -100
    assert torch.allclose(ours.prediction_logits, theirs.prediction_logits[predicted], atol=1e-5)  # sparse head


def test_pretrain_smoke(tmp_path):
    (tmp_path / "corpus.txt").write_text("\n\n".join(TEXT * 15), encoding="utf-8")
    metrics = pretrain_main(
        [
            "--recipe", "albert-tiny", "--train_file", str(tmp_path / "corpus.txt"),
            "--output_dir", str(tmp_path / "out"), "--max_steps", "3", "--vocab_size", "150",
            "--per_device_train_batch_size", "4", "--logging_steps", "1", "--save_strategy", "no",
        ]
    )  # fmt: skip
    assert math.isfinite(metrics["train_loss"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "albert" and config["input_format"] == "sop_pairs"
    assert_folder_reloads_alike(
        tmp_path / "out",
        hb.BertologyAlbertForPreTraining,
        AlbertForPreTraining,
        "prediction_logits",
        "prediction_logits",
    )
    tokenizer_config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "AlbertTokenizer"
