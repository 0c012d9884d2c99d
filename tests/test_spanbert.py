"""SpanBERT: SBO leakage, loss = MLM + SBO, pretrain smoke test (plain-transformers loading: tests/test_model_common.py)."""

from __future__ import annotations

import json
import math

import torch
from transformers import BertForMaskedLM
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

import hf_bertology as hb
from hf_bertology.training.pretrain import main as pretrain_main
from model_tester import tiny_family_model
from platform_support import assert_folder_reloads_alike


def tiny_model(**overrides) -> hb.BertologySpanBertForPreTraining:
    return tiny_family_model("spanbert", **overrides)  # seed 0, eval


def test_config_holds_the_readme_recipe():
    config = hb.get_recipe("spanbert-base").config
    assert config.model_type == "bert" and config.vocab_size == 28996
    assert (config.geometric_p, config.span_lower, config.span_upper) == (0.2, 1, 10)
    assert (config.sbo_loss_weight, config.sbo_max_targets, config.sbo_position_embedding_size) == (1.0, 15, 200)
    assert config.replacement_level == "span" and config.input_format == "doc_sentences"
    recipe = hb.get_recipe("spanbert-large")
    assert recipe.tokenizer_kwargs == {"do_lower_case": False} and recipe.max_seq_length == 512
    training = recipe.training_defaults
    assert (training["learning_rate"], training["warmup_steps"], training["adam_epsilon"]) == (1e-4, 10_000, 1e-8)
    assert (training["weight_decay"], training["max_grad_norm"], training["lr_scheduler_type"]) == (
        0.01,
        1.0,
        "linear",
    )
    assert training["lr_scheduler_kwargs"] == {"decay_from_start": True}  # its fairseq's polynomial_decay, power 1


def sbo_probe(targets: list) -> tuple:
    """(model, the encoder's output replaced by a `(2, 12, 32)` leaf, the output) of SBO targets `((row, token),
    (s - 1, e + 1), relative position)`: gradients on the leaf show which hidden states each prediction reads."""
    model = tiny_model()
    batch, length, hidden = 2, 12, 32
    states = torch.randn(batch, length, hidden, requires_grad=True)
    model.bert.register_forward_hook(
        lambda module, args, output: BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=states)
    )
    sbo_labels = torch.full((batch, length), -100)
    boundaries = torch.zeros(batch, length, 2, dtype=torch.long)
    relative = torch.zeros(batch, length, dtype=torch.long)
    for (row, token), ends, offset in targets:
        sbo_labels[row, token], boundaries[row, token], relative[row, token] = 17, torch.tensor(ends), offset
    out = model(
        input_ids=torch.ones(batch, length, dtype=torch.long),
        sbo_labels=sbo_labels,
        sbo_boundaries=boundaries,
        sbo_relative_positions=relative,
    )
    return model, states, out


def test_sbo_sees_only_the_boundaries_and_the_relative_position():
    # One target: row 1, span 4..7, token 6 (relative position 2); boundaries 3 and 8.
    model, states, out = sbo_probe([((1, 6), (3, 8), 2)])
    out.sbo_loss.backward()
    touched = states.grad.abs().sum(-1) > 0  # (B, T)
    expected = torch.zeros(*touched.shape, dtype=torch.bool)
    expected[1, [3, 8]] = True
    assert torch.equal(touched, expected)
    position_rows = model.sbo.position_embeddings.weight.grad.abs().sum(-1) > 0
    assert position_rows.nonzero().flatten().tolist() == [2]


def test_each_sbo_target_reads_its_own_boundaries():
    """Several targets in several rows: target k's logits have a gradient on its own two boundaries and nowhere else
    (the step gathers every target's boundary rows in one `(2N, H)` tensor; a target must not take another's)."""
    targets = [((0, 2), (1, 4), 0), ((0, 3), (1, 4), 1), ((1, 6), (3, 8), 2), ((1, 10), (9, 11), 0)]
    _, states, out = sbo_probe(targets)
    for k, ((row, _), ends, _) in enumerate(targets):  # the logits in the targets' flat order
        (grad,) = torch.autograd.grad(out.sbo_logits[k].sum(), states, retain_graph=True)
        expected = torch.zeros(*grad.shape[:2], dtype=torch.bool)
        expected[row, list(ends)] = True
        assert torch.equal(grad.abs().sum(-1) > 0, expected), k


