"""DeBERTa-v3: GDES / ES / NES embedding sharing, RTD gradient isolation, merged export, plain-transformers loading."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from transformers import DebertaV2Model

import hf_bertology as hb
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.models.configuration_deberta_v3 import BertologyDebertaV3Config
from hf_bertology.models.modeling_deberta_v3 import BertologyDebertaV3ForPreTraining
from model_tester import TINY_CONFIGS
from platform_support import assert_train_loss_is_the_logged_mean

TINY = TINY_CONFIGS["deberta_v3"]  # the shared tester's (tests/model_tester.py)
VOCAB = TINY["vocab_size"]
MASK_ID, PAD_ID = 4, 0
WORD = "embeddings.word_embeddings.weight"


def tiny_model(sharing: str = "gdes", seed: int = 0, **overrides) -> BertologyDebertaV3ForPreTraining:
    torch.manual_seed(seed)
    return BertologyDebertaV3ForPreTraining(BertologyDebertaV3Config(**TINY, embedding_sharing=sharing, **overrides))


def tiny_batch(batch: int = 4, length: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """A collator-like batch: padded rows, [CLS]=1/[SEP]=2, ~20% chosen, all of them [MASK]."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=gen)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    lengths[0] = length
    attention = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids[:, 0] = 1
    ids[torch.arange(batch), lengths - 1] = 2
    ids[attention == 0] = PAD_ID
    chosen = (attention == 1) & (ids > 4) & (torch.rand(ids.shape, generator=gen) < 0.2)
    chosen[:, 1] = True  # at least one per row
    labels = torch.where(chosen, ids, -100)
    return {"input_ids": ids.masked_fill(chosen, MASK_ID), "attention_mask": attention, "labels": labels}


def generator_table(model):
    return model.generator.deberta.embeddings.word_embeddings.weight


def discriminator_table(model):
    return model.deberta.embeddings.word_embeddings.weight


def grad_of(param) -> torch.Tensor:
    return torch.zeros_like(param) if param.grad is None else param.grad


# -- recipes ------------------------------------------------------------------------------------------------------


def test_presets_follow_the_official_rtd_configs():
    """rtd_{xsmall,small,base,large}.json: depth/width, half-depth generator, v3 relative-position settings."""
    expected = {
        "xsmall": (12, 384, 6, 6),
        "small": (6, 768, 12, 3),
        "base": (12, 768, 12, 6),
        "large": (24, 1024, 16, 12),
    }
    for size, (layers, hidden, heads, gen_layers) in expected.items():
        config = hb.get_recipe(f"deberta-v3-{size}").config
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
        assert config.intermediate_size == 4 * hidden and config.vocab_size == 128100
        generator = hb.models.configuration_recipe.generator_config(config)
        assert (generator.num_hidden_layers, generator.hidden_size, generator.legacy) == (gen_layers, hidden, False)
    config = hb.get_recipe("deberta-v3-base").config
    assert config.model_type == "deberta-v2" and config.embedding_sharing == "gdes"
    assert (config.relative_attention, config.position_buckets, config.norm_rel_ebd) == (True, 256, "layer_norm")
    assert (config.share_att_key, config.pos_att_type, config.max_relative_positions) == (True, ["p2c", "c2p"], -1)
    assert (config.position_biased_input, config.type_vocab_size, config.layer_norm_eps) == (False, 0, 1e-7)
    # λ = 10: rtd.sh sets no --rtd_lambda, whose default is 10 (rtd_task.py:392); the paper's 50 is not the script's
    assert (config.discriminator_weight, config.mask_replace_prob, config.max_predictions_per_seq) == (10.0, 1.0, 80)
    assert config.mask_positions == "window"
    training = hb.get_recipe("deberta-v3-base").training_defaults
    assert (training["learning_rate"], training["warmup_steps"], training["global_batch_size"]) == (
        1e-4,
        10_000,
        256,
    )
    assert hb.get_recipe("deberta-v3-xsmall").training_defaults["learning_rate"] == 3e-4
    assert hb.get_recipe("deberta-v3-tiny").config.max_predictions_per_seq == 10  # ceil(64 * 0.15 / 10) * 10
    with pytest.raises(ValueError, match="embedding_sharing"):
        BertologyDebertaV3Config(embedding_sharing="tied")
    with pytest.raises(ValueError, match="mask_positions"):
        BertologyDebertaV3Config(mask_positions="random")


