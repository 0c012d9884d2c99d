"""ELECTRA: shared embeddings, replaced-token detection, gradient isolation, loss scaling, two-stage, export."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import ElectraForMaskedLM, ElectraForPreTraining, ElectraModel, TrainingArguments

import hf_bertology as hb
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.models.configuration_electra import BertologyElectraConfig
from hf_bertology.models.modeling_electra import (
    GLOROT_UNIFORM_LAYERS,
    SHARED_EMBEDDINGS,
    BertologyElectraForPreTraining,
)
from hf_bertology.models.replaced_token_detection import binary_auc
from hf_bertology.recipes.networks import networks_of
from hf_bertology.training.callbacks import ElectraTwoStageCallback, callbacks_for
from hf_bertology.training.trainer import BertologyTrainer
from model_tester import TINY_CONFIGS
from platform_support import assert_folder_reloads_alike

SRC = Path(__file__).resolve().parents[1] / "src"
TINY = TINY_CONFIGS["electra"]  # the shared tester's; embedding_size 16 != hidden: both keep embeddings_project
VOCAB = TINY["vocab_size"]
MASK_ID, PAD_ID = 4, 0


def tiny_model(seed: int = 0, **overrides) -> BertologyElectraForPreTraining:
    torch.manual_seed(seed)
    return BertologyElectraForPreTraining(BertologyElectraConfig(**{**TINY, **overrides}))


def tiny_batch(batch: int = 4, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """A collator-like batch: padded rows, [CLS]/[SEP], ~15% chosen, 85% of them [MASK]."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=gen)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    lengths[0] = length
    attention = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids[:, 0] = 2
    ids[torch.arange(batch), lengths - 1] = 3
    ids[attention == 0] = PAD_ID
    candidates = (attention == 1) & (ids > 4)
    chosen = candidates & (torch.rand(ids.shape, generator=gen) < 0.2)
    chosen[:, 1] = True  # at least one per row
    labels = torch.where(chosen, ids, -100)
    masked = chosen & (torch.rand(ids.shape, generator=gen) < 0.85)
    return {"input_ids": ids.masked_fill(masked, MASK_ID), "attention_mask": attention, "labels": labels}


def shared_pointers(model: BertologyElectraForPreTraining) -> dict[str, tuple[int, int]]:
    disc, gen = dict(model.electra.named_parameters()), dict(model.generator.electra.named_parameters())
    pointers = {name: (disc[name].data_ptr(), gen[name].data_ptr()) for name in SHARED_EMBEDDINGS}
    pointers["lm_head"] = (disc[SHARED_EMBEDDINGS[0]].data_ptr(), model.generator.generator_lm_head.weight.data_ptr())
    return pointers


# -- architecture -------------------------------------------------------------------------------------------------


def test_generator_is_derived_from_the_discriminator():
    config = hb.get_recipe("electra-small").config
    model_gen = hb.models.configuration_recipe.generator_config(config)
    assert (model_gen.hidden_size, model_gen.num_attention_heads, model_gen.intermediate_size) == (64, 1, 256)
    assert model_gen.num_hidden_layers == 12 and model_gen.embedding_size == 128
    base = hb.models.configuration_recipe.generator_config(hb.get_recipe("electra-base").config)
    assert (base.hidden_size, base.num_attention_heads, base.intermediate_size, base.embedding_size) == (
        256,
        4,
        1024,
        768,
    )
    large = hb.get_recipe("electra-large").config
    assert large.mlm_probability == 0.25 and large.max_predictions_per_seq == 130
    assert hb.models.configuration_recipe.generator_config(large).hidden_size == 256
    assert config.discriminator_weight == 50.0 and config.generator_weight == 1.0
    assert (config.mask_replace_prob, config.random_replace_prob, config.max_predictions_per_seq) == (0.85, 0.0, 19)


