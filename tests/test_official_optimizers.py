"""Each recipe's optimizer and schedule against a transcription of its official code (training/optimizers.py):
BERT's and ELECTRA's AdamWeightDecay without bias correction and their schedules, ALBERT's LAMB with its exclusions,
XLNet's decay sets and floor, fairseq's decay of every parameter (RoBERTa, SpanBERT), and the choice a flag away."""

from __future__ import annotations

import re

import pytest
import torch

import hf_bertology as hb
from hf_bertology.training.optimizers import OFFICIAL_NO_DECAY, AdamWNoBiasCorrection, Lamb
from hf_bertology.utils import BertologyError

# -- transcriptions of the official code -----------------------------------------------------------------------------


def official_adam_weight_decay(data, m, v, grad, lr, beta1, beta2, eps, weight_decay):
    """google-research/bert `optimization.py:130-151` (`AdamWeightDecayOptimizer.apply_gradients`), transcribed."""
    m.copy_(beta1 * m + (1.0 - beta1) * grad)
    v.copy_(beta2 * v + (1.0 - beta2) * grad.square())
    update = m / (v.sqrt() + eps)
    update = update + weight_decay * data
    data.copy_(data - lr * update)


def official_tf_adam(data, m, v, grad, lr, beta1, beta2, eps, t):
    """TensorFlow's `tf.train.AdamOptimizer` update (`training_ops.apply_adam`), which zihangdai/xlnet
    `model_utils.py:130-133` builds at weight decay 0, transcribed: bias-corrected, ε outside √v, no decay."""
    m.copy_(beta1 * m + (1.0 - beta1) * grad)
    v.copy_(beta2 * v + (1.0 - beta2) * grad.square())
    lr_t = lr * (1.0 - beta2**t) ** 0.5 / (1.0 - beta1**t)
    data.copy_(data - lr_t * m / (v.sqrt() + eps))


def official_lamb(data, m, v, grad, lr, beta1, beta2, eps, weight_decay, layer_adaptation):
    """google-research/albert `lamb_optimizer.py:88-116` (`LAMBOptimizer.apply_gradients`), transcribed."""
    m.copy_(beta1 * m + (1.0 - beta1) * grad)
    v.copy_(beta2 * v + (1.0 - beta2) * grad.square())
    update = m / (v.sqrt() + eps)
    update = update + weight_decay * data
    ratio = 1.0
    if layer_adaptation:
        w_norm, g_norm = torch.linalg.norm(data), torch.linalg.norm(update)
        ratio = torch.where(w_norm > 0, torch.where(g_norm > 0, w_norm / g_norm, 1.0), 1.0)
    data.copy_(data - ratio * lr * update)


def official_bert_lr(step, init_lr, num_train_steps, num_warmup_steps):
    """google-research/bert `optimization.py:29-54` (albert `optimization.py:34-64` with power 1), transcribed."""
    step = min(step, num_train_steps)  # tf.train.polynomial_decay, cycle=False
    learning_rate = (init_lr - 0.0) * (1 - step / num_train_steps) ** 1.0 + 0.0
    if num_warmup_steps:
        is_warmup = float(step < num_warmup_steps)
        learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * init_lr * step / num_warmup_steps
    return learning_rate


def official_electra_lr(step, learning_rate, num_train_steps, warmup_steps, lr_decay_power=1.0):
    """google-research/electra `model/optimization.py:36-45`, transcribed."""
    decayed = learning_rate * (1 - min(step, num_train_steps) / num_train_steps) ** lr_decay_power
    return decayed * min(1.0, step / warmup_steps)


def official_xlnet_lr(step, learning_rate, train_steps, warmup_steps, min_lr_ratio):
    """zihangdai/xlnet `model_utils.py:98-123` (decay_method poly), transcribed."""
    warmup_lr = step / warmup_steps * learning_rate
    decay_step = min(step - warmup_steps, train_steps - warmup_steps)
    end = learning_rate * min_lr_ratio
    decay_lr = (learning_rate - end) * (1 - decay_step / (train_steps - warmup_steps)) + end
    return warmup_lr if step < warmup_steps else decay_lr


