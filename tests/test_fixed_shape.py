"""Fixed-shape token-budget batches (`collators.fixed_shape`): every step the same shapes, one compilation, the
padded layout's loss and gradients, no attention across examples, fillers that change nothing, little waste."""

from __future__ import annotations

import pytest
import torch

from hf_bertology.collators.fixed_shape import (
    FixedShapeCollator,
    TokenBudget,
    TokenBudgetBatchSampler,
    best_fit,
    lay_out,
    next_fit,
    padding_waste,
)
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.recipes import VARIANTS, get_recipe
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention
from hf_bertology.training.trainer import BertologyTrainer
from platform_support import assert_same_step, loss_and_grads, tiny_examples

PACKABLE = [name for name, spec in VARIANTS.items() if spec.padding_free]
LENGTH = 48


@pytest.fixture(scope="module")
def setups(corpus_file):
    """variant -> (recipe, collator, examples, their lengths, a budget of ~6 examples)."""
    out = {}
    corpus = load_corpus(train_files=[str(corpus_file)])
    for variant in PACKABLE:
        recipe, tokenizer, examples = tiny_examples(variant, corpus, LENGTH)
        lengths = [len(ids) for ids in examples["input_ids"]]
        budget = TokenBudget.for_lengths(lengths, batch_size=6, max_seq_length=LENGTH, rows_per_example_length=2)
        out[variant] = (recipe, recipe.build_collator(tokenizer, seed=3), examples, lengths, budget)
    return out


def _counts(batch):
    class _Args:
        average_tokens_across_devices, world_size = False, 1

    host = type("Host", (), {"model_accepts_loss_kwargs": True, "args": _Args()})()
    return BertologyTrainer._get_num_items_in_batch(host, [batch], torch.device("cpu"))


def _first_steps(setup, steps):
    recipe, collator, examples, lengths, budget = setup
    """(padded batch, the same batch laid out) for the sampler's first `steps` steps: one collation, one set of
    masks (without example ids the collator draws from torch's global generator)."""
    sampler = TokenBudgetBatchSampler(lengths, budget, seed=0)
    for _, indices in zip(range(steps), sampler):
        padded = collator([examples[i] for i in indices])
        yield padded, lay_out(padded, budget)


@pytest.mark.parametrize("variant", PACKABLE)
def test_every_step_has_the_same_shapes(setups, variant):
    shapes = set()
    for _, batch in _first_steps(setups[variant], 50):
        shapes.add(tuple((k, tuple(v.shape) if torch.is_tensor(v) else v) for k, v in sorted(batch.items())))
    assert len(shapes) == 1, f"{variant}: {len(shapes)} different step shapes"


# ModernBERT's rows are packed documents, full to the last slot: no padding to compare against (its packed layout is
# checked against each document run alone in test_modernbert_recipe.py).
@pytest.mark.parametrize("variant", [name for name in PACKABLE if name != "modernbert"])
def test_fixed_shape_equals_padded(setups, variant):
    """Loss, every component and every gradient equal the padded batch's (1e-5), so the fillers change nothing."""
    recipe = setups[variant][0]
    padded, fixed = next(_first_steps(setups[variant], 1))
    assert padded["attention_mask"].float().mean() < 1, "the padded batch must hold padding to test anything"
    assert fixed["attention_mask"].float().mean() < 1, "the fixed batch must hold fillers to test anything"
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()
    counts_padded, counts_fixed = _counts(padded), _counts(fixed)
    assert {k: int(v) for k, v in counts_padded.items()} == {k: int(v) for k, v in counts_fixed.items()}
    expected = loss_and_grads(model, padded, counts_padded)
    assert_same_step(expected, loss_and_grads(model, fixed, counts_fixed), label=variant)


def test_electra_sampled_accuracy_counts_real_targets_only(setups, monkeypatch):
    """ELECTRA's `sampled_accuracy` over a fixed-shape batch's padded targets equals the padded layout's. The
    equality above cannot see it when no sample hits its target (likely at tiny sizes), so every sample here is the
    batch's most common target: a known non-zero share."""
    from hf_bertology.models import replaced_token_detection

    recipe = setups["electra"][0]
    padded, fixed = next(_first_steps(setups["electra"], 1))
    targets = padded["labels"][padded["labels"] != -100]
    common = targets.mode().values
    monkeypatch.setattr(
        replaced_token_detection, "sample_tokens", lambda logits, *_: torch.full_like(logits[:, 0], common).long()
    )
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()
    want = (targets == common).float().mean()
    assert fixed["target_positions"].numel() > targets.numel() and want > 0
    for batch in (padded, fixed):
        assert loss_and_grads(model, batch, _counts(batch))[0].sampled_accuracy == pytest.approx(float(want), abs=1e-6)


