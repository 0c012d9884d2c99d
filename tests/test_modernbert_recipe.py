"""ModernBERT trained as its official code trains it (docs/recipes/modernbert.md): StableAdamW with decoupled weight
decay, documents kept apart in packed rows, phase-1 RoPE, the attention-output dropout, Bernoulli masking."""

from __future__ import annotations

import copy
import inspect
import json
import math
from pathlib import Path

import datasets
import pytest
import torch
from transformers import TrainerCallback, TrainingArguments

import hf_bertology as hb
from hf_bertology import recipes
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.collators.flatten import PaddingFreeCollator, flatten_batch
from hf_bertology.data import read_documents, tokenize_corpus
from hf_bertology.data.packing import best_fit_rows, pack_documents
from hf_bertology.models import configuration_modernbert
from hf_bertology.models.configuration_modernbert import BertologyModernBertConfig
from hf_bertology.models.modeling_modernbert import BertologyModernBertForPreTraining
from hf_bertology.models.tiling import init_from_base, layer_mapping, tile_from_middle
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention
from hf_bertology.training.trainer import BertologyTrainer
from model_tester import TINY_CONFIGS
from platform_support import write_corpus

# local_attention 8: the local layers' window (|i - j| <= 4) is shorter than the documents below, so it matters.
TINY = TINY_CONFIGS["modernbert"]  # the shared tester's (tests/model_tester.py)
VOCAB = TINY["vocab_size"]


def tiny_model(seed: int = 0, **overrides) -> BertologyModernBertForPreTraining:
    torch.manual_seed(seed)
    model = BertologyModernBertForPreTraining(BertologyModernBertConfig(**{**TINY, **overrides}))
    return set_attention(model, PACKED_ATTENTION).eval()


# -- 1. StableAdamW, weight decay decoupled from the learning rate ----------------------------------------------


def recipe_optimizer(model, tmp_path, recipe="modernbert-tiny"):
    """The optimizer the Trainer builds from the recipe's training defaults."""
    defaults = hb.get_recipe(recipe).training_defaults
    names = ("optim", "optim_args", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon")
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **{k: defaults[k] for k in names})
    trainer = BertologyTrainer(model=model, args=args)
    return trainer.create_optimizer(), defaults


def test_weight_decay_per_step_is_wd_times_lr_over_peak(tmp_path):
    """AnswerDotAI/ModernBERT main.py:243-258: `decoupled_stableadamw` = StableAdamW(decouple_lr=True): a step at
    learning rate lr_t multiplies a weight by 1 - wd·lr_t/lr_max (torch's AdamW: 1 - wd·lr_t, ~1000x weaker)."""
    model = tiny_model()
    optimizer, defaults = recipe_optimizer(model, tmp_path)
    assert type(optimizer).__module__.startswith("optimi") and type(optimizer).__name__ == "StableAdamW"
    wd, peak = defaults["weight_decay"], defaults["learning_rate"]
    assert (wd, peak) == (1e-5, 1e-3)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for fraction in (1.0, 0.25):  # at the peak, then at a quarter of it (the scheduler sets the groups' lr)
        for group in optimizer.param_groups:
            group["lr"] = peak * fraction
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # no gradient: the step is the decay alone
        optimizer.step()
        factor = 1 - wd * fraction  # hand-computed: lr_t / lr_max = fraction
        for name, p in model.named_parameters():
            expected = before[name] * factor if p.ndim > 1 else before[name]  # main.py:97-110: no decay on 1-D
            torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-9, msg=name)
            before[name] = p.detach().clone()


def test_no_gradient_clipping_and_decay_groups_match_official(tmp_path):
    """StableAdamW replaces gradient clipping (main.py:421-428); no decay on biases and 1-D tensors (main.py:97-110)."""
    assert hb.get_recipe("modernbert-base").training_defaults["max_grad_norm"] == 0.0
    model = tiny_model()
    optimizer, _ = recipe_optimizer(model, tmp_path)
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    official = {id(p) for name, p in model.named_parameters() if not (p.ndim <= 1 or name.endswith(".bias"))}
    assert decayed == official