@pytest.mark.parametrize(
    "recipe, expected", [("electra-small", 13_483_008), ("electra-base", 108_891_648), ("electra-large", 334_092_288)]
)
def test_discriminator_parameter_counts_match_recipes_sheet(recipe, expected):
    """docs/recipes/electra.md ("Generator size"): ElectraModel of the three paper presets, vocabulary 30522."""
    with torch.device("meta"):
        model = ElectraModel(hb.get_recipe(recipe).config)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_shared_embeddings_are_one_parameter_before_and_after_save_load(tmp_path):
    model = tiny_model()
    for name, (disc, gen) in shared_pointers(model).items():
        assert disc == gen, name
    model.save_pretrained(tmp_path)
    loaded, info = BertologyElectraForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for name, (disc, gen) in shared_pointers(loaded).items():
        assert disc == gen, name
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    # The embedding projections are not shared: each network has its own.
    assert loaded.electra.embeddings_project.weight.shape == (32, 16)
    assert loaded.generator.electra.embeddings_project.weight.shape == (8, 16)


def test_initialisation_follows_the_official_code(tmp_path):
    """The dense layers the official code builds without an initializer (`embeddings_project` in both networks,
    `discriminator_predictions.dense_prediction`) are TensorFlow's Glorot uniform U(-a, a), a = sqrt(6 / (fan_in +
    fan_out)), zero bias; those built with `create_initializer` are N(0, 0.02). Tolerances: n uniform draws have a
    std within 15% of a / sqrt(3) (its relative standard error is sqrt(0.8 / 4n), 2.8% at the smallest n = 256), a
    max |w| in (0.95 a, a] (P(max <= 0.95 a) = 0.95^256 < 3e-6); the normal layers' std is within 5% of 0.02 (n >=
    8192: standard error < 0.8%). `from_pretrained` keeps the saved weights."""
    model = tiny_model(hidden_size=256, embedding_size=128, num_hidden_layers=1, intermediate_size=64)
    params = {name: p.detach() for name, p in model.named_parameters()}
    assert len(GLOROT_UNIFORM_LAYERS) == 3
    for layer in GLOROT_UNIFORM_LAYERS:
        weight, bias = params[f"{layer}.weight"], params[f"{layer}.bias"]
        bound = math.sqrt(6 / sum(weight.shape))
        assert 0.95 * bound < weight.abs().max() <= bound, layer
        assert abs(weight.std() / (bound / math.sqrt(3)) - 1) < 0.15, layer
        assert abs(weight.mean()) < 0.3 * bound / math.sqrt(3), layer  # 4.8 standard errors at n = 256
        assert not bias.any(), layer
    for layer in (
        "discriminator_predictions.dense",
        "generator.generator_predictions.dense",
        "electra.encoder.layer.0.attention.self.query",
    ):
        assert abs(params[f"{layer}.weight"].std() / 0.02 - 1) < 0.05, layer

    model.save_pretrained(tmp_path)
    loaded = BertologyElectraForPreTraining.from_pretrained(tmp_path)
    for name, value in loaded.named_parameters():
        assert torch.equal(value, params[name]), name


def test_two_stage_needs_equal_sizes():
    with pytest.raises(ValueError, match="generator_hidden_fraction=1.0"):
        BertologyElectraConfig(**TINY, two_stage_generator_steps=5)
    with pytest.raises(ValueError, match="intermediate_size=128"):  # FFN 37 != 4 x 32
        BertologyElectraConfig(**TINY, generator_hidden_fraction=1.0, two_stage_generator_steps=5)
    model = tiny_model()
    with pytest.raises(ValueError, match="same size"):
        model.start_discriminator_stage()


# -- the step -----------------------------------------------------------------------------------------------------