@pytest.mark.parametrize("variant", ["bert", "electra", "spanbert"])
def test_filler_values_change_nothing(setups, variant):
    """Random ids, token types and positions in the filler slots: the same loss and gradients."""
    recipe = setups[variant][0]
    _, fixed = next(_first_steps(setups[variant], 1))
    filler = fixed["attention_mask"][0] == 0
    noisy = dict(fixed)
    generator = torch.Generator().manual_seed(5)
    for key in ("input_ids", "token_type_ids"):
        if key in noisy:
            high = int(fixed[key].max()) + 1
            noisy[key] = torch.where(filler, torch.randint(0, high, fixed[key].shape, generator=generator), fixed[key])
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()
    counts = _counts(fixed)
    out, grads = loss_and_grads(model, fixed, counts)
    out_noisy, grads_noisy = loss_and_grads(model, noisy, counts)
    torch.testing.assert_close(out_noisy.loss, out.loss, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_noisy[name], grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("variant", ["bert", "roberta"])
def test_no_gradient_between_examples_of_a_row(setups, variant):
    """The outputs at one segment's slots do not depend on any other segment's input embeddings (fillers
    included), though they share a row."""
    recipe = setups[variant][0]
    _, fixed = next(_first_steps(setups[variant], 1))
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).eval()
    backbone = model.base_model
    cu = fixed["cu_seq_lens_q"].long()
    embeds = backbone.get_input_embeddings()(fixed["input_ids"]).detach().requires_grad_(True)
    offset = recipe.config.pad_token_id + 1 if variant == "roberta" else 0
    hidden = backbone(
        inputs_embeds=embeds,
        token_type_ids=fixed.get("token_type_ids"),
        position_ids=fixed["position_ids"] + offset,
        **{k: fixed[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "packed_slots")},
    ).last_hidden_state
    probe = torch.randn(hidden.shape[1:], generator=torch.Generator().manual_seed(0))
    segments = [(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:]) if b > a]
    assert len(segments) >= 3
    for start, end in segments:
        (grad,) = torch.autograd.grad((hidden[0, start:end] * probe[start:end]).sum(), embeds, retain_graph=True)
        touched = grad[0].abs().sum(-1) > 0
        inside = torch.zeros_like(touched)
        inside[start:end] = True
        assert touched[inside].all() and not touched[~inside].any(), (variant, start, end)


def test_compiled_step_does_not_recompile(setups):
    """With compile on (dynamo, eager backend: tracing and guards without code generation, so it is fast on CPU),
    the steps after the first trace nothing new."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    recipe = setups["bert"][0]
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=False)
    frames = []
    for _, batch in _first_steps(setups["bert"], 6):
        compiled(**batch, num_items_in_batch=_counts(batch)).loss.backward()
        frames.append(counters["stats"]["unique_graphs"])
    assert frames[0] >= 1 and frames[-1] == frames[0], frames


def test_sampler_covers_the_epoch_once(setups):
    _, _, _, lengths, budget = setups["roberta"]
    sampler = TokenBudgetBatchSampler(lengths, budget, seed=1)
    batches = list(sampler)
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(len(lengths)))
    for batch in batches:
        bins, rest = best_fit([lengths[i] for i in batch], budget)
        assert not rest and sum(map(len, bins)) <= budget.max_examples
        assert next_fit([lengths[i] for i in batch], budget) is not None  # the collator keeps the sampler's order
    sampler.set_epoch(1)
    assert list(sampler) != batches  # a new order each epoch


def test_wrapper_collates_then_lays_out(setups):
    recipe, collator, examples, lengths, budget = setups["roberta"]
    wrapped = FixedShapeCollator(collator, budget)
    assert wrapped.mlm_probability == collator.mlm_probability  # settings read through
    batch = wrapped([examples[i] for i in next(iter(TokenBudgetBatchSampler(lengths, budget)))])
    assert batch["input_ids"].shape == (1, budget.slots) and batch["cu_seq_lens_q"].shape == (
        budget.max_sequences + 1,
    )


def test_refusals(setups):
    recipe, collator, examples, lengths, budget = setups["bert"]
    too_many = [examples[i] for i in range(4 * budget.rows * budget.row_length // LENGTH)]
    with pytest.raises(ValueError, match="do not fit the token budget"):
        lay_out(collator(too_many), budget)
    with pytest.raises(ValueError, match="shorter than the longest"):
        TokenBudget(rows=1, row_length=8, max_length=16, max_sequences=8, max_targets=8)


def test_targets_grow_rather_than_drop(setups):
    recipe, collator, examples, lengths, budget = setups["bert"]
    small = TokenBudget(**{**budget.__dict__, "max_targets": 1})
    batch = lay_out(collator([examples[0], examples[1]]), small)
    assert (
        small.max_targets > 1 and batch["labels"].ne(-100).sum() == batch["target_positions"].lt(small.slots - 1).sum()
    )


def test_padding_waste_on_wikipedia(shared_data):
    """Computed slots / real tokens <= 1.02 at the default budget (batch 256 x 128, rows of 4 x 128), on the
    lengths of real Wikipedia examples (a slice of the WikiExtractor corpus): BERT's NSP pairs (the most varied
    lengths) and RoBERTa's FULL-SENTENCES blocks (1.20 when padded)."""
    corpus = load_corpus(train_files=[str(shared_data / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00")])
    corpus = corpus.select(range(min(len(corpus), 400)))
    for variant in ("bert", "roberta"):
        recipe = get_recipe(f"{variant}-tiny")
        tokenizer = recipe.train_tokenizer(corpus["text"], 2000)
        recipe.adapt_to_tokenizer(tokenizer)
        examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 128, 0)
        lengths = [len(ids) for ids in examples["input_ids"]]
        budget = TokenBudget.for_lengths(lengths, batch_size=256, max_seq_length=128)
        batches = list(TokenBudgetBatchSampler(lengths, budget, seed=0))[:-2]  # the epoch's last steps: what is left
        assert len(batches) >= 3, (variant, len(lengths))
        padded = len(lengths) * 128 / sum(lengths)
        waste = padding_waste(batches, lengths, budget)
        print(variant, f"padded {padded:.3f}, fixed-shape {waste:.4f}", budget)
        assert waste <= 1.02, (variant, waste, budget)


def test_pretrain_with_fixed_shape_batches(tmp_path, corpus_file):
    """`bertology pretrain --fixed_shape_batches`: the Trainer's training batches all have one shape, the sampler's
    token budget; the run trains (finite loss) and its token count is the real tokens it saw."""
    from transformers import TrainerCallback

    from hf_bertology.training.pretrain import main

    seen = {"orders": []}

    class Shapes(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            shapes = set()
            for _, batch in zip(range(4), train_dataloader):
                shapes.add(tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if torch.is_tensor(v)))
            seen["shapes"], seen["steps"] = shapes, len(train_dataloader)

        def on_step_end(self, args, state, control, train_dataloader=None, **kwargs):
            if state.global_step in (1, seen["steps"] + 1):  # the first step of each epoch: the epoch's plan
                sampler = train_dataloader.batch_sampler
                while not isinstance(sampler, TokenBudgetBatchSampler):
                    sampler = sampler.batch_sampler
                seen["orders"].append((sampler.epoch, sampler._plan()[0]))

    argv = ["--recipe", "electra-tiny", "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run")]
    flags = ["--vocab_size", "300", "--num_train_epochs", "2", "--per_device_train_batch_size", "16"]
    flags += ["--global_batch_size", "16"]  # one micro-batch a step, the preset's 8 doubled
    metrics = main([*argv, *flags, "--disable_tqdm", "true", "--fixed_shape_batches", "true"], callbacks=[Shapes()])
    assert len(seen["shapes"]) == 1 and seen["steps"] >= 2, seen
    (epoch0, order0), (epoch1, order1) = seen["orders"]
    assert (epoch0, epoch1) == (0, 1) and order0 != order1  # a new order each epoch
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))


