"""No host sync in a training step: the README's `bertology pretrain` command, on every recipe, runs its steps with
no operation that makes the host wait for the device (`hf_bertology.testing.HostSyncs`), and what replaced those
operations gives the same numbers: target positions vs boolean indexing, the device-side token count vs the stock
Trainer's, the sync-free AUC vs scikit-learn."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from transformers import Trainer, TrainerState

from hf_bertology.collators.flatten import TARGET_POSITIONS, add_target_positions, flatten_batch
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.models.replaced_token_detection import binary_auc
from hf_bertology.recipes import VARIANTS, get_recipe
from hf_bertology.testing import HostSyncs
from hf_bertology.training import pretrain
from hf_bertology.training.arguments import PRETRAIN_DEFAULTS, device_defaults
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention
from hf_bertology.training.trainer import BertologyTrainer
from platform_support import no_dropout

# Operations that run in the DataLoader run on host tensors on a GPU machine too: not syncs.
HOST_SIDE = ("hf_bertology/collators/", "torch/utils/data/", "accelerate/data_loader.py")
# The syncs left, inside code that is not ours (file names), and why.
KNOWN = {
    # two-stream attention: `one_hot` of the segment matrix checks its values on the host (XLNet stays padded, its
    # attention is its own code)
    "xlnet": {"modeling_xlnet.py"},
    # the optimizer, not the step: torch-optimi's StableAdamW (the official one) reads every tensor's update RMS with
    # `.item()` in its for-loop and foreach paths (official src/optimizer.py:301 too); its Triton kernel (CUDA) does not
    "modernbert": {"stableadamw.py"},
}
CELLS = [f"{variant}-tiny" for variant in VARIANTS] + ["electra-tiny@deberta", "spanbert-tiny@roberta"]


def test_host_syncs_finds_the_operations_that_sync():
    x = torch.arange(6.0)
    with HostSyncs() as syncs:
        x.sum().item()
        bool(x.max() > 2)
        _ = x[x > 2]
        x.nonzero()
        torch.unique(x)
        x[:2].tolist()
        x.index_select(0, torch.tensor([1, 3]))  # integer gathers, shapes known on the host: no sync
        x.masked_fill(x > 2, 0.0)
        torch.searchsorted(x, x)
    kinds = Counter(site.rsplit(": ", 1)[1] for site in syncs.sites.elements())
    assert kinds == {"item": 2, "aten.index.Tensor[bool]": 1, "nonzero": 1, "unique": 1, "Tensor.tolist()": 1}
    assert "read" not in torch.Tensor.tolist.__qualname__  # restored
    assert all(site.startswith("test_host_syncs.py:") for site in syncs.sites), syncs.by_site()
    with HostSyncs(ignore=("test_host_syncs.py",)) as ignored:
        x.sum().item()
    assert ignored.count == 0


def _train(corpus_file, tmp_path, recipe: str, steps: int, *extra: str) -> tuple[Counter, dict, BertologyTrainer]:
    """The README's command (`bertology pretrain --recipe R --train_file F --output_dir D --max_steps N`) from
    Python; the syncs of `trainer.train()`."""
    box = {}
    train_and_evaluate = pretrain.train_and_evaluate

    def watched(trainer, resume_from=None):
        with HostSyncs(ignore=HOST_SIDE) as syncs:
            metrics = train_and_evaluate(trainer, resume_from)
        box.update(syncs=syncs.sites, trainer=trainer)
        return metrics

    pretrain.train_and_evaluate = watched
    try:
        out = tmp_path / f"{recipe}-{steps}".replace("@", "-")
        argv = ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps"]
        metrics = pretrain.main([*argv, str(steps), *extra])
    finally:
        pretrain.train_and_evaluate = train_and_evaluate
    return box["syncs"], metrics, box["trainer"]


@pytest.mark.parametrize("recipe", CELLS)
def test_training_steps_do_not_sync(corpus_file, tmp_path, recipe):
    """Four more steps add no host sync: everything a step syncs on is gone (setup and the final log may sync)."""
    two, _, _ = _train(corpus_file, tmp_path, recipe, 2)
    six, _, _ = _train(corpus_file, tmp_path, recipe, 6)
    per_step = {site: (six[site] - two[site]) / 4 for site in six if six[site] != two[site]}
    allowed = KNOWN.get(recipe.split("-tiny")[0], set())
    assert {site.split(":")[0] for site in per_step} <= allowed, per_step


def test_tokens_seen_as_the_stock_trainer_counts(corpus_file, tmp_path, monkeypatch):
    """The device-side count is read at every log and checkpoint, and equals the stock `.item()` count there."""
    flags = ["--logging_steps", "2", "--save_steps", "3"]
    _, ours, trainer = _train(corpus_file, tmp_path / "ours", "bert-tiny", 7, *flags)
    monkeypatch.setattr(BertologyTrainer, "_track_num_input_tokens", Trainer._track_num_input_tokens)
    _, stock, stock_trainer = _train(corpus_file, tmp_path / "stock", "bert-tiny", 7, *flags)
    assert ours["tokens_seen"] == stock["tokens_seen"] > 0

    def seen(history):
        return [(log["step"], log["num_input_tokens_seen"]) for log in history if "num_input_tokens_seen" in log]

    assert seen(trainer.state.log_history) == seen(stock_trainer.state.log_history)
    assert len(seen(trainer.state.log_history)) >= 4

    def saved(run):  # the count each checkpoint holds
        folders = sorted((tmp_path / run).glob("*/checkpoint-*"))
        return [TrainerState.load_from_json(str(p / "trainer_state.json")).num_input_tokens_seen for p in folders]

    assert saved("ours") == saved("stock")
    assert len(saved("ours")) == 2 and all(n > 0 for n in saved("ours"))


@pytest.fixture(scope="module")
def batches(corpus_file):
    """variant -> (model, padded batch of 6 examples of unequal lengths)."""
    out = {}
    corpus = load_corpus(train_files=[str(corpus_file)])
    for variant in VARIANTS:
        recipe = get_recipe(f"{variant}-tiny", **no_dropout(f"{variant}-tiny"))
        tokenizer = recipe.train_tokenizer(corpus["text"], 300)
        recipe.adapt_to_tokenizer(tokenizer)
        examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
        torch.manual_seed(0)
        model = recipe.build_model().train()
        if VARIANTS[variant].padding_free:
            set_attention(model, PACKED_ATTENTION)
        out[variant] = (model, recipe.build_collator(tokenizer, seed=3)([examples[i] for i in range(6)]))
    return out


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)  # ELECTRA and DeBERTa sample their replacements: the same draws both ways
    output = model(**batch)
    output.loss.backward()
    return output, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_target_positions_give_the_boolean_index_results(batches, variant):
    """Gathering the labelled tokens at the collator's positions equals selecting them with a boolean mask: the
    same loss, component values and gradients (fp32), padded and padding-free."""
    model, padded = batches[variant]
    layouts = [padded] + ([flatten_batch(padded)] if VARIANTS[variant].padding_free else [])
    for batch in layouts:
        with_positions = add_target_positions(dict(batch))
        assert TARGET_POSITIONS["labels"] in with_positions
        expected, expected_grads = _loss_and_grads(model, batch)
        got, grads = _loss_and_grads(model, with_positions)
        for key, value in expected.items():
            if torch.is_tensor(value) and value.is_floating_point():
                torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-7, equal_nan=True, msg=key)
        assert grads.keys() == expected_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, expected_grads[name], rtol=1e-5, atol=1e-7, msg=name)


def test_flattening_a_batch_with_target_positions_moves_them(batches):
    _, padded = batches["spanbert"]
    flat = flatten_batch(add_target_positions(dict(padded)))
    expected = add_target_positions(flatten_batch(padded))
    for name in TARGET_POSITIONS.values():
        assert torch.equal(flat[name], expected[name]), name


def test_target_positions_index_the_labelled_tokens():
    labels = torch.tensor([[-100, 5, -100, 7], [8, -100, -100, -100]])
    sbo = torch.tensor([[-100, -100, 3, -100], [-100, -100, -100, 4]])
    batch = add_target_positions({"labels": labels, "sbo_labels": sbo, "attention_mask": torch.ones(2, 4)})
    assert batch["target_positions"].tolist() == [1, 3, 4]
    assert batch["sbo_target_positions"].tolist() == [2, 7]
    assert labels.flatten()[batch["target_positions"]].tolist() == [5, 7, 8]


def test_binary_auc_over_the_real_tokens_matches_sklearn():
    from sklearn.metrics import roc_auc_score

    gen = torch.Generator().manual_seed(0)
    for rows, width, levels in [(4, 50, None), (8, 64, 3), (3, 20, 1)]:
        labels = torch.rand(rows, width, generator=gen) < 0.3
        scores = torch.randn(rows, width, generator=gen) + labels
        if levels is not None:  # rounded: many ties, some with the padding's scores
            scores = (scores * levels).round()
        real = torch.arange(width)[None, :] < torch.randint(width // 2, width + 1, (rows, 1), generator=gen)
        expected = roc_auc_score(labels[real].numpy(), scores[real].numpy())
        assert abs(binary_auc(scores, labels, real).item() - expected) < 1e-6, (rows, width, levels)
    with HostSyncs() as syncs:
        binary_auc(scores, labels, real)
    assert syncs.count == 0, syncs.by_site()


def test_gpu_defaults_copy_batches_without_blocking(monkeypatch, corpus_file, tmp_path):
    """On a CUDA machine: compiled, bf16, TF32, fused AdamW, non-blocking copies of the (pinned) batches, collation in up to 4
    DataLoader workers (none when streaming); the copy setting parses and trains as a flag too (here on the CPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    defaults = device_defaults(set())
    assert defaults == {
        "tf32": True,
        "optim": "adamw_torch_fused",
        "accelerator_config": {"non_blocking": True},
        "dataloader_num_workers": 4,
        "bf16": True,
        "torch_compile": True,  # issue 44: compiled by default on CUDA (tests/test_fast_path.py)
    }
    assert "dataloader_num_workers" not in device_defaults(set(), streaming=True)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert device_defaults(set())["dataloader_num_workers"] == 1
    assert device_defaults({"use_cpu"}) == {"dataloader_pin_memory": False}  # nothing to pin for
    assert PRETRAIN_DEFAULTS["logging_nan_inf_filter"] is False  # its isnan test syncs every micro-batch
    monkeypatch.undo()
    if not torch.accelerator.is_available():  # this CPU machine: no pinning, so no "no accelerator" warning
        assert device_defaults(set()) == {"dataloader_pin_memory": False}
    _, metrics, trainer = _train(
        corpus_file, tmp_path, "bert-tiny", 2, "--accelerator_config", '{"non_blocking": true}'
    )
    assert trainer.args.accelerator_config.non_blocking and metrics["tokens_seen"] > 0


PACKABLE_CELLS = [f"{v}-tiny" for v, spec in VARIANTS.items() if spec.padding_free]
PACKABLE_CELLS += ["electra-tiny@roberta", "spanbert-tiny@albert"]  # two objectives on other encoders


@pytest.mark.parametrize("recipe_name", PACKABLE_CELLS)
def test_padding_free_step_compiles_as_one_graph_that_stays(corpus_file, recipe_name):
    """`--torch_compile` on the batches `bertology pretrain` makes (flattened, with target positions): dynamo traces
    forward and loss as one graph (`fullgraph=True`: a sync or any other break would raise), and the token and
    target counts, new every batch, stop causing compilations after the first few (static, then dynamic shapes).
    Each varying input (tokens, examples, targets, longest example) costs one recompilation when it first changes,
    then none. The `eager` backend traces as inductor would, without generating code (CUDA:
    `tests/test_gpu.py`)."""
    from torch._dynamo.utils import counters

    from hf_bertology.collators.flatten import PaddingFreeCollator
    from hf_bertology.training.attention import use_padding_free

    recipe = get_recipe(recipe_name)
    assert recipe.padding_free
    corpus = load_corpus(train_files=[str(corpus_file)])
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
    collator = PaddingFreeCollator(recipe.build_collator(tokenizer, seed=0))
    torch.manual_seed(0)
    model = use_padding_free(recipe.build_model()).train()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    # Short and long examples in turn: from the second batch on every count has changed at least once.
    by_length = sorted(range(len(examples)), key=lambda i: len(examples[i]["input_ids"]))
    shortest, longest = by_length, by_length[::-1]
    graphs = []
    for step in range(12):
        picks = (shortest if step % 2 else longest)[step * 2 : step * 2 + 3 + step % 3]
        batch = collator([examples[i] for i in picks])
        loss = compiled(**batch).loss
        loss.backward()
        assert torch.isfinite(loss)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1] == 2 and graphs[-1] == graphs[2], f"graphs compiled per step: {graphs}"


@pytest.mark.parametrize("recipe", ["bert-tiny", "electra-tiny", "deberta-v3-tiny"])
def test_torch_compile_flag_compiles_once(corpus_file, tmp_path, recipe):
    """The README's command with `--torch_compile` (backend `eager`: dynamo traces as inductor would, without
    generating code): the Trainer's compiled model traces one graph, with dynamic shapes from the start, and keeps
    it while every batch brings new counts. The stock plugin (`dynamic=None`) traces two: static, then dynamic.
    Padding-free (BERT, ELECTRA's two encoders) and padded (DeBERTa-v3)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    out = tmp_path / recipe
    argv = ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps", "6"]
    pretrain.main([*argv, "--torch_compile", "--torch_compile_backend", "eager"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    torch._dynamo.reset()