@pytest.mark.parametrize(
    "size, expected",
    [("xsmall", 70_682_112), ("small", 141_304_320), ("base", 183_831_552), ("large", 434_012_160)],
)
def test_discriminator_parameter_counts(size, expected):
    """DebertaV2Model of the presets: backbones of 21.5M/42.9M/85.5M/302.8M (model cards: 22M/44M/86M/304M) + 128,100 x H embeddings."""
    with torch.device("meta"):
        model = DebertaV2Model(hb.get_recipe(f"deberta-v3-{size}").config)
    assert sum(p.numel() for p in model.parameters()) == expected


# -- embedding sharing ----------------------------------------------------------------------------------------------


def test_gdes_gradients_are_disentangled():
    """RTD trains Δ and never E_G; MLM trains E_G and never Δ; the discriminator's own table is a frozen slot."""
    model = tiny_model("gdes")
    assert not discriminator_table(model).requires_grad and not model.gdes.delta.any()
    batch = tiny_batch()

    torch.manual_seed(1)
    model(**batch).rtd_loss.backward()
    assert not grad_of(generator_table(model)).any()
    assert grad_of(model.gdes.delta).any()

    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    model(**batch).mlm_loss.backward()
    assert not grad_of(model.gdes.delta).any()
    assert grad_of(generator_table(model)).any()

    # One optimizer step on the joint loss: Δ leaves zero, the slot stays untouched, and E_D = E_G + Δ is what the
    # discriminator reads.
    slot = discriminator_table(model).clone()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    optimizer.step()
    assert model.gdes.delta.abs().sum() > 0 and torch.equal(discriminator_table(model), slot)
    ids = batch["input_ids"]
    merged = generator_table(model) + model.gdes.delta
    assert torch.allclose(model.gdes(ids, generator_table(model)), merged[ids])


def test_es_shares_one_table_and_nes_none():
    es = tiny_model("es")
    assert discriminator_table(es) is generator_table(es) and not hasattr(es, "gdes")
    batch = tiny_batch()
    torch.manual_seed(1)
    es(**batch).rtd_loss.backward()
    assert grad_of(generator_table(es)).any()  # ELECTRA's sharing: the RTD loss pulls the generator's table too

    nes = tiny_model("nes")
    assert discriminator_table(nes) is not generator_table(nes) and not hasattr(nes, "gdes")
    torch.manual_seed(1)
    nes(**batch).rtd_loss.backward()
    assert not grad_of(generator_table(nes)).any() and grad_of(discriminator_table(nes)).any()
    nes.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    nes(**batch).mlm_loss.backward()
    assert not grad_of(discriminator_table(nes)).any() and grad_of(generator_table(nes)).any()


@pytest.mark.parametrize("sharing", ["gdes", "es", "nes"])
def test_rtd_sends_nothing_into_generator_only_weights(sharing):
    model = tiny_model(sharing)
    shared = {id(discriminator_table(model))} if sharing == "es" else set()
    generator_only = [p for p in model.generator.parameters() if id(p) not in shared]
    torch.manual_seed(1)
    out = model(**tiny_batch())
    out.rtd_loss.backward()
    assert all(not grad_of(p).any() for p in generator_only)
    assert all(grad_of(p).any() for p in model.mask_predictions.parameters())
    assert torch.allclose(out.loss, out.mlm_loss + 10.0 * out.rtd_loss)
    chosen = tiny_batch()["labels"].ne(-100)
    assert out.prediction_logits.shape == (int(chosen.sum()), VOCAB)  # sparse: chosen positions only
    assert not (out.replaced_input_ids == MASK_ID).any()