# -- 2. Documents kept apart ------------------------------------------------------------------------------------


def two_documents(seed: int = 0) -> tuple[list[int], list[int]]:
    gen = torch.Generator().manual_seed(seed)
    a = [0, *torch.randint(5, VOCAB, (18,), generator=gen).tolist(), 2]  # [CLS] doc [SEP], 20 tokens
    b = [0, *torch.randint(5, VOCAB, (13,), generator=gen).tolist(), 2]  # 15 tokens
    return a, b


def labelled(ids: list[int], every: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([ids])
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    chosen[:, 1:-1:every] = True
    return ids.masked_fill(chosen, 4), torch.where(chosen, ids, -100)


def packed_row(a: list[int], b: list[int]) -> dict:
    ids_a, labels_a = labelled(a)
    ids_b, labels_b = labelled(b)
    starts = torch.zeros(1, len(a) + len(b), dtype=torch.long)
    starts[0, 0] = starts[0, len(a)] = 1
    return flatten_batch(
        {
            "input_ids": torch.cat([ids_a, ids_b], 1),
            "labels": torch.cat([labels_a, labels_b], 1),
            "attention_mask": torch.ones_like(starts),
            "document_starts": starts,
        }
    )


def test_flat_row_restarts_positions_and_attention_at_every_document():
    a, b = two_documents()
    flat = packed_row(a, b)
    assert flat["cu_seq_lens_q"].tolist() == [0, 20, 35] and flat["max_length_q"] == 20
    assert flat["position_ids"][0].tolist() == [*range(20), *range(15)]
    assert "document_starts" not in flat


def test_no_gradient_flows_between_documents_of_one_row():
    a, b = two_documents()
    flat = packed_row(a, b)
    model = tiny_model()
    embeds = model.model.embeddings.tok_embeddings(flat.pop("input_ids")).detach().requires_grad_()
    labels = flat.pop("labels")
    only_b = labels.clone()
    only_b[:, : len(a)] = -100  # the loss of the second document only
    model(inputs_embeds=embeds, labels=only_b, **flat).loss.backward()
    grad = embeds.grad[0].abs().sum(-1)
    assert grad[: len(a)].max() == 0  # nothing of document A reaches B's loss
    assert (grad[len(a) :] > 0).all()


def test_packed_batch_loss_equals_documents_one_at_a_time():
    a, b = two_documents(seed=1)
    flat = packed_row(a, b)
    model = tiny_model(initializer_range=0.5)  # large weights: attention across documents would move the loss by ~0.6
    packed = model(**flat).loss
    total = flat["labels"].ne(-100).sum()
    alone = 0
    for doc in (a, b):  # each document on its own, as a plain batch of one (transformers' own mask and positions)
        ids, labels = labelled(doc)
        alone = alone + model(input_ids=ids, labels=labels, num_items_in_batch=total).loss
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)


def test_padded_rows_of_documents_equal_the_padding_free_batch():
    """`--padding_free false` / `--streaming`: padded rows with `document_starts` get per-document masks and
    positions in the model, so the loss and gradients are those of the flat batch."""
    a, b = two_documents(seed=2)
    c = two_documents(seed=3)[0][:12]
    c[-1] = 2
    rows = [(a + b, [0, len(a)]), (c, [0])]  # two rows: two documents, then one shorter document (padded)
    width = len(a) + len(b)
    ids = torch.full((2, width), 1)
    labels = torch.full((2, width), -100)
    starts = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for r, (row, begins) in enumerate(rows):
        row_ids, row_labels = labelled(row)
        ids[r, : len(row)], labels[r, : len(row)], mask[r, : len(row)] = row_ids[0], row_labels[0], 1
        starts[r, begins] = 1
    padded = {"input_ids": ids, "labels": labels, "attention_mask": mask, "document_starts": starts}
    flat = flatten_batch(dict(padded))
    assert flat["cu_seq_lens_q"].tolist() == [0, len(a), width, width + len(c)]
    model = tiny_model(initializer_range=0.5)
    losses, grads = [], []
    for batch in (padded, flat):
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        losses.append(loss)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
    for name, grad in grads[1].items():
        torch.testing.assert_close(grads[0][name], grad, rtol=1e-5, atol=1e-5, msg=name)