def official_spanbert_lr(num_updates, lr, total_num_update, warmup_updates, end_learning_rate=0.0, power=1.0):
    """facebookresearch/SpanBERT `pretraining/fairseq/optim/lr_scheduler/polynomial_decay_schedule.py:57-64`: the
    rate after `num_updates` updates, used by the next one (transcribed); before the first, the optimizer's own
    `lr` (`fairseq/optim/adam.py:38`, `args.lr[0]`): the scheduler sets none when built (:15-28), and its
    `step(epoch)` (:50-55) runs only at an epoch's end or on loading a checkpoint (`train.py:95,350`)."""
    if num_updates == 0:
        return lr
    if warmup_updates > 0 and num_updates <= warmup_updates:
        return num_updates / warmup_updates * lr
    return (lr - end_learning_rate) * (1 - num_updates / total_num_update) ** power + end_learning_rate


def official_fairseq_lr(num_updates, lr, total_num_update, warmup_updates, end_learning_rate=0.0, power=1.0):
    """fairseq `3d262bb` `fairseq/optim/lr_scheduler/polynomial_decay_schedule.py:74-89` (`step_update`): the rate
    after `num_updates` updates, used by the next one (transcribed); the trainer calls `step_update(0)` right after
    building the scheduler (`fairseq/trainer.py:382`), so the first update runs at 0."""
    if warmup_updates > 0 and num_updates <= warmup_updates:
        return num_updates / warmup_updates * lr
    if num_updates >= total_num_update:
        return end_learning_rate
    remaining = 1 - (num_updates - warmup_updates) / (total_num_update - warmup_updates)
    return (lr - end_learning_rate) * remaining**power + end_learning_rate


# -- the recipes' trainers -------------------------------------------------------------------------------------------


def recipe_trainer(tmp_path, recipe: str, model=None, **flags):
    """The recipe's Trainer (`BertologyTrainer`, XLNet's `XLNetTrainer`) with its TrainingArguments as `bertology
    pretrain` settles them, around `model` (the family's tiny model unless given)."""
    from transformers import TrainingArguments

    from hf_bertology.training.arguments import training_arguments
    from hf_bertology.training.run_trainer import trainer_class

    given = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], **flags)
    settled = hb.get_recipe(recipe)
    args = training_arguments(given, settled, {"use_cpu", "report_to", *flags})
    if model is None:
        torch.manual_seed(0)
        model = hb.get_recipe(recipe.split("-")[0] + "-tiny").build_model()
    return trainer_class(settled.variant.trainer_class)(model=model, args=args)


def lrs_over(trainer, steps: int) -> list[float]:
    trainer.create_optimizer()
    scheduler = trainer.create_scheduler(num_training_steps=steps)
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        scheduler.step()
    return rates


def decay_of(trainer) -> dict[str, float]:
    """Each parameter's weight decay in the trainer's optimizer."""
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    return {names[id(p)]: g["weight_decay"] for g in trainer.optimizer.param_groups for p in g["params"]}


@pytest.mark.parametrize("recipe", ["bert-base", "electra-base"])
def test_first_step_of_a_gradient_of_ones(tmp_path, recipe):
    """bert-base's and electra-base's arguments (a tiny model): a gradient of ones moves a weight by
    lr·(1-β1)/√(1-β2) at the first step (no bias correction; torch's AdamW: lr)."""
    trainer = recipe_trainer(tmp_path, recipe, learning_rate=1e-3, warmup_steps=0, max_steps=100)
    optimizer = trainer.create_optimizer()
    assert type(optimizer) is AdamWNoBiasCorrection
    for p in trainer.model.parameters():
        p.grad = torch.ones_like(p)
    bias = next(p for n, p in trainer.model.named_parameters() if n.endswith("LayerNorm.bias"))
    before = bias.detach().clone()
    optimizer.step()
    expected = -1e-3 * (1 - 0.9) / (1 - 0.999) ** 0.5
    torch.testing.assert_close(bias.detach() - before, torch.full_like(before, expected), rtol=1e-4, atol=0)


