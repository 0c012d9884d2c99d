"""The GPU step: bf16, variable-length attention, torch.compile. CUDA-only tests carry the `cuda` marker: `make test`
deselects them (CI has no GPU) and `make test-gpu` runs them; on a machine without CUDA they skip with the reason."""

from __future__ import annotations

import pytest
import torch

from hf_bertology.collators.flatten import PaddingFreeCollator, flatten_batch
from hf_bertology.recipes import get_recipe
from hf_bertology.training import attention

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (bf16, varlen, compile)")
pytestmark = [pytest.mark.cuda, requires_cuda]


def _random_packed(lengths, heads=4, dim=32, dtype=torch.bfloat16):
    total = sum(lengths)
    q, k, v = (torch.randn(1, heads, total, dim, device="cuda", dtype=dtype) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    return q, k, v, cu, max(lengths)


def test_varlen_kernel_equals_padded_sdpa():
    """The CUDA varlen kernel (no padding at all) and the re-padded SDPA path compute the same attention, and the
    same gradients."""
    q, k, v, cu, longest = _random_packed([7, 128, 33, 1, 90])
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    module = torch.nn.Module()
    kwargs = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
    assert attention.flash_varlen_applies(q)
    fast, _ = attention.packed_attention_forward(module, q, k, v, None, dropout=0.0, scaling=32**-0.5, **kwargs)
    fast_grads = torch.autograd.grad(fast.float().square().sum(), (q, k, v))
    q32, k32, v32 = (x.detach().float().requires_grad_(True) for x in (q, k, v))
    reference = attention._repad_sdpa(q32, k32, v32, cu, longest, 0.0, 32**-0.5)
    reference_grads = torch.autograd.grad(reference.square().sum(), (q32, k32, v32))
    error = (fast.float() - reference).norm() / reference.norm()
    assert error < 1e-2, f"relative error {error:.2e} (bf16 operands: 1e-3..1e-2 expected)"
    for got, want in zip(fast_grads, reference_grads):
        assert (got.float() - want).norm() / want.norm() < 2e-2


def test_varlen_kernel_applies_attention_dropout():
    """Attention dropout (0.1 in every paper's recipe) runs inside the varlen kernel: outputs differ from the
    dropout-free ones by a plausible amount, stay finite, and back-propagate."""
    q, k, v, cu, longest = _random_packed([64, 100, 128])
    v.requires_grad_(True)
    kwargs = {"cu_seq_lens_q": cu, "max_length_q": longest}
    module = torch.nn.Module()
    plain, _ = attention.packed_attention_forward(module, q, k, v, None, dropout=0.0, **kwargs)
    dropped, _ = attention.packed_attention_forward(module, q, k, v, None, dropout=0.1, **kwargs)
    change = (dropped.float() - plain.float()).norm() / plain.float().norm()
    assert torch.isfinite(dropped).all() and 0.05 < change < 1.0, f"relative change {change:.3f}"
    (grad,) = torch.autograd.grad(dropped.float().sum(), v)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["bert-tiny", "electra-tiny", "spanbert-tiny"])
def test_bf16_padding_free_loss_matches_padded(name, corpus_file):
    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus

    recipe = get_recipe(name, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    corpus = load_corpus(train_files=[str(corpus_file)])
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 64, 0)
    padded = recipe.build_collator(tokenizer, seed=0)([examples[i] for i in range(8)])
    flat = flatten_batch(padded)
    model = attention.use_padding_free(recipe.build_model()).cuda()
    losses = []
    for batch in (padded, flat):
        torch.manual_seed(0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            losses.append(model(**{k: v.cuda() if torch.is_tensor(v) else v for k, v in batch.items()}).loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=2e-2, atol=2e-2)


def test_compiled_padding_free_step_recompiles_a_bounded_number_of_times(corpus_file):
    """Every padding-free batch has another token count: after the first few steps (static, then dynamic
    shapes) torch.compile must not compile again."""
    from torch._dynamo.utils import counters

    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus

    recipe = get_recipe("roberta-tiny")
    corpus = load_corpus(train_files=[str(corpus_file)])
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 64, 0)
    collator = recipe.build_collator(tokenizer, seed=0)
    model = attention.use_padding_free(recipe.build_model()).cuda()
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    torch._dynamo.reset()
    counters.clear()
    graphs = []
    for step in range(16):
        batch = PaddingFreeCollator(collator)([examples[(step * 5 + i) % len(examples)] for i in range(4 + step % 3)])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(**{k: v.cuda() if torch.is_tensor(v) else v for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[-1] == graphs[5], f"graphs compiled per step: {graphs}"


@pytest.mark.parametrize("recipe", ["bert-tiny", "electra-tiny"])
def test_torch_compile_flag_on_cuda_compiles_once(corpus_file, tmp_path, recipe):
    """The README's command with `--torch_compile` on CUDA (inductor, bf16, padding-free, fused AdamW, workers):
    one graph with dynamic shapes for the whole run, and the loss stays finite (ELECTRA: its inverse-CDF sampling
    in float64 inside the compiled graph)."""
    from torch._dynamo.utils import counters

    from hf_bertology.training import pretrain

    torch._dynamo.reset()
    counters.clear()
    argv = ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(tmp_path), "--max_steps", "8"]
    metrics = pretrain.main([*argv, "--torch_compile", "--logging_steps", "1"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_keyed_noise_equals_eager(dynamic):
    """ELECTRA's keyed noise compiles on CUDA and gives the eager bits: written as `arange * golden`, torch
    2.11's Inductor folded the product into int32 index arithmetic and Triton refused the kernel (the H200 slot of
    2026-11-27, docs/speed.md); where a product fits int32 that folding would wrap silently instead."""
    from hf_bertology.models.replaced_token_detection import keyed_uniform, sample_tokens

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    keys = torch.randint(-(2**62), 2**62, (700,), generator=g).cuda()
    logits = torch.randn(700, 30522, generator=g).cuda()
    assert torch.equal(torch.compile(keyed_uniform, dynamic=dynamic)(keys, 30522), keyed_uniform(keys, 30522))
    assert torch.equal(torch.compile(keyed_uniform, dynamic=dynamic)(keys, 1), keyed_uniform(keys, 1))  # sampling's
    # the logs of the compiled kernel may differ from eager's in the last bit: a sample may differ at a near-tie
    same = torch.compile(sample_tokens, dynamic=dynamic)(logits, 1.0, keys) == sample_tokens(logits, 1.0, keys)
    assert same.float().mean() > 0.995