def test_best_fit_rows_fill_rows_and_keep_every_unit():
    lengths = [700, 300, 1024, 20, 400, 600, 1000, 24]
    rows = best_fit_rows(lengths, 1024)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 1024 for row in rows)
    assert len(rows) == math.ceil(sum(lengths) / 1024)  # 4068 tokens: 4 rows


def test_padding_waste_on_wikipedia_at_1024(shared_data):
    """Rows × 1024 over real tokens: the token budget a batch of rows carries (the official packer's
    `packing_efficiency`); a padding-free batch computes on the real tokens only. The first 20 articles of the
    corpus (~0.5 MB)."""
    documents = list(read_documents(shared_data / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00"))[:20]
    tokenizer = hb.get_recipe("modernbert-tiny").train_tokenizer(documents, vocab_size=2000)
    tokenized = tokenize_corpus(datasets.Dataset.from_dict({"text": documents}), tokenizer, load_from_cache_file=False)
    rows = pack_documents(tokenized, tokenizer, 1024)
    real = sum(len(ids) for ids in rows["input_ids"])
    assert max(len(ids) for ids in rows["input_ids"]) <= 1024
    assert len(rows) * 1024 / real <= 1.02
    units = sum(sum(starts) for starts in rows["document_starts"])
    cls_count = sum(ids.count(tokenizer.cls_token_id) for ids in rows["input_ids"])
    assert units == cls_count >= len(documents)  # every unit is [CLS] ... [SEP]; long documents give several
    # and a batch of those rows is padding-free with one attention unit per document piece
    collator = PaddingFreeCollator(hb.get_recipe("modernbert-tiny").build_collator(tokenizer, seed=0))
    batch = collator([rows[i] for i in range(8)])
    assert batch["cu_seq_lens_q"].numel() - 1 == sum(sum(rows[i]["document_starts"]) for i in range(8))
    assert batch["input_ids"].shape[1] == sum(len(rows[i]["input_ids"]) for i in range(8))


# -- 3. RoPE θ per phase; the context-extension and decay phases as recipes ----------------------------------------


def test_phase_one_rope_theta_is_ten_thousand_on_every_layer():
    """yamls/modernbert/modernbert-base-pretrain.yaml:52 `rotary_emb_base: 10000.0` (no local base)."""
    for name in ("modernbert-base", "modernbert-large", "modernbert-mini", "modernbert-tiny"):
        rope = hb.get_recipe(name).config.rope_parameters
        assert rope["full_attention"]["rope_theta"] == rope["sliding_attention"]["rope_theta"] == 10_000.0, name
    model = tiny_model(**{k: v for k, v in hb.get_recipe("modernbert-tiny").config.to_dict().items() if "rope" in k})
    inv_freq = model.model.rotary_emb.full_attention_inv_freq
    torch.testing.assert_close(inv_freq, 10_000.0 ** -(torch.arange(0, 8, 2).float() / 8))


@pytest.mark.parametrize(
    "name, batch, lr, wd, steps, schedule",
    [  # context-extension.yaml:56-59,103-121 and learning-rate-decay.yaml:56-59,102-122 (base; large: lr 5e-5, wd 1e-6)
        ("modernbert-base-context-extension", 576, 3e-4, 1e-5, round(250e9 / (576 * 8192)), "constant"),
        ("modernbert-large-context-extension", 616, 5e-5, 1e-6, round(250e9 / (616 * 8192)), "constant"),
        ("modernbert-base-decay", 576, 3e-4, 1e-5, round(50e9 / (576 * 8192)), "warmup_stable_decay"),
        ("modernbert-large-decay", 624, 5e-5, 1e-6, round(50e9 / (624 * 8192)), "warmup_stable_decay"),
    ],
)
def test_later_phases_are_recipes(name, batch, lr, wd, steps, schedule):
    recipe = hb.get_recipe(name)
    rope = recipe.config.rope_parameters
    assert (rope["full_attention"]["rope_theta"], rope["sliding_attention"]["rope_theta"]) == (160_000.0, 10_000.0)
    assert recipe.max_seq_length == 8192
    t = recipe.training_defaults
    assert (t["global_batch_size"], t["learning_rate"], t["weight_decay"]) == (batch, lr, wd)
    assert (t["max_steps"], t["lr_scheduler_type"], t["warmup_steps"]) == (steps, schedule, 0)
    if schedule == "warmup_stable_decay":  # one_minus_sqrt over the whole phase to alpha_f 0.001
        assert t["lr_scheduler_kwargs"] == {"num_decay_steps": steps, "decay_type": "1-sqrt", "min_lr_ratio": 1e-3}


def test_phase_one_schedule_batch_and_warmup():
    """pretrain.yaml:98-117 (base: 4608 × 1024, 3B-token warmup, lr 8e-4; large: 4928, 2B, 5e-4), constant after."""
    base, large = (hb.get_recipe(f"modernbert-{size}").training_defaults for size in ("base", "large"))
    assert (base["global_batch_size"], base["learning_rate"]) == (4608, 8e-4)
    assert (large["global_batch_size"], large["learning_rate"]) == (4928, 5e-4)
    # micro-batches of device_train_microbatch_size (yaml l.77-78), also the warmup's first size
    assert (base["per_device_train_batch_size"], large["per_device_train_batch_size"]) == (96, 56)
    assert base["warmup_steps"] == round(3e9 / (4608 * 1024)) and large["warmup_steps"] == round(2e9 / (4928 * 1024))
    assert base["max_steps"] == round(1.719e12 / (4608 * 1024))
    assert base["lr_scheduler_type"] == large["lr_scheduler_type"] == "constant_with_warmup"


class FirstStepOptimizer(TrainerCallback):
    """Records the optimizer as the first optimizer step of a run finds it (after clipping, before stepping)."""

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if state.global_step == 0:
            optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
            # copies: optimi counts its step in a tensor of the group, in place
            self.groups = [
                {k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups
            ]
            self.state = {k: {n: v.clone() for n, v in s.items() if torch.is_tensor(v)} for k, s in enumerate(
                optimizer.state[p] for g in optimizer.param_groups for p in g["params"])}  # fmt: skip


def run_phase(tmp_path, recipe: str, output: str, *flags: str) -> FirstStepOptimizer:
    from hf_bertology.training.pretrain import main

    probe = FirstStepOptimizer()
    argv = ["--recipe", recipe, "--train_file", str(write_corpus(tmp_path / "corpus.txt")), "--output_dir"]
    argv += [str(tmp_path / output), "--max_seq_length", "64", "--per_device_train_batch_size", "4", "--use_cpu"]
    main([*argv, "true", "--disable_tqdm", "true", "--seed", "0", *flags], callbacks=[probe])
    return probe


def saved_optimizer(checkpoint: Path) -> tuple[list[dict], dict]:
    saved = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    return saved["param_groups"], saved["state"]


def test_three_phases_carry_the_optimizer_as_restart_override(tmp_path):
    """yamls/modernbert/modernbert-base-{context-extension,learning-rate-decay}.yaml:155-160 (`load_path` of the
    previous phase, `load_weights_only: false`, `reset_time: true`, `restart_override: true`) and main.py:474-500:
    a later phase started from the previous phase's checkpoint-N has its Adam moments and step at its first step;
    its lr, schedule and weight decay are its own; StableAdamW's `max_lr` stays phase 1's; RoPE θ is the phase's."""
    # phase 1 with another weight decay than the later phases' 1e-5, so that the reset shows
    run_phase(
        tmp_path, "modernbert-tiny", "phase1", "--vocab_size", "300", "--max_steps", "3", "--weight_decay", "1e-4"
    )
    groups1, state1 = saved_optimizer(tmp_path / "phase1" / "checkpoint-3")
    phase2 = run_phase(
        tmp_path, "modernbert-base-context-extension", "phase2",
        "--model_name_or_path", str(tmp_path / "phase1" / "checkpoint-3"), "--max_steps", "2",
    )  # fmt: skip
    assert [int(g["step"]) for g in phase2.groups] == [3, 3]  # optimi counts steps per group: phase 1's 3
    assert [g["lr"] for g in phase2.groups] == [3e-4, 3e-4]  # the phase's (constant schedule)
    assert [g["weight_decay"] for g in groups1] == [1e-4, 0.0]
    assert [g["weight_decay"] for g in phase2.groups] == [1e-5, 0.0]  # the phase's, where there was decay
    assert [g["max_lr"] for g in phase2.groups] == [1e-3, 1e-3]  # modernbert-tiny's peak, not the phase's
    assert phase2.state.keys() == state1.keys()
    for index, saved in state1.items():  # the moments as phase 1 left them
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(phase2.state[index][name], saved[name], rtol=0, atol=0)
    config = json.loads((tmp_path / "phase2" / "config.json").read_text())
    assert config["rope_parameters"]["full_attention"]["rope_theta"] == 160_000.0
    assert config["rope_parameters"]["sliding_attention"]["rope_theta"] == 10_000.0
    decay = '{"num_decay_steps": 2, "decay_type": "1-sqrt", "min_lr_ratio": 0.001}'
    phase3 = run_phase(
        tmp_path, "modernbert-base-decay", "phase3", "--model_name_or_path", str(tmp_path / "phase2" / "checkpoint-2"),
        "--max_steps", "2", "--lr_scheduler_kwargs", decay,
    )  # fmt: skip
    assert [int(g["step"]) for g in phase3.groups] == [5, 5]
    assert [g["lr"] for g in phase3.groups] == [3e-4, 3e-4] and [g["max_lr"] for g in phase3.groups] == [1e-3, 1e-3]


def test_a_phase_from_a_folder_without_optimizer_state_starts_fresh(tmp_path):
    """The final output folder holds no optimizer.pt: weights only, a fresh optimizer (and a warning)."""
    run_phase(tmp_path, "modernbert-tiny", "phase1", "--vocab_size", "300", "--max_steps", "1")
    phase2 = run_phase(
        tmp_path, "modernbert-base-context-extension", "phase2",
        "--model_name_or_path", str(tmp_path / "phase1"), "--max_steps", "1",
    )  # fmt: skip
    assert not any("step" in g for g in phase2.groups) and not phase2.state[0]  # optimi: no step taken yet
    assert [g["max_lr"] for g in phase2.groups] == [3e-4] * 2


# -- 3b. Batch-size warmup ---------------------------------------------------------------------------------------


class OfficialBatchSizeWarmup:
    """AnswerDotAI/ModernBERT src/sequence_packer.py `BatchSizeWarmupScheduler` (rows of one micro-batch; the
    tokens a process has seen), transcribed."""

    def __init__(self, min_batch_size, max_batch_size, warmup_tokens, world_size):
        self.min_batch_size, self.max_batch_size = min_batch_size, max_batch_size
        self.warmup_tokens = math.ceil(warmup_tokens / world_size)
        steps_per_unit = self.warmup_tokens / sum(range(min_batch_size, max_batch_size))
        self.thresholds, total = [], 0
        for batch_size in range(min_batch_size, max_batch_size):
            total += batch_size
            self.thresholds.append(math.ceil(steps_per_unit * total))

    def __call__(self, current_step):
        if current_step >= self.warmup_tokens:
            return self.max_batch_size
        for i, threshold in enumerate(self.thresholds):
            if current_step < threshold:
                return self.min_batch_size + i
        return self.max_batch_size


def test_warmup_sizes_follow_the_official_schedule():
    """Rows of `min_size` examples (one official micro-batch), up to the step's full batch (accumulation included:
    the official `out_batch_size`), tokens counted as full rows of `max_seq_length` (packed rows are full)."""
    from hf_bertology.training.batch_warmup import BatchSizeWarmup

    for tokens, min_size, full, accumulation, world in [
        (768, 2, 8, 1, 1),
        (10**6, 96, 4608, 2, 4),
        (5000, 3, 10, 1, 2),
    ]:
        warmup = BatchSizeWarmup(tokens, min_size, full, 64, accumulation, world)
        official = OfficialBatchSizeWarmup(1, math.ceil(full * accumulation / min_size), tokens, world)
        expected, seen = [], 0
        while seen < official.warmup_tokens:
            rows = official(seen)
            expected.append(min(rows * min_size, full * accumulation))
            seen += rows * min_size * 64
        assert warmup.sizes() == expected and expected[0] == min_size  # one official micro-batch first
        assert warmup.size_at(len(expected) * accumulation, expected) == full
    assert BatchSizeWarmup(768, 2, 8, 64).sizes() == [2, 4, 6]  # by hand: thresholds 128, 384, 768 tokens
    base, large = hb.get_recipe("modernbert-base"), hb.get_recipe("modernbert-large")  # yaml l.77-78, 123 / 130
    assert (base.batch_size_warmup, large.batch_size_warmup) == ((50_000_000_000, 96), (10_000_000_000, 56))
    for name in ("modernbert-base-context-extension", "modernbert-base-decay", "modernbert-tiny"):
        assert hb.get_recipe(name).batch_size_warmup is None


def test_warmup_sampler_steps_and_processes():
    """Padded and padding-free steps: sizes by the schedule, every process the same size, no example twice."""
    from hf_bertology.training.batch_warmup import BatchSizeWarmup, WarmupBatchSampler

    one = list(WarmupBatchSampler(40, BatchSizeWarmup(768, 2, 8, 64), seed=0))
    assert [len(b) for b in one] == [2, 4, 6, 8, 8] and len({i for b in one for i in b}) == 28
    two = BatchSizeWarmup(1024, 2, 4, 64, accumulation=2, world_size=2)  # steps of 2, 4, 6, then 8: two halves each
    ranks = [list(WarmupBatchSampler(40, two, seed=0, rank=rank)) for rank in (0, 1)]
    assert [len(b) for b in ranks[0]] == [len(b) for b in ranks[1]] == [1, 1, 2, 2, 3]
    assert not {i for b in ranks[0] for i in b} & {i for b in ranks[1] for i in b}
    sampler = WarmupBatchSampler(40, BatchSizeWarmup(768, 2, 8, 64), seed=0)
    sampler.set_epoch(1)  # the warmup is over by the second epoch
    assert [len(b) for b in sampler] == [8] * 5


def test_fixed_shape_steps_fill_the_warmups_share_of_rows():
    from hf_bertology.collators.fixed_shape import TokenBudget
    from hf_bertology.training.batch_warmup import BatchSizeWarmup
    from hf_bertology.training.fixed_shape import TrainerTokenBudgetSampler

    lengths = [15] * 200  # four to a row of 64 (the budget's last slot stays free)
    budget = TokenBudget(rows=4, row_length=64, max_length=64, max_sequences=40, max_targets=64)
    sampler = TrainerTokenBudgetSampler(lengths, budget, seed=0)
    sampler.warm_up(BatchSizeWarmup(768, 4, 16, 16))  # 4, 4, 8, 8, 12, 12 of 16 examples: 1, 1, 2, 2, 3, 3 rows
    assert [len(b) for b in sampler][:8] == [4, 4, 8, 8, 12, 12, 16, 16]
    sampler.set_epoch(1)
    assert {len(b) for b in list(sampler)[:-1]} == {16}


def steps_after(log_history: list[dict], step: int) -> list[list]:
    return [
        [log["step"], log["num_input_tokens_seen"], log["loss"]]
        for log in log_history
        if "loss" in log and log["step"] > step
    ]


def test_batch_warmup_through_pretrain_resumes_the_same_schedule(tmp_path):
    """`bertology pretrain` with a warmup (padding-free, then fixed-shape): tokens per step grow; stopped at step 3
    and resumed, the run logs the same tokens and losses at steps 4-6 as the uninterrupted one."""
    import shutil

    warmup = ["--batch_size_warmup_tokens", "1536", "--batch_size_warmup_min_size", "2", "--max_steps", "6"]
    warmup += ["--save_steps", "3", "--logging_steps", "1", "--per_device_train_batch_size", "8"]
    for layout in ([], ["--fixed_shape_batches", "true"]):
        name = "fixed" if layout else "flat"
        run_phase(tmp_path, "modernbert-tiny", name, "--vocab_size", "300", *warmup, *layout)
        logs = json.loads((tmp_path / name / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
        seen = [log["num_input_tokens_seen"] for log in logs if "loss" in log]
        steps = [b - a for a, b in zip([0, *seen], seen)]
        assert 2 * steps[0] <= steps[4] + 1, (
            steps
        )  # flat: 2, 2, 4, 4, 6, 6 examples; fixed: 1, 1, 1, 1, 2, 2 of 2 rows
        resumed = tmp_path / f"{name}-resumed"
        resumed.mkdir()
        shutil.copytree(tmp_path / name / "checkpoint-3", resumed / "checkpoint-3")
        run_phase(
            tmp_path, "modernbert-tiny", resumed.name, "--tokenizer_name", str(resumed / "checkpoint-3"), *warmup,
            *layout, "--resume_from_checkpoint", str(resumed / "checkpoint-3"),
        )  # fmt: skip
        again = json.loads((resumed / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
        after, after_resuming = steps_after(logs, 3), steps_after(again, 3)
        assert [row[:2] for row in after_resuming] == [row[:2] for row in after]  # the same steps, the same tokens
        # padding-free: bit for bit; fixed-shape resumes to ~1e-6 without a warmup too (float order in its layout)
        tolerance = 1e-4 if layout else 0
        assert [row[2] for row in after_resuming] == pytest.approx([row[2] for row in after], rel=tolerance)


# -- 4. Dropout ------------------------------------------------------------------------------------------------


def test_dropout_only_on_the_attention_output():
    """pretrain.yaml:26-39: attn_out_dropout_prob 0.1; attention probabilities, embeddings, MLP 0.0."""
    config = hb.get_recipe("modernbert-base").config
    assert config.attention_output_dropout == 0.1
    assert (config.attention_dropout, config.embedding_dropout, config.mlp_dropout) == (0.0, 0.0, 0.0)
    model = tiny_model(attention_output_dropout=0.1)
    for layer in model.model.layers:
        assert isinstance(layer.attn.out_drop, torch.nn.Dropout) and layer.attn.out_drop.p == 0.1
        assert layer.attn.attention_dropout == 0.0  # the attention probabilities are not dropped
    model.train()
    ids, labels = labelled(two_documents()[0])
    torch.manual_seed(0)
    first = model(input_ids=ids, labels=labels).loss
    torch.manual_seed(1)
    assert model(input_ids=ids, labels=labels).loss != first  # the dropout is live in training


# -- 5. Masking ------------------------------------------------------------------------------------------------


def test_masking_is_a_bernoulli_draw_per_token(tmp_path):
    """src/sequence_packer.py:324-336: one uniform per token, chosen if < 0.3; 80/10/10 of the chosen."""
    recipe = hb.get_recipe("modernbert-tiny")
    tokenizer = recipe.train_tokenizer(["the cat sat on the mat and the dog ran far away"] * 50, vocab_size=300)
    collator = DataCollatorForMaskedLM.from_config(recipe.config, tokenizer, seed=0)
    gen = torch.Generator().manual_seed(0)
    low = len(tokenizer.all_special_ids)
    body = torch.randint(low, len(tokenizer), (2000, 62), generator=gen).tolist()
    batch = collator([{"input_ids": [tokenizer.cls_token_id, *row, tokenizer.sep_token_id]} for row in body])
    chosen = batch["labels"].ne(-100)
    counts = chosen.sum(1).double()
    assert abs(counts.mean() - 62 * 0.3) < 0.2  # Bernoulli(0.3) over the 62 candidates
    assert abs(counts.var() - 62 * 0.3 * 0.7) < 1.5  # binomial spread: no exact count per row
    assert not chosen[:, 0].any() and not chosen[:, -1].any()
    seen = batch["input_ids"][chosen]
    assert abs((seen == tokenizer.mask_token_id).float().mean() - 0.8) < 0.01


# -- 6. Large -------------------------------------------------------------------------------------------------


def test_tile_from_middle_by_hand():
    """src/bert_layers/initialization.py:172-285 (`tile_weights_from_middle`), worked by hand."""
    torch.testing.assert_close(
        tile_from_middle(torch.tensor([1.0, 2.0, 3.0]), (7,)), torch.tensor([2.0, 3, 1, 2, 3, 1, 2])
    )
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    expected = torch.tensor([[2.0, 1, 2, 1], [4, 3, 4, 3], [2, 1, 2, 1]])  # rows from the top, columns offset by 1
    torch.testing.assert_close(tile_from_middle(w, (3, 4)), expected)
    assert layer_mapping(22, 28)[:8] == [0, 1, 2, 2, 3, 4, 5, 6] and layer_mapping(22, 28)[-1] == 21
    assert layer_mapping(2, 4) == [0, 0, 1, 1]  # round(1.5) = 2 would be past the base's last layer


def test_large_starts_from_base_tiled():
    base = tiny_model(seed=0)
    large = tiny_model(seed=1, hidden_size=48, num_hidden_layers=4, intermediate_size=56, num_attention_heads=4)
    init_from_base(base, large)
    b, n = base.model, large.model
    # new layer 3 <- base layer round(3 * 3 / 4) = 2; q, k, v tiled apart, and the GLU's halves
    torch.testing.assert_close(
        n.layers[3].attn.Wqkv.weight[48:96], tile_from_middle(b.layers[2].attn.Wqkv.weight[32:64], (48, 48))
    )
    torch.testing.assert_close(
        n.layers[3].mlp.Wi.weight[56:], tile_from_middle(b.layers[2].mlp.Wi.weight[37:], (56, 48))
    )
    torch.testing.assert_close(n.layers[1].attn.Wo.weight[8:40, 8:40], b.layers[1].attn.Wo.weight)  # the middle
    assert large.decoder.weight is n.embeddings.tok_embeddings.weight  # still tied
    torch.testing.assert_close(n.embeddings.tok_embeddings.weight[:, 8:40], b.embeddings.tok_embeddings.weight)
    # the same shapes: a copy
    same = init_from_base(base, tiny_model(seed=2))
    for (name, p), q in zip(base.state_dict().items(), same.state_dict().values()):
        if "final_norm" not in name:
            torch.testing.assert_close(q, p, msg=name)


def test_docs_record_every_recipe_number():
    """docs/recipes/modernbert.md names each number with its official file; the recipe docstring points there."""
    text = (Path(__file__).parents[1] / "docs" / "recipes" / "modernbert.md").read_text()
    for needle in ("decouple_lr", "4928", "tile_weights_from_middle", "batch_size_warmup_tokens", "160000", "10000"):
        assert needle in text, needle
    for module in (configuration_modernbert, recipes.modernbert):  # the config and the recipe module
        assert "docs/recipes/modernbert.md" in module.__doc__ or "docs/recipes/modernbert.md" in inspect.getsource(
            module
        )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the varlen flash kernel)")
def test_cuda_varlen_kernel_keeps_the_local_window():
    """ModernBERT's local layers on CUDA: the flash varlen kernel with `window_size_left/right = sliding_window - 1`
    equals the re-padded SDPA path with the band |i - j| <= sliding_window - 1 (not run where no GPU was lent)."""
    from hf_bertology.training import attention

    lengths = [7, 128, 33, 90]
    total = sum(lengths)
    q, k, v = (torch.randn(1, 4, total, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    kwargs = {"cu_seq_lens_q": cu, "max_length_q": max(lengths), "sliding_window": 65}  # transformers: 64 + 1
    assert attention.flash_varlen_applies(q)
    fast, _ = attention.packed_attention_forward(torch.nn.Module(), q, k, v, None, scaling=0.125, **kwargs)
    reference = attention._repad_sdpa(q.float(), k.float(), v.float(), cu, max(lengths), 0.0, 0.125, window=64)
    assert (fast.float() - reference).norm() / reference.norm() < 1e-2
    unwindowed = attention._repad_sdpa(q.float(), k.float(), v.float(), cu, max(lengths), 0.0, 0.125)
    assert (unwindowed - reference).norm() / reference.norm() > 1e-2  # the window matters at these lengths