@pytest.mark.parametrize(
    "recipe, official, differ",
    [
        ("bert-base", lambda s: official_bert_lr(s, 1e-3, 100, 10), []),
        ("albert-base", lambda s: official_bert_lr(s, 1e-3, 100, 10), []),
        ("electra-base", lambda s: official_electra_lr(s, 1e-3, 100, 10), []),
        ("xlnet-base", lambda s: official_xlnet_lr(s, 1e-3, 100, 10, 0.001), []),
        ("spanbert-base", lambda s: official_spanbert_lr(s, 1e-3, 100, 10), [0, 10]),
        ("roberta-base", lambda s: official_fairseq_lr(s, 1e-3, 100, 10), []),
    ],
)
def test_schedule_is_the_official(tmp_path, recipe, official, differ):
    """The recipe's schedule at every step of 100 (10 warmup) equals the official one; at step 50 it is 0.5 of the
    peak where the decay runs from step 0 (from the warmup's end, as transformers' linear and current fairseq: 0.556).
    SpanBERT's fairseq sets the rate after update s for update s + 1 and keeps warming up through s = W: it differs
    at two steps (its first update runs at the peak, the optimizer's own rate, where ours runs at 0; at W it is the
    peak, ours 1 - W/T), as docs/recipes/spanbert.md states; current fairseq (RoBERTa's) at none."""
    rates = lrs_over(recipe_trainer(tmp_path, recipe, learning_rate=1e-3, max_steps=100, warmup_steps=10), 100)
    expected = [official(step) for step in range(100)]
    assert [s for s in range(100) if rates[s] != pytest.approx(expected[s], abs=1e-12)] == differ
    if recipe != "xlnet-base":  # its decay runs to 0.001 of the peak
        assert rates[50] == pytest.approx(1e-3 * 5 / 9 if recipe == "roberta-base" else 0.5e-3)


def test_electra_warmup_runs_with_the_decay(tmp_path):
    """ELECTRA multiplies warmup and decay (min(1, s/W)·(1 - s/T)); BERT's warmup replaces the decay."""
    electra = lrs_over(
        recipe_trainer(tmp_path, "electra-base", learning_rate=1.0, max_steps=100, warmup_steps=10), 100
    )
    bert = lrs_over(recipe_trainer(tmp_path, "bert-base", learning_rate=1.0, max_steps=100, warmup_steps=10), 100)
    assert electra[5] == pytest.approx(0.5 * 0.95) and bert[5] == pytest.approx(0.5)