def test_accumulated_halves_equal_one_batch():
    """2N in one batch vs two batches of N with the step's counts: same loss and gradients (same samples)."""
    model = tiny_model("gdes")
    batch = tiny_batch(batch=6, seed=3)
    counts = {"labels": batch["labels"].ne(-100).sum(), "attention_mask": batch["attention_mask"].sum()}
    torch.manual_seed(7)
    full = model(**batch, num_items_in_batch=counts)
    full.loss.backward()
    full_grads = [grad_of(p).clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    total = 0
    for half in (slice(0, 3), slice(3, 6)):
        out = model(**{k: v[half] for k, v in batch.items()}, num_items_in_batch=counts)
        out.loss.backward()
        total = total + out.loss.detach()
    assert torch.allclose(total, full.loss, atol=1e-5)
    for p, g in zip(model.parameters(), full_grads):
        assert torch.allclose(grad_of(p), g, atol=1e-5, rtol=1e-4)


# -- the generator's enhanced mask decoder, the discriminator's head ------------------------------------------------


def emd_reference(model, input_ids, attention_mask) -> torch.Tensor:
    """The official `EnhancedMaskDecoder.emd_context_layer` (masked_language_model.py:51-82) step by step:
    h = the last layer's input, q = z + h (z: the raw absolute position embeddings), then the last layer twice with
    keys/values h, the query the previous output."""
    deberta = model.generator.deberta
    hidden = deberta(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-2]
    z = deberta.embeddings.position_embeddings.weight[: input_ids.shape[1]][None]  # (1, T, H)
    extended = attention_mask[:, None, None, :] * attention_mask[:, None, :, None]  # (B, 1, T, T)
    layer, encoder = deberta.encoder.layer[-1], deberta.encoder
    query = z + hidden
    for _ in range(2):
        query = layer(
            hidden,
            extended,
            query_states=query,
            relative_pos=encoder.get_rel_pos(hidden),
            rel_embeddings=encoder.get_rel_embedding(),
        )[0]
    return query


def test_generator_predicts_through_the_enhanced_mask_decoder():
    """The generator's logits at the chosen positions are EMD's (not the last layer's), and EMD's position table
    (`generator.deberta.embeddings.position_embeddings`, max_position_embeddings x H) is trained by the MLM loss."""
    model = tiny_model("gdes")
    table = model.generator.deberta.embeddings.position_embeddings.weight
    assert table.shape == (model.config.max_position_embeddings, TINY["hidden_size"])
    batch = tiny_batch()
    chosen = batch["labels"].ne(-100)
    torch.manual_seed(1)
    out = model(**batch)
    with torch.no_grad():
        states = emd_reference(model, batch["input_ids"], batch["attention_mask"])[chosen]  # (M, H)
        expected = model.generator.lm_predictions(states, model.generator.deberta.embeddings.word_embeddings)
        plain = model.generator(batch["input_ids"], attention_mask=batch["attention_mask"]).logits[chosen]
    assert torch.allclose(out.prediction_logits, expected, atol=1e-5)
    assert not torch.allclose(out.prediction_logits, plain, atol=1e-3)  # the plain last layer is not what predicts
    out.mlm_loss.backward()
    assert grad_of(table)[: batch["input_ids"].shape[1]].any() and not grad_of(table)[30:].any()


def test_rtd_head_matches_a_plain_torch_reference():
    """`mask_predictions` is the official `LMMaskPredictionHead` (replaced_token_detection_model.py:41-49):
    LayerNorm(h_[CLS] + h_i) -> dense -> GELU -> one logit, written here with torch.nn.functional only."""
    head = tiny_model("gdes", seed=3).mask_predictions
    torch.nn.init.normal_(head.LayerNorm.weight)  # not the identity, so the order of the steps shows
    hidden = torch.randn(3, 7, TINY["hidden_size"], generator=torch.Generator().manual_seed(0))
    states = F.layer_norm(
        hidden[:, :1] + hidden, (TINY["hidden_size"],), head.LayerNorm.weight, head.LayerNorm.bias, 1e-7
    )
    states = F.gelu(F.linear(states, head.dense.weight, head.dense.bias))
    expected = F.linear(states, head.classifier.weight, head.classifier.bias).squeeze(-1)  # (B, T)
    assert torch.allclose(head(hidden), expected, atol=1e-6)


def test_gdes_shares_the_position_table_where_the_discriminator_reads_one():
    """rtd_task.py:59-64,120-122: under GDES the discriminator's position table is sg(P_G) + Δ_P too. With absolute
    positions in the input (`position_biased_input=True`), RTD trains Δ_P and not P_G, MLM trains P_G and not Δ_P, and
    the saved table is P_G + Δ_P, which plain `DebertaV2Model` reads to the same outputs."""
    model = tiny_model("gdes", position_biased_input=True)
    positions = model.generator.deberta.embeddings.position_embeddings.weight
    slot = model.deberta.embeddings.position_embeddings.weight
    assert not slot.requires_grad and not model.gdes_positions.delta.any()
    batch = tiny_batch()
    torch.manual_seed(1)
    model(**batch).rtd_loss.backward()
    assert grad_of(model.gdes_positions.delta).any() and not grad_of(positions).any()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    model(**batch).mlm_loss.backward()
    assert grad_of(positions).any() and not grad_of(model.gdes_positions.delta).any()
    with torch.no_grad():
        model.gdes_positions.delta.normal_()
        model.gdes.delta.normal_()
        hidden = model.discriminate(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    state = model.state_dict()
    assert torch.equal(state["deberta.embeddings.position_embeddings.weight"], positions + model.gdes_positions.delta)
    plain = DebertaV2Model(model.config.discriminator_config()).eval()
    plain.load_state_dict({k[len("deberta.") :]: v for k, v in state.items() if k.startswith("deberta.")})
    with torch.no_grad():
        plain_hidden = plain(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.allclose(plain_hidden, hidden, atol=1e-5)


def test_trainer_clips_generator_and_discriminator_apart(tmp_path):
    """The official decoupled training clips each network's gradient norm on its own (rtd_task.py:265,351; one
    XAdam each, max_grad_norm 1): a generator gradient 1000x the discriminator's leaves the discriminator's alone."""
    from transformers import TrainingArguments

    from hf_bertology.training.trainer import BertologyTrainer

    model = tiny_model("gdes")
    args = TrainingArguments(output_dir=str(tmp_path), max_grad_norm=1.0, report_to=[], use_cpu=True)
    trainer = BertologyTrainer(model=model, args=args)
    generator, discriminator = model.gradient_clipping_groups()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {id(p) for p in generator}.isdisjoint(id(p) for p in discriminator)
    assert len(generator) + len(discriminator) == len(trainable)
    assert all(any(p is q for q in discriminator) for p in (model.gdes.delta, *model.mask_predictions.parameters()))
    gen = torch.Generator().manual_seed(0)
    for group, norm in ((generator, 500.0), (discriminator, 0.5)):
        grads = [torch.randn(p.shape, generator=gen) for p in group]
        total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        for p, g in zip(group, grads):
            p.grad = g * (norm / total)
    before = [p.grad.clone() for p in discriminator]
    reported = trainer._clip_grad_norm(model)
    assert torch.allclose(reported, torch.tensor((500.0**2 + 0.5**2) ** 0.5), rtol=1e-4)  # logged: the whole norm
    assert all(torch.equal(p.grad, g) for p, g in zip(discriminator, before))  # under its own threshold: untouched
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in generator]))
    assert torch.allclose(clipped, torch.tensor(1.0), rtol=1e-4)


