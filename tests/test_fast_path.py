"""The fast path by default on CUDA (issue 44): `bertology pretrain` compiles there, a compilation that fails says
so in one line and the run finishes eager, fixed shapes and CUDA graphs where docs/speed.md's table says, and
nothing goes to the device that its attention does not read."""

from __future__ import annotations

import logging

import pytest
import torch

from hf_bertology.training import pretrain
from hf_bertology.training.arguments import (
    CUDA_GRAPH_VARIANTS,
    device_defaults,
    fast_path,
    parse_args,
    training_arguments,
)
from hf_bertology.training.compilation import EagerFallback, error_line
from hf_bertology.utils import logger


def _pretrain(corpus_file, out, *extra: str) -> dict:
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps", "3"]
    return pretrain.main([*argv, "--logging_steps", "1", *extra])


@pytest.fixture
def warnings(monkeypatch):
    """Our logger's warnings (it does not propagate to the root logger that caplog reads)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(logging.WARNING)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def _arguments(monkeypatch, cuda: bool, *flags: str):
    """The run's TrainingArguments and fixed-shape choice for bert-tiny, as `run_pretraining` settles them, on a CUDA
    machine where `cuda` (its compile default; bf16 and TF32 cannot be built on this CPU, and are tested apart)."""
    from hf_bertology.recipes import get_recipe
    from hf_bertology.training import arguments

    if cuda:
        monkeypatch.setattr(arguments, "device_defaults", lambda explicit, streaming=False: {"torch_compile": True})
    model_args, data_args, training_args, explicit = parse_args(["--recipe", "bert-tiny", "--output_dir", "x", *flags])
    recipe = get_recipe(model_args.recipe)
    training_args = training_arguments(training_args, recipe, explicit)
    with monkeypatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: cuda)
        fast_path(recipe, model_args, data_args, training_args, explicit)
    monkeypatch.undo()
    return training_args, data_args


def test_cuda_defaults_compile_and_a_flag_wins(monkeypatch):
    """On CUDA: compiled, and for BERT (measured) fixed shapes with CUDA graphs; every flag wins; the CPU's defaults
    stay as they were."""
    training_args, data_args = _arguments(monkeypatch, False)
    assert not training_args.torch_compile and data_args.fixed_shape_batches is False
    training_args, data_args = _arguments(monkeypatch, True)
    assert training_args.torch_compile and training_args.torch_compile_mode == "reduce-overhead"
    assert data_args.fixed_shape_batches is True
    training_args, data_args = _arguments(monkeypatch, True, "--torch_compile", "false")
    assert not training_args.torch_compile and training_args.torch_compile_mode is None
    assert data_args.fixed_shape_batches is False
    for flags in [("--padding_free", "false"), ("--attn_implementation", "sdpa"), ("--fixed_shape_batches", "false")]:
        training_args, data_args = _arguments(monkeypatch, True, *flags)
        assert training_args.torch_compile and training_args.torch_compile_mode is None, flags
        assert data_args.fixed_shape_batches is False, flags
    training_args, data_args = _arguments(monkeypatch, True, "--torch_compile_mode", "max-autotune")
    assert training_args.torch_compile_mode == "max-autotune" and data_args.fixed_shape_batches is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_defaults(set())["torch_compile"] is True


def test_failed_compilation_says_one_line_and_finishes_eager(corpus_file, tmp_path, warnings, capfd):
    """A real run whose compilation fails at the first step (the `tvm` backend, which accelerate accepts and whose
    package is not installed: the same lazy failure as a broken Inductor): one warning line naming the error, no
    traceback, every step trained (eager) and the model written."""
    torch._dynamo.reset()
    metrics = _pretrain(corpus_file, tmp_path / "run", "--torch_compile_backend", "tvm")
    torch._dynamo.reset()
    said = [r.getMessage() for r in warnings if "torch.compile" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith("torch.compile failed (") and "training goes on eager" in said[0]
    assert "tvm" in said[0].lower()  # names the error: the missing package of the backend
    assert metrics["global_step"] == 3 and metrics["tokens_seen"] > 0
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert "Traceback" not in capfd.readouterr().err


def test_fallback_step_is_the_eager_step():
    """The step that falls back is the eager step, dropout draws included (from the random state the compiled
    attempt started with). Whole runs are compared in no test: two eager `bertology pretrain` runs in one process
    already differ in the third decimal of their loss."""

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no code generated")

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 2))
    x = torch.randn(8, 4)
    torch.manual_seed(5)
    expected = net(x)
    after = torch.rand(3)
    torch.manual_seed(5)
    fallback = EagerFallback()
    got = fallback.call(torch.compile(net, backend=broken_backend), lambda m: m(x))
    assert fallback.failed == "RuntimeError: no code generated"
    assert torch.equal(got, expected) and torch.equal(torch.rand(3), after)
    torch._dynamo.reset()


def test_fallback_raises_errors_of_the_step_itself():
    """An error eager raises too (bad inputs) is raised as it is, with no line about compilation."""

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no code generated")

    model = torch.compile(torch.nn.Linear(3, 2), backend=broken_backend)
    fallback = EagerFallback()
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        fallback.call(model, lambda m: m(torch.ones(1, 5)))
    assert fallback.failed is None
    out = fallback.call(model, lambda m: m(torch.ones(1, 3)))  # the backend's failure: eager, remembered
    assert out.shape == (1, 2) and fallback.failed == "RuntimeError: no code generated"
    assert fallback.call(model, lambda m: m is model._orig_mod)  # every later step: eager, without trying again


def test_an_error_of_compiled_code_after_a_compiled_step_is_raised(warnings):
    """Once a compiled step has run, an error the compiled code raises (a kernel's, at run time) is raised as it is:
    not retried eager, not said as a failed compilation, and the model stays compiled."""
    calls = []

    def fails_second_time(gm, example_inputs):
        def run(*args):
            calls.append(len(args))
            if len(calls) > 1:
                raise RuntimeError("illegal memory access in a compiled kernel")
            return gm.forward(*args)

        return run

    model = torch.compile(torch.nn.Linear(3, 2), backend=fails_second_time)
    fallback = EagerFallback()
    assert fallback.call(model, lambda m: m(torch.ones(4, 3))).shape == (4, 2)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        fallback.call(model, lambda m: m(torch.ones(4, 3)))
    assert len(calls) == 2 and fallback.failed is None  # the same compiled code, no recompilation
    assert not [r for r in warnings if "torch.compile" in r.getMessage()]
    assert fallback.call(model, lambda m: m is model)  # the next step is handed the compiled model
    torch._dynamo.reset()


def test_backward_compilation_fails_inside_the_first_call():
    """AOTAutograd compiles the backward at the first `backward()` by default, outside the call the fallback
    guards: the first compiled call lowers it at once, so a backward that cannot compile falls back there."""
    from torch._dynamo.backends.common import aot_autograd

    def forward_only(gm, example_inputs):
        return gm.forward

    def no_backward(gm, example_inputs):
        raise RuntimeError("backward kernels failed")

    model = torch.compile(
        torch.nn.Linear(3, 2), backend=aot_autograd(fw_compiler=forward_only, bw_compiler=no_backward)
    )
    fallback = EagerFallback()
    loss = fallback.call(model, lambda m: m(torch.ones(4, 3)).sum())
    loss.backward()
    assert fallback.failed == "RuntimeError: backward kernels failed"
    torch._dynamo.reset()


def test_error_line_names_the_innermost_error():
    try:
        try:
            raise ValueError("Scalar -7046029254386353131 is out of range for type int32\nmore")
        except ValueError as inner:
            raise RuntimeError("SubprocException: An exception occurred in a subprocess:\n\n...") from inner
    except RuntimeError as err:
        assert error_line(err) == "ValueError: Scalar -7046029254386353131 is out of range for type int32"


def test_graph_variants_name_recipes():
    from hf_bertology.recipes import VARIANTS

    assert CUDA_GRAPH_VARIANTS <= set(VARIANTS)  # packable ones get token-budget steps, the others static padding


def _packable_batch(corpus_file, recipe_name: str):
    """(model with the packed attention, PaddingFreeCollator, examples) of a tiny recipe, no dropout."""
    from hf_bertology.collators.flatten import PaddingFreeCollator
    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
    from hf_bertology.recipes import get_recipe
    from hf_bertology.training.attention import use_padding_free
    from platform_support import no_dropout

    recipe = get_recipe(recipe_name, **no_dropout(recipe_name))
    corpus = load_corpus(train_files=[str(corpus_file)])
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
    torch.manual_seed(0)
    model = use_padding_free(recipe.build_model()).train()
    return model, PaddingFreeCollator(recipe.build_collator(tokenizer, seed=0)), [examples[i] for i in range(6)]


@pytest.mark.parametrize("recipe_name", ["bert-tiny", "modernbert-tiny"])
def test_only_the_keys_the_attention_reads_are_made(corpus_file, recipe_name):
    """The re-padded layout is made only for the attention that reads it: none on CUDA's varlen kernel (bf16), the
    slots, index and bias on the CPU, the boolean key mask only under a sliding window (ModernBERT); the CPU's
    step on the fewer keys gives the loss and gradients of the step on all of them (exactly)."""
    from hf_bertology.collators.fixed_shape import FixedShapeCollator, TokenBudget
    from hf_bertology.collators.flatten import REPAD_KEYS
    from hf_bertology.training.attention import layout_keys_read, set_attention

    model, collator, features = _packable_batch(corpus_file, recipe_name)
    assert layout_keys_read(model, "cuda", True) == ()
    cpu = layout_keys_read(model, "cpu", False)
    window = recipe_name.startswith("modernbert")
    assert set(cpu) == {"packed_slots", "packed_index", "packed_key_bias"} | ({"packed_key_mask"} if window else set())
    assert set(layout_keys_read(model, "cuda", False)) == set(cpu)  # fp32 on CUDA: the re-padded path
    results = []
    collator.layout_keys = cpu
    assert {k for k in collator(features) if k.startswith("packed_")} == set(cpu)
    collator.layout_keys = REPAD_KEYS
    full = collator(features)
    for keys in (REPAD_KEYS, cpu):
        batch = {k: v for k, v in full.items() if not k.startswith("packed_") or k in keys}
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))
    collator.layout_keys = ()
    assert not [k for k in collator(features) if k.startswith("packed_")]
    budget = TokenBudget(rows=2, row_length=192, max_length=48, max_sequences=32, max_targets=64)
    fixed = FixedShapeCollator(collator.collator, budget, ())
    assert not [k for k in fixed(features) if k.startswith("packed_")]
    set_attention(model, "flash_attention_2")
    assert layout_keys_read(model, "cpu", False) == ()  # transformers' varlen kernels read cu_seq_lens only


def test_the_trainer_sets_what_its_collator_makes(corpus_file, tmp_path):
    """`bertology pretrain` on this CPU: the collator makes the CPU's keys; on CUDA in bf16 (the Trainer's device and
    precision faked here), none."""
    from types import SimpleNamespace

    from hf_bertology.training.run_trainer import send_only_what_attention_reads

    box = {}
    train_and_evaluate = pretrain.train_and_evaluate

    def keep(trainer, resume_from=None):
        box["collator"] = trainer.data_collator
        return train_and_evaluate(trainer, resume_from)

    pretrain.train_and_evaluate = keep
    try:
        _pretrain(corpus_file, tmp_path / "run", "--max_steps", "1")
    finally:
        pretrain.train_and_evaluate = train_and_evaluate
    assert set(box["collator"].layout_keys) == {"packed_slots", "packed_index", "packed_key_bias"}
    model, collator, _ = _packable_batch(corpus_file, "bert-tiny")
    args = SimpleNamespace(device=torch.device("cuda"), bf16=True, fp16=False)
    send_only_what_attention_reads(SimpleNamespace(data_collator=collator, args=args, model=model))
    assert collator.layout_keys == ()