def test_replaced_tokens_and_labels():
    model = tiny_model()
    batch = tiny_batch()
    torch.manual_seed(1)
    out = model(**batch)
    chosen, real = batch["labels"].ne(-100), batch["attention_mask"].bool()
    original = torch.where(chosen, batch["labels"], batch["input_ids"])  # unmasked input
    replaced = out.replaced_input_ids
    assert not (replaced == MASK_ID).any()  # the discriminator never sees [MASK]
    assert torch.equal(replaced[~chosen], original[~chosen])  # replacements only at chosen positions
    assert torch.equal(out.rtd_labels.bool()[real], (replaced != original)[real])
    assert not out.rtd_labels.bool()[~real].any()
    assert out.rtd_logits.shape == batch["input_ids"].shape
    assert out.prediction_logits.shape == (int(chosen.sum()), VOCAB)  # sparse: chosen positions only
    assert torch.allclose(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    assert torch.isclose(out.replaced_fraction, out.rtd_labels[real].float().mean())


def test_binary_auc_matches_sklearn():
    from sklearn.metrics import roc_auc_score

    gen = torch.Generator().manual_seed(0)
    for n, levels in [(50, None), (4000, None), (1000, 3), (300, 1)]:
        labels = torch.rand(n, generator=gen) < 0.3
        scores = torch.randn(n, generator=gen) + labels
        if levels is not None:  # rounded: many ties
            scores = (scores * levels).round()
        expected = roc_auc_score(labels.numpy(), scores.numpy())
        assert abs(binary_auc(scores, labels).item() - expected) < 1e-6, (n, levels)
    assert binary_auc(torch.zeros(4), torch.tensor([1, 0, 1, 0])) == 0.5  # all tied
    assert torch.isnan(binary_auc(torch.randn(5), torch.zeros(5)))  # one class: undefined


def test_discriminator_auc_precision_recall_over_real_tokens():
    """Official `disc_auc`, `disc_precision`, `disc_recall` ("replaced" at probability > 0.5), padding excluded."""
    from sklearn.metrics import precision_score, recall_score, roc_auc_score

    model = tiny_model()
    batch = tiny_batch(batch=8)
    real = batch["attention_mask"].bool()
    assert not real.all()
    head = model.discriminator_predictions.dense_prediction
    with torch.no_grad():
        torch.manual_seed(1)
        median = model(**batch).rtd_logits[real].median()
        head.bias -= median  # about half the real tokens predicted "replaced"
        torch.manual_seed(1)
        out = model(**batch)
    logits, labels = out.rtd_logits[real].numpy(), out.rtd_labels[real].numpy()
    predicted = logits > 0
    assert 0 < predicted.mean() < 1 and 0 < labels.mean() < 1
    assert abs(out.disc_auc.item() - roc_auc_score(labels, logits)) < 1e-6
    assert abs(out.disc_precision.item() - precision_score(labels, predicted)) < 1e-6
    assert abs(out.disc_recall.item() - recall_score(labels, predicted)) < 1e-6

    with torch.no_grad():
        head.bias.fill_(-1e4)  # nothing predicted "replaced": precision undefined, recall 0
        out = model(**batch)
    assert torch.isnan(out.disc_precision) and out.disc_recall == 0


def test_sampling_follows_the_generator_softmax():
    """Inverse-CDF draws from softmax(logits): a peaked distribution is sampled (nearly) always at its mode."""
    from hf_bertology.models.replaced_token_detection import sample_tokens

    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0]]).expand(60_000, 3)
    counts = torch.bincount(sample_tokens(logits), minlength=3).float() / 60_000
    assert torch.allclose(counts, torch.softmax(logits[0], -1), atol=0.01)
    assert sample_tokens(logits.half()).dtype == torch.long


def test_gradients_are_isolated():
    """rtd_loss reaches no generator-only weight (sampling has no gradient); mlm_loss no discriminator-only weight."""
    model = tiny_model()
    shared = {id(p) for p in model.electra.embeddings.parameters()}
    generator_only = [p for p in model.generator.parameters() if id(p) not in shared]
    discriminator_only = [
        p for p in [*model.electra.parameters(), *model.discriminator_predictions.parameters()] if id(p) not in shared
    ]
    batch = tiny_batch()

    torch.manual_seed(1)
    model(**batch).rtd_loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in generator_only)
    assert all(p.grad is not None and p.grad.any() for p in model.discriminator_predictions.parameters())
    assert model.electra.embeddings.word_embeddings.weight.grad.any()  # the shared table learns from both

    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    model(**batch).mlm_loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in discriminator_only)
    assert model.generator.generator_predictions.dense.weight.grad.any()