# -- optimizer and schedule: XAdam without bias correction, warmup_linear ------------------------------------------


def official_adamw(data, m, v, grad, lr, beta1, beta2, eps, weight_decay):
    """microsoft/DeBERTa `DeBERTa/optims/xadam.py` `adamw()` as XAdam calls it (bias_correction 0, eps_mode 1),
    transcribed: the moments, then the update with ε outside the root plus wd·w, times lr."""
    m.mul_(beta1).add_((1 - beta1) * grad)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    update = m / (v.sqrt() + eps) + weight_decay * data
    data.add_(-lr * update)


def official_warmup_linear(step, total, warmup=0.002, ends=0):
    """microsoft/DeBERTa `DeBERTa/optims/lr_schedulers.py` `warmup_linear`, transcribed (warmup: a fraction)."""
    x = step / total
    x = x - int(x)
    if x < warmup:
        return x / warmup
    return (1 - ends) * (1.0 - x) + ends


def recipe_trainer(tmp_path, model, **flags):
    """A BertologyTrainer with deberta-v3-tiny's TrainingArguments as `bertology pretrain` settles them."""
    from transformers import TrainingArguments

    from hf_bertology.training.arguments import training_arguments
    from hf_bertology.training.trainer import BertologyTrainer

    given = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], **flags)
    args = training_arguments(given, hb.get_recipe("deberta-v3-tiny"), {"use_cpu", *flags})
    return BertologyTrainer(model=model, args=args)