def steps_against_transcription(trainer, official_update, official_lr, steps: int) -> None:
    """`steps` random gradients through `trainer`'s optimizer and schedule, and through `official_update(data, m, v,
    grad, lr, exempt)` per parameter (`exempt`: the official `exclude_from_weight_decay` names it) at
    `official_lr(step)`: every parameter ends equal."""
    optimizer = trainer.create_optimizer()
    scheduler = trainer.create_scheduler(num_training_steps=steps)
    params = dict(trainer.model.named_parameters())
    state = {name: (p.detach().clone(), torch.zeros_like(p), torch.zeros_like(p)) for name, p in params.items()}
    gen = torch.Generator().manual_seed(0)
    for step in range(steps):
        lr = official_lr(step)
        assert scheduler.get_last_lr()[0] == pytest.approx(lr, abs=1e-15)
        for name, p in params.items():
            p.grad = torch.randn(p.shape, generator=gen)
            official_update(*state[name], p.grad, lr, re.search(OFFICIAL_NO_DECAY, name) is not None)
        optimizer.step()
        scheduler.step()
    for name, p in params.items():
        torch.testing.assert_close(p.detach(), state[name][0], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("recipe", ["bert-base", "electra-base"])
def test_adam_weight_decay_equals_the_transcription(tmp_path, recipe):
    """The recipe's arguments on its tiny model: 30 steps (warmup and decay included) equal the official
    AdamWeightDecay update parameter by parameter, with its exclusions from weight decay."""
    trainer = recipe_trainer(tmp_path, recipe, learning_rate=1e-2, max_steps=30, warmup_steps=5)

    def update(data, m, v, grad, lr, exempt):
        official_adam_weight_decay(data, m, v, grad, lr, 0.9, 0.999, 1e-6, 0.0 if exempt else 0.01)

    schedule = official_bert_lr if recipe == "bert-base" else official_electra_lr
    steps_against_transcription(trainer, update, lambda step: schedule(step, 1e-2, 30, 5), 30)


def test_albert_trains_with_lamb_as_the_transcription(tmp_path):
    """albert-base's arguments on albert-tiny: LAMB, LayerNorm and biases without decay or layer adaptation; 100
    steps of random gradients (warmup and decay included) equal the official update parameter by parameter."""
    trainer = recipe_trainer(tmp_path, "albert-base", learning_rate=1e-2, max_steps=100, warmup_steps=10)
    optimizer = trainer.create_optimizer()
    assert type(optimizer) is Lamb
    params = dict(trainer.model.named_parameters())
    exempt = {name for name in params if re.search(OFFICIAL_NO_DECAY, name)}
    adapted = {id(p) for g in optimizer.param_groups if g["layer_adaptation"] for p in g["params"]}
    assert {name for name, p in params.items() if id(p) not in adapted} == exempt
    assert {name for name, decay in decay_of(trainer).items() if decay == 0} == exempt
    assert exempt and len(exempt) < len(params)

    def update(data, m, v, grad, lr, exempt):
        official_lamb(data, m, v, grad, lr, 0.9, 0.999, 1e-6, 0.0 if exempt else 0.01, not exempt)

    steps_against_transcription(trainer, update, lambda step: official_bert_lr(step, 1e-2, 100, 10), 100)


def test_lamb_trust_ratio_is_one_at_a_zero_norm():
    """A zero weight (or a zero update) takes the plain update, as the official `where(w_norm > 0, ...)`."""
    weight = torch.nn.Parameter(torch.zeros(3, 4))
    weight.grad = torch.ones(3, 4)
    Lamb([weight], lr=1e-3, weight_decay=0.01).step()
    torch.testing.assert_close(
        weight.detach(), torch.full((3, 4), -1e-3 * 0.1 / (0.001**0.5 + 1e-6)), rtol=1e-5, atol=0
    )


@pytest.mark.parametrize("recipe", ["roberta-base", "spanbert-base"])
def test_fairseq_recipes_decay_every_parameter(tmp_path, recipe):
    """fairseq hands every parameter to Adam with one weight decay: biases and LayerNorm weights decay too."""
    trainer = recipe_trainer(tmp_path, recipe)
    trainer.create_optimizer()
    decays = decay_of(trainer)
    assert set(decays.values()) == {0.01}
    assert any(name.endswith("LayerNorm.weight") for name in decays) and any("bias" in name for name in decays)


def test_xlnet_decays_its_relative_biases(tmp_path):
    """xlnet's AdamWeightDecay: no bias correction; r_w/r_r/r_s_bias decay, other biases and layer norms do not."""
    trainer = recipe_trainer(tmp_path, "xlnet-base")
    assert type(trainer.create_optimizer()) is AdamWNoBiasCorrection
    decays = decay_of(trainer)
    assert decays["transformer.layer.0.rel_attn.r_w_bias"] == 0.01 == decays["transformer.layer.0.rel_attn.r_s_bias"]
    assert decays["transformer.layer.0.rel_attn.layer_norm.weight"] == 0.0 == decays["lm_loss.bias"]


def test_xlnet_without_weight_decay_takes_bias_corrected_adam(tmp_path):
    """xlnet `model_utils.py:130-139` picks its optimizer by the weight decay: at `--weight_decay 0`, TF's
    `AdamOptimizer`. 30 steps of xlnet-base's arguments (warmup and decay) equal its transcription parameter by
    parameter, at ε 1e-12 (torch adds ε to √v̂, TF to √v: at the recipe's 1e-6 they part by ~1e-6 where a weight is
    near 0, docs/recipes/xlnet.md); `--optim_args bias_correction=False` keeps the uncorrected update."""
    flags = {"learning_rate": 1e-2, "max_steps": 30, "warmup_steps": 5, "adam_epsilon": 1e-12}
    trainer = recipe_trainer(tmp_path, "xlnet-base", weight_decay=0.0, **flags)
    assert type(trainer.create_optimizer()) is torch.optim.AdamW
    counts = {}

    def update(data, m, v, grad, lr, exempt):
        counts[id(data)] = t = counts.get(id(data), 0) + 1
        official_tf_adam(data, m, v, grad, lr, 0.9, 0.999, 1e-12, t)

    steps_against_transcription(trainer, update, lambda step: official_xlnet_lr(step, 1e-2, 30, 5, 0.001), 30)
    kept = recipe_trainer(tmp_path, "xlnet-base", weight_decay=0.0, optim_args="bias_correction=False")
    assert type(kept.create_optimizer()) is AdamWNoBiasCorrection


@pytest.mark.parametrize("recipe", ["bert-base", "electra-base", "albert-base"])
def test_default_decay_set_is_the_official(tmp_path, recipe):
    """transformers' rule (no decay on biases and norms) names on these models exactly the parameters the official
    `exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]` names."""
    trainer = recipe_trainer(tmp_path, recipe)
    trainer.create_optimizer()
    official = {name: 0.0 if re.search(OFFICIAL_NO_DECAY, name) else 0.01 for name in decay_of(trainer)}
    assert decay_of(trainer) == official


def test_the_choice_stays_a_flag_away(tmp_path):
    """`--optim adamw_torch` gives torch's AdamW (the recipe's `optim_args` dropped); `--lr_scheduler_type linear`
    transformers' linear; an official key with another optimizer, or a bad schedule key, is one line."""
    trainer = recipe_trainer(tmp_path, "albert-base", optim="adamw_torch", lr_scheduler_type="linear")
    assert type(trainer.create_optimizer()) is torch.optim.AdamW and not trainer.args.lr_scheduler_kwargs
    assert type(recipe_trainer(tmp_path, "bert-base", optim_args="bias_correction=True").create_optimizer()) is (
        torch.optim.AdamW
    )
    roberta = recipe_trainer(tmp_path, "roberta-base", optim="adamw_torch")
    roberta.create_optimizer()
    assert decay_of(roberta)["roberta.embeddings.LayerNorm.weight"] == 0.0  # transformers' rule back
    with pytest.raises(BertologyError, match="layer_adaptation=True applies to --optim"):
        recipe_trainer(
            tmp_path, "albert-base", optim="adafactor", optim_args="layer_adaptation=True"
        ).create_optimizer()
    with pytest.raises(BertologyError, match="takes bias_correction=False"):  # over the recipe's False
        recipe_trainer(tmp_path, "albert-base", optim_args="bias_correction=True").create_optimizer()
    trainer = recipe_trainer(tmp_path, "electra-base", lr_scheduler_kwargs={"warmup_scales_decay": True, "x": 1})
    with pytest.raises(BertologyError, match="apply to --lr_scheduler_type linear"):
        trainer.create_scheduler(10, trainer.create_optimizer())


def test_a_users_settings_go_over_the_recipes_key_by_key(tmp_path):
    """Issue 53: `--optim_args` or `--lr_scheduler_kwargs` replaced the recipe's whole, so that any key (even a
    misspelt one) swapped bert's AdamWeightDecay for torch's AdamW and dropped ELECTRA's schedule; now a user's keys
    go over the recipe's, and the official optimizer stays unless its own key is given."""
    bert = recipe_trainer(tmp_path, "bert-base", optim_args="exclude_from_weight_decay=none")
    assert bert.args.optim_args == "bias_correction=False,exclude_from_weight_decay=none"
    assert type(bert.create_optimizer()) is AdamWNoBiasCorrection
    assert set(decay_of(bert).values()) == {0.01}  # every parameter decays
    assert (
        type(recipe_trainer(tmp_path, "albert-base", optim_args="exclude_from_weight_decay=none").create_optimizer())
        is Lamb
    )
    electra = recipe_trainer(tmp_path, "electra-base", lr_scheduler_kwargs={"min_lr_ratio": 0.1})
    assert electra.args.lr_scheduler_kwargs == {
        "decay_from_start": True,
        "warmup_scales_decay": True,
        "min_lr_ratio": 0.1,
    }
    off = recipe_trainer(tmp_path, "electra-base", lr_scheduler_kwargs={"warmup_scales_decay": False})
    assert off.args.lr_scheduler_kwargs == {"decay_from_start": True, "warmup_scales_decay": False}


# -- ELECTRA's layer-wise GLUE fine-tuning ---------------------------------------------------------------------------


def test_layerwise_fine_tuning_takes_electras_optimizer_and_optim_args(tmp_path):
    """`bertology glue --layerwise_lr_decay`: ELECTRA's AdamWeightDecay (run_finetuning.py:107) and schedule by
    default; `--optim_args` chooses (torch's AdamW, LAMB, the decay lists); an explicit schedule stays."""
    from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

    from hf_bertology.training.layerwise_lr import electra_schedule, layerwise_lr_optimizer

    model = BertForSequenceClassification(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=20)
    )

    def built(**flags):
        args = TrainingArguments(output_dir=str(tmp_path), report_to=[], weight_decay=0.01, **flags)
        optimizer_cls, kwargs = layerwise_lr_optimizer(model, args, 0.8)
        electra_schedule(args)
        return optimizer_cls, kwargs, args

    optimizer_cls, _, args = built()
    assert optimizer_cls is AdamWNoBiasCorrection
    assert args.lr_scheduler_kwargs == {"decay_from_start": True, "warmup_scales_decay": True}
    assert built(optim_args="bias_correction=True")[0] is torch.optim.AdamW
    assert built(optim_args="bias_correction=False,layer_adaptation=True")[0] is Lamb
    _, kwargs, _ = built(optim_args="exclude_from_weight_decay=none")
    assert {g["weight_decay"] for g in kwargs["params"]} == {0.01}
    assert built(lr_scheduler_kwargs={"decay_from_start": False})[2].lr_scheduler_kwargs == {"decay_from_start": False}
    assert not built(lr_scheduler_type="cosine")[2].lr_scheduler_kwargs