def test_accumulated_halves_equal_one_batch():
    """2N in one batch vs two batches of N with the step's counts: same loss and gradients (same samples)."""
    model = tiny_model()
    batch = tiny_batch(batch=6, seed=3)
    counts = {"labels": batch["labels"].ne(-100).sum(), "attention_mask": batch["attention_mask"].sum()}

    torch.manual_seed(7)
    full = model(**batch, num_items_in_batch=counts)
    full.loss.backward()
    full_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    torch.manual_seed(7)  # the halves draw the same sampling uniforms, in the same order, as the full batch
    losses, replaced = [], []
    for half in (slice(0, 3), slice(3, 6)):
        out = model(**{k: v[half] for k, v in batch.items()}, num_items_in_batch=counts)
        out.loss.backward()
        losses.append(out.loss.detach())
        replaced.append(out.replaced_input_ids)
    assert torch.equal(torch.cat(replaced), full.replaced_input_ids)
    assert torch.allclose(sum(losses), full.loss, atol=1e-5)
    for p, g in zip(model.parameters(), full_grads):
        assert torch.allclose(p.grad, g, atol=1e-5, rtol=1e-4)


def test_loss_falls_on_repeated_data():
    model = tiny_model()
    batch = tiny_batch(batch=8, seed=5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    history = []
    for _ in range(40):
        out = model(**batch)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append((out.mlm_loss.item(), out.rtd_loss.item()))
    first, last = torch.tensor(history[:5]).mean(0), torch.tensor(history[-5:]).mean(0)
    assert last[0] < first[0] - 1.0  # the generator learns the masked tokens (a 1-head, 8-wide generator)
    assert last[1] < 0.6 * first[1]  # the discriminator spots its replacements


# -- collator -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    words = "the cat sat on a mat while dogs ran over green hills and birds sang in tall trees near rivers".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(200)]
    return hb.get_recipe("electra-tiny").train_tokenizer(texts, vocab_size=200)


def test_generator_input_is_85_mask_15_kept_0_random(tokenizer):
    config = hb.get_recipe("electra-tiny").config
    collator = DataCollatorForMaskedLM.from_config(config, tokenizer, seed=0)
    gen = torch.Generator().manual_seed(0)
    low = len(tokenizer.all_special_ids)
    features = [
        {
            "input_ids": [
                tokenizer.cls_token_id,
                *torch.randint(low, len(tokenizer), (62,), generator=gen).tolist(),
                tokenizer.sep_token_id,
            ]
        }
        for _ in range(1600)
    ]  # ~102k tokens
    batch = collator(features)
    chosen = batch["labels"].ne(-100)
    assert (chosen.sum(1) == min(config.max_predictions_per_seq, round(64 * 0.15))).all()  # exact count, capped
    original = batch["labels"][chosen]
    seen = batch["input_ids"][chosen]
    masked = (seen == tokenizer.mask_token_id).float().mean()
    kept = (seen == original).float().mean()
    assert abs(masked - 0.85) < 0.01 and abs(kept - 0.15) < 0.01
    assert masked + kept == 1.0  # no random tokens


# -- callbacks and training -----------------------------------------------------------------------------------------


def test_two_stage_switch(tmp_path):
    two_stage = dict(generator_hidden_fraction=1.0, intermediate_size=128, num_attention_heads=1)
    model = tiny_model(**two_stage, two_stage_generator_steps=2)
    assert model.training_stage == "generator"
    batch = tiny_batch()
    out = model(**batch)
    assert out.rtd_loss is None and torch.equal(out.loss, out.mlm_loss)

    callback = ElectraTwoStageCallback()
    assert [type(c) for c in callbacks_for(model, networks_of(model))] == [ElectraTwoStageCallback]
    assert callbacks_for(tiny_model(), networks_of(model)) == []
    callback.on_step_begin(None, SimpleNamespace(global_step=1), None, model=model)
    assert model.training_stage == "generator"
    callback.on_step_begin(None, SimpleNamespace(global_step=2), None, model=model)
    assert model.training_stage == "discriminator"
    gen_state = model.generator.electra.state_dict()
    for name, value in model.electra.state_dict().items():
        assert torch.equal(value, gen_state[name]), name  # the discriminator starts from the generator

    shared = {id(p) for p in model.electra.embeddings.parameters()}
    out = model(**batch)
    out.loss.backward()
    assert torch.allclose(out.loss, 50.0 * out.rtd_loss)
    for p in model.generator.parameters():
        if id(p) not in shared:
            assert not p.requires_grad and p.grad is None
    assert model.electra.encoder.layer[0].attention.self.query.weight.grad.any()

    # Resuming after the switch freezes again without overwriting the trained discriminator.
    resumed = tiny_model(seed=1, **two_stage, two_stage_generator_steps=2)
    before = resumed.electra.encoder.layer[0].output.dense.weight.clone()
    callback.on_train_begin(None, SimpleNamespace(global_step=5), None, model=resumed)
    assert resumed.training_stage == "discriminator"
    assert torch.equal(resumed.electra.encoder.layer[0].output.dense.weight, before)


def test_two_stage_in_the_trainer(tmp_path, tokenizer):
    recipe = hb.get_recipe(
        "electra-tiny",
        generator_hidden_fraction=1.0,
        intermediate_size=128,
        num_attention_heads=1,
        two_stage_generator_steps=2,
    )
    recipe.adapt_to_tokenizer(tokenizer)
    model = recipe.build_model()
    encoded = [tokenizer("the cat sat on a mat while dogs ran over green hills")["input_ids"]] * 16
    trainer = BertologyTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=4,
            per_device_train_batch_size=4,
            logging_steps=1,
            report_to=[],
            remove_unused_columns=False,
            save_strategy="no",
            use_cpu=True,
        ),
        train_dataset=[{"input_ids": ids} for ids in encoded],
        data_collator=recipe.build_collator(tokenizer, seed=0),
        callbacks=callbacks_for(model, recipe.networks),
    )
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert [("rtd_loss" in log) for log in logs] == [False, False, True, True]
    assert model.training_stage == "discriminator"