def test_optimizer_is_xadam_without_bias_correction(tmp_path):
    """Five steps of random gradients, weight decay on: our optimizer equals the official update, bit for bit up to
    float rounding; the recipe builds it (`--optim_args bias_correction=False`) with each group's decay."""
    from hf_bertology.training.optimizers import AdamWNoBiasCorrection

    trainer = recipe_trainer(tmp_path, tiny_model(), learning_rate=1e-3)
    optimizer = trainer.create_optimizer()
    assert type(optimizer) is AdamWNoBiasCorrection
    assert {g["weight_decay"] for g in optimizer.param_groups} == {0.01, 0.0}
    assert optimizer.defaults["betas"] == (0.9, 0.999) and optimizer.defaults["eps"] == 1e-6
    gen = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(6, 5, generator=gen))
    ours = AdamWNoBiasCorrection([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    data, m, v = weight.detach().clone(), torch.zeros(6, 5), torch.zeros(6, 5)
    for _ in range(5):
        grad = torch.randn(6, 5, generator=gen)
        weight.grad = grad.clone()
        ours.step()
        official_adamw(data, m, v, grad, 1e-2, 0.9, 0.999, 1e-6, 0.01)
        torch.testing.assert_close(weight.detach(), data, rtol=0, atol=1e-6)


def test_schedule_is_warmup_linear(tmp_path):
    """At step 50 of 100 with 10 warmup steps the learning rate is half the peak (transformers' linear: 0.556)."""
    trainer = recipe_trainer(tmp_path, tiny_model(), learning_rate=1e-3, max_steps=100, warmup_steps=10)
    trainer.create_optimizer()
    scheduler = trainer.create_scheduler(num_training_steps=100)
    rates = []
    for _ in range(100):
        rates.append(scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        scheduler.step()
    assert rates[50] == pytest.approx(0.5e-3)
    official = [1e-3 * official_warmup_linear(step, 100, warmup=10 / 100) for step in range(100)]
    assert rates == pytest.approx(official, abs=1e-12)


def test_another_schedule_or_optimizer_drops_the_recipes_settings(tmp_path):
    """`--lr_scheduler_type cosine` or `--optim adafactor` replaces the recipe's choice, its free-form settings too."""
    trainer = recipe_trainer(tmp_path, tiny_model(), lr_scheduler_type="cosine", optim="adafactor")
    assert not trainer.args.lr_scheduler_kwargs and not trainer.args.optim_args
    from hf_bertology.utils import BertologyError

    with pytest.raises(BertologyError, match="bias_correction=False applies to --optim"):
        recipe_trainer(
            tmp_path, tiny_model(), optim="adafactor", optim_args="bias_correction=False"
        ).create_optimizer()


def test_first_step_of_a_gradient_of_ones_through_pretrain(tmp_path, corpus_file):
    """`bertology pretrain --recipe deberta-v3-tiny`: a gradient of ones moves a weight by lr·(1-β1)/√(1-β2) at the
    first step (XAdam, no bias correction; torch's AdamW: lr)."""
    from transformers import TrainerCallback

    from hf_bertology.training.pretrain import main

    name = "mask_predictions.LayerNorm.bias"  # not decayed: the step is Adam's alone

    class OnesAtFirstStep(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if state.global_step == 0:
                for p in model.parameters():
                    if p.requires_grad:
                        p.grad = torch.ones_like(p)
                self.before = dict(model.named_parameters())[name].detach().clone()

        def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
            if state.global_step == 0:
                self.moved = dict(model.named_parameters())[name].detach() - self.before
                self.lr = optimizer.param_groups[0]["lr"]

    probe = OnesAtFirstStep()
    argv = ["--recipe", "deberta-v3-tiny", "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "out")]
    argv += ["--vocab_size", "300", "--max_train_samples", "4", "--per_device_train_batch_size", "4"]
    argv += ["--max_steps", "1", "--learning_rate", "1e-3", "--warmup_steps", "0", "--use_cpu", "true"]
    main([*argv, "--save_strategy", "no", "--disable_tqdm", "true"], callbacks=[probe])
    assert probe.lr == pytest.approx(1e-3)  # warmup_linear at step 0 of a run without warmup: the peak
    expected = -1e-3 * (1 - 0.9) / (1 - 0.999) ** 0.5  # against the gradient
    torch.testing.assert_close(probe.moved, torch.full_like(probe.moved, expected), rtol=0.05, atol=0)


# -- saving: merged GDES table, plain transformers ------------------------------------------------------------------


def trained_gdes_model() -> BertologyDebertaV3ForPreTraining:
    model = tiny_model("gdes")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    torch.manual_seed(0)
    for _ in range(2):
        model(**tiny_batch()).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_saved_gdes_table_is_the_merged_sum(tmp_path):
    model = trained_gdes_model()
    merged = generator_table(model) + model.gdes.delta
    assert torch.equal(model.state_dict()[f"deberta.{WORD}"], merged.detach())
    assert model.state_dict(keep_vars=True)[f"deberta.{WORD}"] is discriminator_table(model)  # parameters untouched
    model.save_pretrained(tmp_path / "ckpt")
    loaded, info = BertologyDebertaV3ForPreTraining.from_pretrained(tmp_path / "ckpt", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert torch.equal(loaded.gdes.delta, model.gdes.delta) and not discriminator_table(loaded).requires_grad
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    hb.export_part(tmp_path / "ckpt", tmp_path / "disc", "discriminator")
    exported = DebertaV2Model.from_pretrained(tmp_path / "disc")
    assert torch.allclose(exported.embeddings.word_embeddings.weight, merged)


def test_a_checkpoint_from_before_emd_still_exports(tmp_path):
    """A joint checkpoint written before the generator had EMD (no `generator.deberta.embeddings.position_embeddings`)
    still exports both vanilla networks, equal to its weights."""
    from safetensors.torch import load_file, save_file

    model = trained_gdes_model()
    model.save_pretrained(tmp_path / "ckpt")
    weights = load_file(tmp_path / "ckpt" / "model.safetensors")
    del weights["generator.deberta.embeddings.position_embeddings.weight"]
    save_file(weights, tmp_path / "ckpt" / "model.safetensors", metadata={"format": "pt"})
    hb.export_part(tmp_path / "ckpt", tmp_path / "gen", "generator")
    hb.export_part(tmp_path / "ckpt", tmp_path / "disc", "discriminator")
    generator = load_file(tmp_path / "gen" / "model.safetensors")
    assert torch.equal(generator["deberta.embeddings.word_embeddings.weight"], weights[f"generator.deberta.{WORD}"])
    discriminator = load_file(tmp_path / "disc" / "model.safetensors")
    assert torch.equal(discriminator[WORD], weights[f"deberta.{WORD}"])


PLAIN_TRANSFORMERS = """
import sys
sys.modules["hf_bertology"] = None  # plain transformers only
import json, torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForSequenceClassification
ckpt, gen, ids = sys.argv[1], sys.argv[2], torch.tensor(json.loads(sys.argv[3]))
disc = sys.argv[4]
result = {"refused": {}}
for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification):  # the joint folder (issue 31)
    for remote in (False, True):
        try:
            result["refused"][f"{auto.__name__}[{remote}]"] = type(auto.from_pretrained(ckpt, trust_remote_code=remote)).__name__
        except ValueError as err:
            result["refused"][f"{auto.__name__}[{remote}]"] = " | ".join(str(err).splitlines()[:4])
encoder, info = AutoModel.from_pretrained(disc, output_loading_info=True)
result["class"] = type(encoder).__name__
result["missing"] = sorted(info["missing_keys"])
result["unexpected"] = sorted(info["unexpected_keys"])
with torch.no_grad():
    result["hidden"] = encoder(ids).last_hidden_state.tolist()
classifier, info = AutoModelForSequenceClassification.from_pretrained(disc, num_labels=2, output_loading_info=True)
result["classifier"] = type(classifier).__name__
result["classifier_missing"] = sorted({k.split(".")[0] for k in info["missing_keys"]})
joint = AutoModelForPreTraining.from_pretrained(ckpt, trust_remote_code=True)
result["remote"] = type(joint).__name__
with torch.no_grad():
    result["remote_logits"] = joint(input_ids=ids).rtd_logits.tolist()
m, info = AutoModelForMaskedLM.from_pretrained(gen, output_loading_info=True)
result["gen"] = (type(m).__name__, sorted(info["missing_keys"]), sorted(info["unexpected_keys"]))
with torch.no_grad():
    result["gen_logits"] = m(ids).logits.tolist()
print(json.dumps(result))
"""


def test_plain_transformers_loads_discriminator_and_generator(tmp_path):
    model = trained_gdes_model()
    ids = torch.randint(5, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    hb.export_part(ckpt, tmp_path / "gen", "generator")
    hb.export_part(ckpt, tmp_path / "disc", "discriminator")
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent(PLAIN_TRANSFORMERS))
    run = subprocess.run(
        [
            sys.executable,
            str(script),
            str(ckpt),
            str(tmp_path / "gen"),
            json.dumps(ids.tolist()),
            str(tmp_path / "disc"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    with torch.no_grad():
        hidden = model.discriminate(ids).last_hidden_state
        rtd_logits = model(input_ids=ids).rtd_logits
        generator_logits = model.generator(ids).logits
    # the joint checkpoint (issue 31): plain transformers refuses it, remote code gives our class only
    for client, got in result["refused"].items():
        expected = "Unrecognized configuration class" if client.endswith("[True]") else "trust_remote_code"
        assert expected in got, (client, got)
    assert result["class"] == "DebertaV2Model" and result["missing"] == [] and result["unexpected"] == []
    assert result["classifier"] == "DebertaV2ForSequenceClassification"
    assert result["classifier_missing"] == ["classifier", "pooler"]  # the new task head only
    assert torch.allclose(torch.tensor(result["hidden"]), hidden, atol=1e-5)
    assert result["remote"] == "BertologyDebertaV3ForPreTraining"
    assert torch.allclose(torch.tensor(result["remote_logits"]), rtd_logits, atol=1e-5)
    assert result["gen"] == ["DebertaV2ForMaskedLM", [], []]
    assert torch.allclose(torch.tensor(result["gen_logits"]), generator_logits, atol=1e-5)


# -- collator and the command line ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(texts):
    return hb.get_recipe("deberta-v3-tiny").train_tokenizer(texts * 3, vocab_size=300)


def test_tokenizer_is_the_deberta_v2_family(tokenizer):
    assert type(tokenizer).__name__ == "DebertaV2Tokenizer"
    ids = (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.unk_token_id)
    assert ids == (0, 1, 2, 3) and tokenizer.mask_token_id == 4


def test_generator_input_is_all_mask_with_an_exact_count(tokenizer):
    config = hb.get_recipe("deberta-v3-tiny").config
    collator = DataCollatorForMaskedLM.from_config(config, tokenizer, seed=0)
    gen = torch.Generator().manual_seed(0)
    low = len(tokenizer.all_special_ids)
    body = torch.randint(low, len(tokenizer), (1600, 62), generator=gen).tolist()
    batch = collator([{"input_ids": [tokenizer.cls_token_id, *row, tokenizer.sep_token_id]} for row in body])
    chosen = batch["labels"].ne(-100)
    assert (chosen.sum(1) == min(config.max_predictions_per_seq, round(64 * 0.15))).all()  # exact count, capped
    assert (batch["input_ids"][chosen] == tokenizer.mask_token_id).all()  # mask_prob 1, keep 0, random 0
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # never [CLS]/[SEP]
    positions = chosen.float().mean(0)[1:-1]  # uniform over the 62 body positions (~100k tokens)
    assert (positions - 9 / 62).abs().max() < 0.04


def test_positions_are_chosen_one_per_window_from_the_left(tokenizer):
    """The official NGramMaskGenerator (mlm_task.py:57,74,78-96; rtd_task.py:145): one position per window of
    int(1/0.15) = 6 candidates, uniform inside it, windows from the left until the count; the tail is never masked.
    Length 64: 62 candidates, count round(64 * 0.15) = 10, so windows 0-9 (the first 60 candidates) get one each."""
    recipe = hb.get_recipe("deberta-v3-tiny")
    collator = recipe.build_collator(tokenizer, seed=0)
    assert type(collator).__name__ == "DataCollatorForWindowMasking" and collator.window == 6
    gen = torch.Generator().manual_seed(0)
    low = len(tokenizer.all_special_ids)
    body = torch.randint(low, len(tokenizer), (1600, 62), generator=gen).tolist()
    batch = collator([{"input_ids": [tokenizer.cls_token_id, *row, tokenizer.sep_token_id]} for row in body])
    chosen = batch["labels"].ne(-100)[:, 1:-1]  # (1600, 62) the candidates
    assert (chosen.sum(1) == 10).all() and (
        batch["input_ids"][batch["labels"].ne(-100)] == tokenizer.mask_token_id
    ).all()
    windows = chosen[:, :60].reshape(-1, 10, 6)  # (N, window, offset)
    assert (windows.sum(2) == 1).all()  # exactly one per window
    assert not chosen[:, 60:].any()  # the tail: never
    offsets = windows.float().mean((0, 1))  # uniform inside the window: 1/6 each over 16k windows
    assert (offsets - 1 / 6).abs().max() < 0.015
    # A short row: 10 candidates -> windows of 6 and 4, count round(12 * 0.15) = 2: one in each
    short = collator([{"input_ids": [tokenizer.cls_token_id, *body[0][:10], tokenizer.sep_token_id]}] * 400)
    picked = short["labels"].ne(-100)[:, 1:-1]
    assert (picked[:, :6].sum(1) == 1).all() and (picked[:, 6:].sum(1) == 1).all()
    assert picked[:, 6:].float().mean(0).min() > 0.15  # the short window's 4 positions all drawn
    uniform = DataCollatorForMaskedLM.from_config(recipe.config, tokenizer, seed=0)
    assert uniform([{"input_ids": [1, *body[0], 2]}])["labels"].ne(-100).sum() == 10


def test_pretrain_trains_saves_and_exports(tmp_path, corpus_file):
    from hf_bertology.cli import main as cli
    from hf_bertology.training.pretrain import main

    out = tmp_path / "out"
    argv = ["--recipe", "deberta-v3-tiny", "--train_file", str(corpus_file), "--output_dir", str(out)]
    argv += ["--vocab_size", "300", "--max_train_samples", "8", "--per_device_train_batch_size", "8"]
    argv += ["--max_steps", "30", "--learning_rate", "3e-3", "--warmup_steps", "0", "--logging_steps", "1"]
    metrics = main([*argv, "--save_steps", "30", "--disable_tqdm", "true", "--use_cpu"])
    logs = json.loads((out / "checkpoint-30" / "trainer_state.json").read_text())["log_history"]
    assert_train_loss_is_the_logged_mean(metrics, logs)
    losses = torch.tensor([[log["mlm_loss"], log["rtd_loss"], log["loss"]] for log in logs if "rtd_loss" in log])
    assert len(losses) == 30 and torch.isfinite(losses).all()
    first, last = losses[:5].mean(0), losses[-5:].mean(0)
    assert last[2] < 0.8 * first[2] and last[0] < first[0]  # the same 8 examples: both networks learn them
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "bertology-deberta-v3-joint" and config["embedding_sharing"] == "gdes"
    assert (out / "modeling_deberta_v3.py").is_file() and (out / "configuration_deberta_v3.py").is_file()
    assert cli(["export", "--deberta_v3_part", "generator", str(out), str(tmp_path / "gen")]) == 0
    exported = json.loads((tmp_path / "gen" / "config.json").read_text())
    assert exported["architectures"] == ["DebertaV2ForMaskedLM"] and "embedding_sharing" not in exported
    assert exported["num_hidden_layers"] == 1 and (tmp_path / "gen" / "tokenizer.json").is_file()