# -- ModernBERT's batch-size warmup under gradient accumulation --------------------------------------------------------


def test_batch_warmup_under_accumulation_starts_at_one_micro_batch():
    """The official ramp counts the step's batch in micro-batches of `min_size` (sequence_packer.py:402,409): with
    4 micro-batches a step the first step has 96 examples (24 per micro-batch), not 4 x 96, and it takes
    4 x as many sizes to reach the full step of 4 x 192."""
    from hf_bertology.training.batch_warmup import BatchSizeWarmup

    warmup = BatchSizeWarmup(10**6, 96, 192, 128, accumulation=4)
    sizes = warmup.sizes()
    assert sizes[0] == 96 and [warmup.size_at(i, sizes) for i in range(4)] == [24, 24, 24, 24]
    assert sorted(set(sizes)) == [96 * rows for rows in range(1, 8)]  # 1 to 7 micro-batches, then the full 8
    assert warmup.size_at(4 * len(sizes), sizes) == 192
    assert sum(warmup.size_at(i, sizes) for i in range(4, 8)) == sizes[1]  # a step's micro-batches hold its size
    with pytest.raises(BertologyError, match="need an example each"):
        BatchSizeWarmup(10**6, 2, 192, 128, accumulation=4)


# -- composed DeBERTa-v3 cells clip each network apart ----------------------------------------------------------------