def test_replaced_token_detection_learns_with_an_untrained_generator(tmp_path, tokenizer):
    """The RTD path learns: with `generator_weight=0` the generator never trains, so replacements stay near-uniform
    samples over the vocabulary. Each row repeats one token (every non-special token equally likely), so a replaced
    token is told only by its context. Through the recipe's collator and `BertologyTrainer`, 200 steps must bring
    the held-out RTD loss far below the constant-guess loss H(p) (p = replaced share), with AUC near 1; the logs
    carry `disc_auc` / `disc_precision` / `disc_recall` (and `eval_*`). Measured (seeds 0-3): held-out loss 0.18-0.22
    of H(p) = 0.43, AUC 0.97-0.99; 5 CPU seconds on one thread."""
    recipe = hb.get_recipe(
        "electra-tiny", generator_weight=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    recipe.adapt_to_tokenizer(tokenizer)
    torch.manual_seed(0)
    model = recipe.build_model()
    special = set(tokenizer.all_special_ids)
    ordinary = [i for i in range(len(tokenizer)) if i not in special]
    gen = torch.Generator().manual_seed(0)

    def rows(n: int) -> list[dict]:
        picks = torch.randint(len(ordinary), (n,), generator=gen).tolist()
        return [{"input_ids": [tokenizer.cls_token_id, *[ordinary[k]] * 30, tokenizer.sep_token_id]} for k in picks]

    trainer = BertologyTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=200,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=64,
            learning_rate=2e-3,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            logging_steps=50,
            report_to=[],
            remove_unused_columns=False,
            save_strategy="no",
            use_cpu=True,
            seed=0,
            disable_tqdm=True,
        ),
        train_dataset=rows(512),
        eval_dataset=rows(256),
        data_collator=recipe.build_collator(tokenizer, seed=0),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: a second thread only waits on a shared machine
    try:
        trainer.train()
        metrics = trainer.evaluate()
    finally:
        torch.set_num_threads(threads)
    p = metrics["eval_replaced_fraction"]
    constant_guess = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert 0.1 < p < 0.2 and metrics["eval_sampled_accuracy"] < 0.05  # the generator's samples stay near-uniform
    assert metrics["eval_rtd_loss"] < 0.4 * constant_guess, (metrics["eval_rtd_loss"], constant_guess)
    assert metrics["eval_disc_auc"] > 0.9 and metrics["eval_disc_recall"] > 0.7
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 4 and all({"disc_auc", "disc_precision", "disc_recall"} <= log.keys() for log in logs)
    assert logs[-1]["rtd_loss"] < 0.5 * logs[0]["rtd_loss"]

    # A batch that leaves a metric undefined (NaN) does not hide the others from the window's mean.
    trainer._components["eval"] = {"disc_precision": [torch.tensor(float("nan")), torch.tensor(0.5)]}
    assert trainer._summarise("eval") == {"eval_disc_precision": 0.5}