def test_loss_is_mlm_plus_sbo_and_counts_normalise():
    model = tiny_model()
    tokenizer_ids = torch.randint(5, 100, (3, 16))
    labels = torch.full((3, 16), -100)
    labels[:, 5:8] = tokenizer_ids[:, 5:8]
    sbo_labels = labels.clone()
    boundaries = torch.zeros(3, 16, 2, dtype=torch.long)
    boundaries[:, 5:8] = torch.tensor([4, 8])
    relative = torch.zeros(3, 16, dtype=torch.long)
    relative[:, 5:8] = torch.arange(3)
    kwargs = dict(labels=labels, sbo_labels=sbo_labels, sbo_boundaries=boundaries, sbo_relative_positions=relative)
    out = model(input_ids=tokenizer_ids, **kwargs)
    assert torch.allclose(out.loss, out.mlm_loss + out.sbo_loss)
    counted = model(input_ids=tokenizer_ids, num_items_in_batch={"labels": 18, "sbo_labels": 18}, **kwargs)
    assert torch.allclose(counted.mlm_loss, out.mlm_loss / 2) and torch.allclose(counted.sbo_loss, out.sbo_loss / 2)


def test_resize_token_embeddings_grows_both_output_layers():
    """run_mlm.py's `resize_token_embeddings` after adding tokens: the MLM decoder and the SBO decoder follow the
    word table (tied), and the SBO head's own bias grows with it (zeros for the new words), so both losses run on a
    new word as the target."""
    model = tiny_model()
    vocab = model.config.vocab_size
    old_bias = model.sbo.bias.detach().clone()
    model.resize_token_embeddings(vocab + 8)
    table = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is table and model.sbo.decoder.weight is table
    assert model.sbo.bias.shape == (vocab + 8,) and torch.equal(model.sbo.bias[:vocab], old_bias)
    assert not model.sbo.bias[vocab:].any()
    ids = torch.randint(5, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    labels = torch.full((2, 16), -100)
    labels[:, 5:8] = vocab + 7
    boundaries = torch.zeros(2, 16, 2, dtype=torch.long)
    boundaries[:, 5:8] = torch.tensor([4, 8])
    relative = torch.zeros(2, 16, dtype=torch.long)
    relative[:, 5:8] = torch.arange(3)
    out = model(
        input_ids=ids, labels=labels, sbo_labels=labels.clone(), sbo_boundaries=boundaries,
        sbo_relative_positions=relative,
    )  # fmt: skip
    assert torch.isfinite(out.mlm_loss) and torch.isfinite(out.sbo_loss)


def test_pretrain_smoke(tmp_path):
    sentences = [
        "The river flows past the old mill. Fishermen wait on the bank at dawn. Birds sing in the tall trees.",
        "Engineers tested the new bridge. Heavy trucks crossed it slowly. Nobody noticed any movement at all.",
    ]
    (tmp_path / "corpus.txt").write_text("\n\n".join(sentences * 20), encoding="utf-8")
    metrics = pretrain_main(
        [
            "--recipe", "spanbert-tiny", "--train_file", str(tmp_path / "corpus.txt"),
            "--output_dir", str(tmp_path / "out"), "--max_steps", "3", "--vocab_size", "200",
            "--per_device_train_batch_size", "4", "--logging_steps", "1", "--save_strategy", "no",
        ]
    )  # fmt: skip
    assert math.isfinite(metrics["train_loss"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["sbo_max_targets"] == 15
    assert_folder_reloads_alike(
        tmp_path / "out", hb.BertologySpanBertForPreTraining, BertForMaskedLM, "logits", "logits"
    )
    assert (tmp_path / "out" / "modeling_spanbert.py").is_file()
