"""Static padded shapes for the recipes that cannot be packed (`collators.fixed_shape.StaticPaddedCollator`): every
step the same shapes, the batch's own loss and gradients, the padded targets inside the padding row only."""

from __future__ import annotations

import pytest
import torch

from hf_bertology.collators.fixed_shape import StaticPaddedCollator, StaticShape, pad_statically
from hf_bertology.collators.flatten import add_target_positions
from hf_bertology.data import load_corpus
from platform_support import assert_same_step, loss_and_grads, tiny_examples

UNPACKED = ["deberta-v3", "xlnet"]
LENGTH = 48
ROWS = 4


@pytest.fixture(scope="module")
def setups(corpus_file):
    """variant -> (recipe, its padded collator, examples sorted by length: batches of different natural widths)."""
    corpus = load_corpus(train_files=[str(corpus_file)])
    out = {}
    for variant in UNPACKED:
        recipe, tokenizer, examples = tiny_examples(variant, corpus, LENGTH)
        order = sorted(range(len(examples)), key=lambda i: len(examples[i]["input_ids"]))
        out[variant] = (recipe, recipe.build_collator(tokenizer, seed=3), [examples[i] for i in order])
    return out


def _batches(setup, count=4):
    """`count` lists of features of different lengths (the shortest, the longest, ...), the last one short of rows."""
    examples = setup[2]
    starts = [0, len(examples) - ROWS, len(examples) // 2, len(examples) // 4]
    return [examples[s : s + ROWS] for s in starts[: count - 1]] + [examples[:2]]


def _shapes(batch):
    return tuple((k, tuple(v.shape) if torch.is_tensor(v) else v) for k, v in sorted(batch.items()))


@pytest.mark.parametrize("variant", UNPACKED)
def test_every_static_step_has_the_same_shapes(setups, variant):
    recipe, collator, _ = setups[variant]
    static = StaticPaddedCollator(collator, StaticShape(ROWS, LENGTH))
    natural = {collator(features)["attention_mask"].shape for features in _batches(setups[variant])}
    assert len(natural) > 1, "the batches must differ in their natural shapes to test anything"
    shapes = {_shapes(static(features)) for features in _batches(setups[variant])}
    assert len(shapes) == 1, shapes
    # the cap by the collator's count rule, never grown: DeBERTa-v3 round(48 * 0.15) = 7 per row, XLNet's 8 rows
    assert static.shape.max_targets == ROWS * (8 if variant == "xlnet" else 7)
    batch = static(_batches(setups[variant])[0])
    padding_row = variant != "xlnet"  # XLNet's targets have rows of their own: no padding row needed
    assert batch["input_ids"].shape == (ROWS + padding_row, LENGTH)
    short = static(_batches(setups[variant])[-1])  # 2 examples: padding rows up to the shape
    assert not short["attention_mask"][2:].any() and (short["labels"][2:] == -100).all()
    assert short["labels"].flatten()[short["target_positions"][-1]] == -100


def test_xlnet_batches_are_static_but_for_a_short_last_batch(setups):
    """XLNet's own batches are static already: fixed-length segments (every example `max_seq_length` tokens),
    `num_predict` target rows (`target_mapping` `(B, P, L)`, `labels` `(B, P)`, `perm_mask` `(B, L, L)`) and, the
    segments being full, the same target count in every row. Only a batch of fewer rows (an epoch's last, without
    the memory's stream batches) differs: the static mode pads its rows, and adds no padding row otherwise."""
    from hf_bertology.collators.flatten import TargetPositionsCollator

    _, collator, examples = setups["xlnet"]
    assert {len(e["input_ids"]) for e in examples} == {LENGTH}
    batches = [TargetPositionsCollator(collator)(features) for features in _batches(setups["xlnet"])]
    assert len({_shapes(b) for b in batches[:-1]}) == 1  # every full batch: one shape
    assert batches[-1]["input_ids"].shape[0] == 2  # the short one
    static = StaticPaddedCollator(collator, StaticShape(ROWS, LENGTH))
    assert _shapes(static(_batches(setups["xlnet"])[0])) == _shapes(batches[0])  # nothing added to a full batch


def _unpadded(static: dict, count: int, width: int | None = None) -> dict:
    """The static batch without its padding rows, cut to `width` columns on the right (right-padded batches)."""
    out = {}
    for key, value in static.items():
        if key.endswith("target_positions"):
            continue
        if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == static["attention_mask"].shape[0]:
            value = value[:count]
            if width is not None and value.dim() >= 2 and value.shape[1] == static["attention_mask"].shape[1]:
                value = value[:, :width]
        out[key] = value
    return add_target_positions(out)


@pytest.mark.parametrize("variant", UNPACKED)
def test_static_batch_gives_the_batch_loss_and_gradients(setups, variant):
    """Loss, every scalar output and every gradient equal those of the same batch without the padding row, the
    padded targets and (right-padded DeBERTa-v3) the padded columns: 1e-5, dropout off."""
    recipe, collator, _ = setups[variant]
    static_collator = StaticPaddedCollator(collator, StaticShape(ROWS, LENGTH))
    features = setups[variant][2][:1]  # the shortest: padded columns (DeBERTa-v3) and padding rows
    static = static_collator(features)
    real = static["attention_mask"][:1].bool()
    width = int(real.any(0).nonzero().max()) + 1 if variant == "deberta-v3" else None
    plain = _unpadded(static, 1, width)
    assert static["target_positions"].numel() > plain["target_positions"].numel()
    if width is not None:
        assert width < LENGTH
    torch.manual_seed(0)
    model = recipe.build_model().train()
    counts = {"labels": (plain["labels"] != -100).sum(), "attention_mask": plain["attention_mask"].sum()}
    expected, got = loss_and_grads(model, plain, counts), loss_and_grads(model, static, counts)
    assert torch.isfinite(got[0].loss)
    assert_same_step(expected, got, label=variant)


def test_deberta_replacements_at_padded_targets_land_in_the_padding_row(setups, monkeypatch):
    """The replaced input the discriminator reads equals the batch's own on every real row: the samples drawn at
    the padded targets are written into the padding row only."""
    from hf_bertology.models import replaced_token_detection

    recipe, collator, _ = setups["deberta-v3"]
    static = StaticPaddedCollator(collator, StaticShape(ROWS, LENGTH))(_batches(setups["deberta-v3"])[0])
    seen = []
    fake_data = replaced_token_detection.fake_data

    def spy(*args, **kwargs):
        result = fake_data(*args, **kwargs)
        seen.append(result[1])
        return result

    monkeypatch.setattr(replaced_token_detection, "fake_data", spy)
    torch.manual_seed(0)
    model = recipe.build_model().train()
    loss_and_grads(model, static, None)
    replaced = seen[0]
    original = torch.where(static["labels"] != -100, static["labels"], static["input_ids"])
    changed = (replaced != original).nonzero()
    pad = static["target_positions"][-1]
    assert pad == static["labels"].numel() - 1 and static["labels"].flatten()[pad] == -100
    real_changed = changed[changed[:, 0] < ROWS]
    chosen = static["labels"][real_changed[:, 0], real_changed[:, 1]]
    assert (chosen != -100).all(), "a real token that is not a target was replaced"
    assert (static["target_positions"] == pad).sum() > 0


def test_static_width_refuses_a_longer_batch(setups):
    _, collator, examples = setups["deberta-v3"]
    batch = collator(examples[-2:])
    with pytest.raises(ValueError, match="static width"):
        pad_statically(batch, StaticShape(ROWS, LENGTH // 2), 0, collator)


@pytest.mark.parametrize("recipe_name, shape", [("deberta-v3-tiny", (4 + 1, 64)), ("xlnet-tiny", (4, 64))])
def test_pretrain_with_static_shapes(tmp_path, corpus_file, recipe_name, shape):
    """`bertology pretrain --recipe deberta-v3-tiny --fixed_shape_batches true`: every training batch has one shape
    (DeBERTa-v3's padding row; XLNet's stream batches with memory, as they were) and three steps train."""
    from transformers import TrainerCallback

    from hf_bertology.training.pretrain import main

    seen = {}

    class Shapes(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            seen["shapes"] = {_shapes(batch) for _, batch in zip(range(4), train_dataloader)}

    argv = ["--recipe", recipe_name, "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run")]
    flags = ["--vocab_size", "300", "--max_steps", "3", "--per_device_train_batch_size", "4", "--disable_tqdm", "true"]
    metrics = main([*argv, *flags, "--fixed_shape_batches", "true"], callbacks=[Shapes()])
    assert len(seen["shapes"]) == 1, seen
    assert dict(next(iter(seen["shapes"])))["input_ids"] == shape  # the tiny recipes' max_seq_length: 64
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))


@pytest.mark.parametrize("recipe_name", ["deberta-v3-tiny", "xlnet-tiny"])
def test_cuda_default_follows_the_measured_set(monkeypatch, recipe_name):
    """On CUDA under compilation, static padded steps with CUDA graphs are the default only once the family is in
    `CUDA_GRAPH_VARIANTS` (a slot measured it no slower; docs/speed.md): not yet. In the set, they are on with
    `reduce-overhead`, whatever the attention; the flag, `--streaming` and the CPU win."""
    from hf_bertology.recipes import get_recipe
    from hf_bertology.training import arguments

    def settle(*flags, cuda=True):
        model_args, data_args, training_args, explicit = arguments.parse_args(
            ["--recipe", recipe_name, "--output_dir", "x", *flags]
        )
        recipe = get_recipe(model_args.recipe)
        training_args.torch_compile = True
        with monkeypatch.context() as patch:
            patch.setattr(torch.cuda, "is_available", lambda: cuda)
            arguments.fast_path(recipe, model_args, data_args, training_args, explicit)
        return data_args.fixed_shape_batches, training_args.torch_compile_mode

    assert settle() == (False, None)  # not measured: the dynamic compiled default
    variant = get_recipe(recipe_name).variant_name
    monkeypatch.setattr(arguments, "CUDA_GRAPH_VARIANTS", arguments.CUDA_GRAPH_VARIANTS | {variant})
    assert settle() == (True, "reduce-overhead")
    assert settle("--attn_implementation", "eager") == (True, "reduce-overhead")
    assert settle("--fixed_shape_batches", "false") == (False, None)
    assert settle("--streaming", "true") == (False, None)
    assert settle(cuda=False) == (False, None)