def test_pretrain_smoke_and_export(tmp_path):
    from hf_bertology.training.pretrain import main

    corpus = tmp_path / "corpus.txt"
    words = "the cat sat on a mat while dogs ran over green hills and birds sang in tall trees".split()
    lines = []
    for doc in range(30):
        lines += [" ".join(words[(doc + s * 3 + j) % len(words)] for j in range(10)) + "." for s in range(5)] + [""]
    corpus.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    metrics = main(
        [
            "--recipe",
            "electra-tiny",
            "--train_file",
            str(corpus),
            "--output_dir",
            str(out),
            "--max_steps",
            "3",
            "--vocab_size",
            "150",
            "--logging_steps",
            "1",
            "--save_strategy",
            "no",
            "--use_cpu",
        ]
    )
    assert math.isfinite(metrics["train_loss"])
    config = json.loads((out / "config.json").read_text())
    # a joint run's own model_type, read by remote code only (issue 31: plain transformers refuses the folder)
    assert config["model_type"] == "bertology-electra-joint" and "AutoConfig" in config["auto_map"]
    assert_folder_reloads_alike(out, BertologyElectraForPreTraining, ElectraForPreTraining, "rtd_logits", "logits")
    assert (out / "modeling_electra.py").is_file() and (out / "model.safetensors").is_file()

    hb.export_part(out, tmp_path / "disc", "discriminator")
    from hf_bertology.cli import main as cli

    assert cli(["export", "--electra-part", "generator", str(out), str(tmp_path / "gen")]) == 0
    for part, architecture in (("disc", "ElectraForPreTraining"), ("gen", "ElectraForMaskedLM")):
        exported = json.loads((tmp_path / part / "config.json").read_text())
        assert exported["architectures"] == [architecture] and "auto_map" not in exported
        assert "discriminator_weight" not in exported
        assert (tmp_path / part / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "gen" / "config.json").read_text())["hidden_size"] == 8
    assert cli(["export", "--electra-part", "generator", str(tmp_path / "gen"), str(tmp_path / "x")]) == 2