def test_example_lengths_read_through_a_selection():
    import datasets

    from hf_bertology.training.fixed_shape import example_lengths

    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in range(1, 9)]})
    assert example_lengths(data.select([7, 0, 3])) == [8, 1, 4]
    assert example_lengths([{"input_ids": [1, 2]}]) == [2]


@pytest.mark.parametrize("variant", ["bert", "electra"])
def test_fixed_shape_step_has_no_host_sync(setups, variant):
    from hf_bertology.testing import HostSyncs

    recipe = setups[variant][0]
    _, fixed = next(_first_steps(setups[variant], 1))
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()
    counts = _counts(fixed)
    with HostSyncs() as syncs:
        model(**fixed, num_items_in_batch=counts).loss.backward()
    assert syncs.count == 0, syncs.by_site()


@pytest.mark.parametrize(("recipe", "steps", "batch"), [("bert-tiny", 5, 8), ("deberta-v3-tiny", 4, 4)])
def test_pretrain_compiled_fixed_shape_compiles_once(tmp_path, corpus_file, recipe, steps, batch):
    """Through the Trainer with `--torch_compile` (dynamo with the eager backend: guards and graphs, no code
    generation, so it is fast on CPU) the steps after the first trace nothing new: the static graph holds, for the
    packed token-budget steps (BERT) and the static padded ones (DeBERTa-v3: its padding row and padded targets)."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from transformers import TrainerCallback

    from hf_bertology.training.pretrain import main

    graphs = []

    class Graphs(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            graphs.append(counters["stats"]["unique_graphs"])

    torch._dynamo.reset()
    counters.clear()
    argv = ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run")]
    flags = ["--vocab_size", "300", "--max_steps", str(steps), "--per_device_train_batch_size", str(batch)]
    compile_flags = ["--torch_compile", "true", "--torch_compile_backend", "eager", "--fixed_shape_batches", "true"]
    main([*argv, *flags, "--disable_tqdm", "true", *compile_flags], callbacks=[Graphs()])
    torch._dynamo.reset()
    assert len(graphs) == steps and graphs[0] >= 1 and graphs[-1] == graphs[0], graphs