@pytest.mark.parametrize("cell", ["deberta-v3-tiny@roberta", "deberta-v3-tiny@bert", "electra-tiny@roberta"])
def test_composed_rtd_cells_clip_as_their_objective(tmp_path, cell):
    """DeBERTa-v3's objective on another encoder clips the generator and the discriminator apart, as its decoupled
    training (rtd_task.py:265,351): a generator gradient 1000x the discriminator's leaves the discriminator's alone.
    ELECTRA's (one optimizer, model/optimization.py:62) clips the whole."""
    from transformers import TrainingArguments

    from hf_bertology.training.trainer import BertologyTrainer

    torch.manual_seed(0)
    model = hb.get_recipe(cell).build_model()
    args = TrainingArguments(output_dir=str(tmp_path), max_grad_norm=1.0, report_to=[], use_cpu=True)
    trainer = BertologyTrainer(model=model, args=args)
    generator = [p for p in model.generator.parameters() if p.requires_grad]
    others = [p for p in model.parameters() if p.requires_grad and all(p is not q for q in generator)]
    for group, norm in ((generator, 500.0), (others, 0.5)):  # constant gradients whose norm over the group is `norm`
        count = sum(p.numel() for p in group)
        for p in group:
            p.grad = torch.full_like(p, norm / count**0.5)
    before = [p.grad.clone() for p in others]
    reported = trainer._clip_grad_norm(model)
    assert torch.allclose(reported, torch.tensor((500.0**2 + 0.5**2) ** 0.5), rtol=1e-4)
    apart = all(torch.equal(p.grad, g) for p, g in zip(others, before))
    assert apart == cell.startswith("deberta-v3")
    if not apart:  # the whole clipped to 1: the discriminator's share scaled down with the generator's
        whole = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in generator + others]))
        assert torch.allclose(whole, torch.tensor(1.0), rtol=1e-4)


def test_optimizer_step_benchmark_runs():
    """`benchmarks/optimizer_step.py` (docs/benchmarks.md) at bert-tiny's size: one row per optimizer, fused AdamW
    the reference."""
    import subprocess

    from platform_support import PYTHON, REPO, subprocess_env

    command = [PYTHON, "benchmarks/optimizer_step.py", "--recipe", "bert-tiny", "--steps", "1", "--repeats", "1"]
    done = subprocess.run(command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "ms / step" not in line]
    assert len(rows) == 4 and rows[0].endswith("| 1.00 |") and "Lamb (albert)" in rows[-1]