PLAIN_TRANSFORMERS = """
import sys
sys.modules["hf_bertology"] = None  # plain transformers only
import json, torch
from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining,
                          AutoModelForSequenceClassification)
ckpt, disc, gen, ids = sys.argv[1], sys.argv[2], sys.argv[3], torch.tensor(json.loads(sys.argv[4]))
result = {"refused": {}}
for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForSequenceClassification):
    for remote in (False, True):  # the joint folder: our class through AutoModelForPreTraining, else a refusal
        if remote and auto is AutoModelForPreTraining:
            continue
        try:
            result["refused"][f"{auto.__name__}[{remote}]"] = type(auto.from_pretrained(ckpt, trust_remote_code=remote)).__name__
        except ValueError as err:
            result["refused"][f"{auto.__name__}[{remote}]"] = " | ".join(str(err).splitlines()[:4])
encoder, info = AutoModel.from_pretrained(disc, output_loading_info=True)
result["encoder_missing"] = sorted(info["missing_keys"])
classifier = AutoModelForSequenceClassification.from_pretrained(disc, num_labels=2)
result["classifier"] = type(classifier).__name__
joint = AutoModelForPreTraining.from_pretrained(ckpt, trust_remote_code=True)
result["remote"] = type(joint).__name__
result["remote_shared"] = joint.generator.electra.embeddings.word_embeddings.weight is joint.electra.embeddings.word_embeddings.weight
with torch.no_grad():
    result["remote_logits"] = joint(input_ids=ids).rtd_logits.tolist()
m, info = AutoModelForPreTraining.from_pretrained(disc, output_loading_info=True)
result["disc"] = (type(m).__name__, sorted(info["missing_keys"]), sorted(info["unexpected_keys"]))
with torch.no_grad():
    result["disc_logits"] = m(ids).logits.tolist()
m, info = AutoModelForMaskedLM.from_pretrained(gen, output_loading_info=True)
result["gen"] = (type(m).__name__, sorted(info["missing_keys"]), sorted(info["unexpected_keys"]))
result["gen_tied"] = m.generator_lm_head.weight is m.electra.embeddings.word_embeddings.weight
with torch.no_grad():
    result["gen_logits"] = m(ids).logits.tolist()
print(json.dumps(result))
"""


