"""ModernBERT: sizes, 30% masking, sparse MLM loss and its scaling, plain `AutoModelForMaskedLM` loading, pretraining."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import ModernBertForMaskedLM, ModernBertModel

import hf_bertology as hb
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.models.configuration_modernbert import BertologyModernBertConfig
from hf_bertology.models.modeling_modernbert import BertologyModernBertForPreTraining
from model_tester import TINY_CONFIGS
from platform_support import assert_train_loss_is_the_logged_mean

TINY = TINY_CONFIGS["modernbert"]  # the shared tester's (vocab 120, 3 layers: global, local, local)
VOCAB = TINY["vocab_size"]


def tiny_model(seed: int = 0) -> BertologyModernBertForPreTraining:
    torch.manual_seed(seed)
    return BertologyModernBertForPreTraining(BertologyModernBertConfig(**TINY)).eval()


def tiny_batch(batch: int = 4, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=gen)
    ids[:, 0], ids[:, -1] = 0, 2
    chosen = (ids > 4) & (torch.rand(ids.shape, generator=gen) < 0.3)
    chosen[:, 1] = True
    labels = torch.where(chosen, ids, -100)
    return {"input_ids": ids.masked_fill(chosen, 4), "attention_mask": torch.ones_like(ids), "labels": labels}


@pytest.mark.parametrize(
    "size, layers, hidden, heads, expected", [("base", 22, 768, 12, 149_014_272), ("large", 28, 1024, 16, 394_781_696)]
)
def test_presets_have_the_papers_sizes(size, layers, hidden, heads, expected):
    """Warner et al. §2: 149M / 395M parameters with the 50,368-token vocabulary; GLU 2,304 / 5,248."""
    config = hb.get_recipe(f"modernbert-{size}").config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert config.model_type == "modernbert" and config.mlm_probability == 0.3
    assert not config.sparse_prediction  # transformers' default: our head is sparse in training anyway (issue 31)
    assert config.layer_types[:3] == ["full_attention", "sliding_attention", "sliding_attention"]
    with torch.device("meta"):
        model = ModernBertModel(config)
    assert sum(p.numel() for p in model.parameters()) == expected
    training = hb.get_recipe(f"modernbert-{size}").training_defaults
    # phase 1 of the official schedule: warmup, then constant (docs/recipes/modernbert.md)
    assert training["lr_scheduler_type"] == "constant_with_warmup" and training["adam_beta2"] == 0.98
    assert training["learning_rate"] == {"base": 8e-4, "large": 5e-4}[size] and training["weight_decay"] == 1e-5


def test_sparse_loss_equals_transformers_and_scales_with_the_step_count():
    model = tiny_model()
    batch = tiny_batch()
    reference = ModernBertForMaskedLM(model.config)
    reference.load_state_dict(model.state_dict())
    reference.eval()
    with torch.no_grad():
        ours = model(**batch)
        theirs = reference(**batch)
    assert torch.allclose(ours.loss, theirs.loss, atol=1e-5)
    assert ours.logits.shape == (int(batch["labels"].ne(-100).sum()), VOCAB)  # sparse: predicted positions only
    count = batch["labels"].ne(-100).sum()
    with torch.no_grad():
        doubled = model(**batch, num_items_in_batch={"labels": 2 * count}).loss
    assert torch.allclose(doubled, ours.loss / 2, atol=1e-6)  # a sum over the step's count, not a local mean


@pytest.fixture(scope="module")
def tokenizer(texts):
    return hb.get_recipe("modernbert-tiny").train_tokenizer(texts * 3, vocab_size=300)


def test_tokenizer_is_bpe_with_bert_specials(tokenizer):
    encoded = tokenizer("the cat sat")["input_ids"]
    assert tokenizer.convert_ids_to_tokens([encoded[0], encoded[-1]]) == ["[CLS]", "[SEP]"]
    assert (tokenizer.mask_token, tokenizer.pad_token) == ("[MASK]", "[PAD]")


def test_thirty_percent_masking_80_10_10(tokenizer):
    config = hb.get_recipe("modernbert-tiny").config
    collator = DataCollatorForMaskedLM.from_config(config, tokenizer, seed=0)
    gen = torch.Generator().manual_seed(0)
    low = len(tokenizer.all_special_ids)
    body = torch.randint(low, len(tokenizer), (1600, 62), generator=gen).tolist()
    batch = collator([{"input_ids": [tokenizer.cls_token_id, *row, tokenizer.sep_token_id]} for row in body])
    chosen = batch["labels"].ne(-100)
    # a Bernoulli draw per token over the 62 candidates (official sequence_packer.py), no cap (~100k tokens)
    assert abs(chosen.sum(1).double().mean() - 62 * 0.3) < 0.2
    seen, original = batch["input_ids"][chosen], batch["labels"][chosen]
    masked = (seen == tokenizer.mask_token_id).float().mean()
    kept = (seen == original).float().mean()
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1 - 0.1 / len(tokenizer)) < 0.01


def test_pretrain_packs_without_padding_and_learns(tmp_path, corpus_file):
    from hf_bertology.training.pretrain import main

    out = tmp_path / "out"
    argv = ["--recipe", "modernbert-tiny", "--train_file", str(corpus_file), "--output_dir", str(out)]
    argv += ["--vocab_size", "300", "--max_train_samples", "8", "--per_device_train_batch_size", "8"]
    argv += ["--max_steps", "30", "--learning_rate", "3e-3", "--warmup_steps", "0", "--logging_steps", "1"]
    metrics = main([*argv, "--save_steps", "30", "--disable_tqdm", "true", "--use_cpu"])
    logs = json.loads((out / "checkpoint-30" / "trainer_state.json").read_text())["log_history"]
    assert_train_loss_is_the_logged_mean(metrics, logs)
    losses = torch.tensor([log["mlm_loss"] for log in logs if "mlm_loss" in log])
    assert len(losses) == 30 and torch.isfinite(losses).all()
    assert losses[-5:].mean() < losses[:5].mean() - 0.5  # the same 8 packed blocks
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["mlm_probability"] == 0.3
    assert (out / "modeling_modernbert.py").is_file()
    # Packed blocks: every training example fills the length, so batches carry no padding.
    assert metrics["tokens_seen"] == 30 * 8 * 64