def test_plain_transformers_loads_every_part(tmp_path):
    model = tiny_model()
    model.eval()
    ids = torch.randint(5, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    hb.export_part(ckpt, tmp_path / "disc", "discriminator")
    hb.export_part(ckpt, tmp_path / "gen", "generator")
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent(PLAIN_TRANSFORMERS))
    run = subprocess.run(
        [
            sys.executable,
            str(script),
            str(ckpt),
            str(tmp_path / "disc"),
            str(tmp_path / "gen"),
            json.dumps(ids.tolist()),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    with torch.no_grad():
        ours = model(input_ids=ids).rtd_logits
        generator_logits = model.generator(ids).logits
    # the joint checkpoint (issue 31): plain transformers refuses it, remote code gives our class and refuses the rest
    for client, got in result["refused"].items():
        expected = "Unrecognized configuration class" if client.endswith("[True]") else "trust_remote_code"
        assert expected in got, (client, got)
    assert result["encoder_missing"] == [] and result["classifier"] == "ElectraForSequenceClassification"
    assert result["remote"] == "BertologyElectraForPreTraining" and result["remote_shared"]
    for key in ("remote_logits", "disc_logits"):
        assert torch.allclose(torch.tensor(result[key]), ours, atol=1e-5), key
    assert result["disc"] == ["ElectraForPreTraining", [], []]
    assert result["gen"] == ["ElectraForMaskedLM", [], []] and result["gen_tied"]
    assert torch.allclose(torch.tensor(result["gen_logits"]), generator_logits, atol=1e-5)


def test_joint_model_type_is_written_and_read_back_and_older_checkpoints_still_load(tmp_path):
    """Issue 31: every save of the joint model (ours, the Trainer's checkpoints) writes `bertology-electra-joint`
    with our config class under auto_map; our classes read it back as "electra" in memory, and read a checkpoint
    written before (`model_type: electra`, no AutoConfig) as before: same outputs, and `bertology export` works."""
    import transformers
    from transformers.testing_utils import CaptureLogger

    model = tiny_model().eval()
    ids = torch.randint(5, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    model.save_pretrained(tmp_path / "new")
    config = json.loads((tmp_path / "new" / "config.json").read_text())
    assert config["model_type"] == "bertology-electra-joint"
    assert config["auto_map"]["AutoConfig"] == "configuration_electra.BertologyElectraConfig"
    old = tmp_path / "old"
    model.save_pretrained(old)
    config["model_type"] = "electra"
    del config["auto_map"]["AutoConfig"]
    (old / "config.json").write_text(json.dumps(config))
    config_log = transformers.logging.get_logger("transformers.configuration_utils")
    with torch.no_grad():
        expected = model(input_ids=ids).rtd_logits
        for folder in (tmp_path / "new", old):
            with CaptureLogger(config_log) as logged:  # the joint type is read as ours: no type-mismatch warning
                loaded = BertologyElectraForPreTraining.from_pretrained(folder).eval()
            assert "model of type" not in logged.out, logged.out
            assert loaded.config.model_type == "electra" and "model_type" not in vars(loaded.config)
            assert torch.equal(loaded(input_ids=ids).rtd_logits, expected), folder
    loaded.save_pretrained(tmp_path / "again")  # an old checkpoint continued: written with the joint type
    assert json.loads((tmp_path / "again" / "config.json").read_text())["model_type"] == "bertology-electra-joint"
    hb.export_part(old, tmp_path / "gen", "generator")
    generator = ElectraForMaskedLM.from_pretrained(tmp_path / "gen").eval()
    with torch.no_grad():
        assert torch.allclose(generator(input_ids=ids).logits, model.generator(input_ids=ids).logits, atol=1e-6)


# -- examples -----------------------------------------------------------------------------------------------------


def test_electra_segments_follow_build_pretraining_dataset():
    """One or two segments of one document, cut to max length; ~10% single-segment; documents never crossed."""
    import datasets

    from hf_bertology.data import build_pretraining_dataset

    gen = torch.Generator().manual_seed(0)
    docs = []
    for doc in range(400):
        token = 10 + doc % 50  # every token of a document is the same id: a crossed boundary would show
        sentences = [
            [token] * int(n)
            for n in torch.randint(3, 30, (int(torch.randint(1, 20, (1,), generator=gen)),), generator=gen)
        ]
        docs.append({"input_ids": sentences, "word_starts": [[1] * len(s) for s in sentences]})
    tokenized = datasets.Dataset.from_list(docs)
    tok = SimpleNamespace(cls_token_id=2, sep_token_id=3)
    config = BertologyElectraConfig(**TINY)
    assert config.input_format == "electra_segments"
    examples = build_pretraining_dataset(tokenized, tok, config, max_seq_length=64, seed=0)
    single = 0
    for example in examples:
        ids, types = example["input_ids"], example["token_type_ids"]
        assert len(ids) <= 64 and len(types) == len(ids) == len(example["word_starts"])
        assert ids[0] == 2 and ids[-1] == 3
        assert len({t for t in ids if t > 3}) == 1  # one document only
        n_a = types.count(0)
        assert types == [0] * n_a + [1] * (len(types) - n_a)
        assert ids[n_a - 1] == 3  # [CLS] A [SEP] (B [SEP])
        single += n_a == len(ids)
    assert len(examples) > 300 and single > 0

    # The split itself: 10% single segment; otherwise A takes about (target - 3) // 2 tokens.
    import random

    from hf_bertology.data.segments import split_segments

    rng = random.Random(0)
    sentences = [([7] * 10, [1] * 10)] * 8
    splits = [split_segments(sentences, 128, 128, rng) for _ in range(4000)]
    single_share = sum(not b for _, _, b, _ in splits) / len(splits)
    assert abs(single_share - 0.1) < 0.015  # 3 sigma at n = 4000
    assert {len(a) for a, _, b, _ in splits if b} <= {60, 70}  # under 62, or one sentence over with p = 0.5


@pytest.mark.parametrize("variant,label", [("electra", "ELECTRA"), ("deberta-v3", "DeBERTa-v3")])
def test_export_refuses_a_folder_that_is_not_a_joint_checkpoint(variant, label, tmp_path):
    """A one-network checkpoint (here BERT's) given to a joint export is one error line naming a missing weight, not a
    plain folder with freshly initialised networks."""
    from hf_bertology.recipes.networks import kind_of
    from hf_bertology.utils import BertologyError

    hb.get_recipe("bert-tiny").build_model().save_pretrained(tmp_path / "bert")
    with pytest.raises(BertologyError, match=r"is not a joint (ELECTRA|DeBERTa-v3) checkpoint .*missing e\.g\."):
        hb.export_part(tmp_path / "bert", tmp_path / "out", "discriminator", kind_of(hb.VARIANTS[variant]), label)
    assert not (tmp_path / "out").exists()
