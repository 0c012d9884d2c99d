"""A library's kernel chosen from the device, not from what is installed (issue 47): torch's default wheel installs
triton, and torch-optimi then defaulted StableAdamW to its Triton kernel even on a CPU (training/kernels.py); a
`--use_cpu` run on a machine with a GPU and flash-attn took `flash_attention_2` (training/attention.py). Each test
runs real steps on a CPU with the library believing what such a machine has installed (where it has, a no-op)."""

from __future__ import annotations

import copy
import importlib.util

import optimi
import optimi.utils
import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from hf_bertology.training.kernels import choose_optimizer_kernels
from platform_support import write_corpus


@pytest.fixture
def triton_installed(monkeypatch):
    """optimi as torch's CUDA wheel leaves it: `HAS_TRITON` (what its default reads) is True."""
    monkeypatch.setattr(optimi.utils, "HAS_TRITON", True)


class LastStep(TrainerCallback):
    def on_train_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.steps = state.global_step
        self.groups = getattr(optimizer, "optimizer", optimizer).param_groups  # inside accelerate's wrapper
        self.attention = model.config._attn_implementation


def pretrain(
    tmp_path, name: str, *flags: str, recipe="modernbert-tiny", callbacks=()
) -> tuple[LastStep, dict[str, torch.Tensor]]:
    from hf_bertology.training.pretrain import main

    corpus = write_corpus(tmp_path / "corpus.txt")
    argv = ["--recipe", recipe, "--train_file", str(corpus), "--output_dir", str(tmp_path / name)]
    argv += ["--max_seq_length", "64", "--per_device_train_batch_size", "4", "--use_cpu", "true", "--vocab_size"]
    argv += ["300", "--max_steps", "3", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0", *flags]
    probe = LastStep()
    main(argv, callbacks=[probe, *callbacks])
    return probe, load_file(tmp_path / name / "model.safetensors")


def test_stableadamw_trains_on_cpu_with_triton_importable_as_the_foreach_path(tmp_path, monkeypatch):
    """optimi 0.3.3 `StableAdamW._init_group` sets `triton = _default_to_triton(params)` on a still-empty list: with
    triton importable that ran the Triton kernel on CPU tensors (`RuntimeError: 0 active drivers`). Three real steps
    of the recipe now take the plain loop and end on the weights of the foreach path (asked for explicitly)."""
    monkeypatch.setattr(optimi.utils, "HAS_TRITON", True)
    run, weights = pretrain(tmp_path, "default")
    assert all(g["triton"] is False and g["foreach"] is False for g in run.groups)  # torch's rule on a CPU
    assert run.steps == 3 and all(int(g["step"]) == 3 for g in run.groups)
    monkeypatch.undo()
    reference, foreach_weights = pretrain(tmp_path, "foreach", "--optim_args", "decouple_lr=True,foreach=True")
    assert all(g["triton"] is False and g["foreach"] is True for g in reference.groups)
    assert weights.keys() == foreach_weights.keys()
    for name, value in weights.items():
        torch.testing.assert_close(value, foreach_weights[name], rtol=1e-5, atol=1e-6, msg=name)


def tiny_optimizer(**kwargs) -> tuple[torch.nn.Module, optimi.StableAdamW]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    return model, optimi.StableAdamW(model.parameters(), lr=1e-2, **kwargs)


def step(model, optimizer) -> None:
    model(torch.ones(4, 8)).square().sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_users_explicit_choice_wins(triton_installed):
    """`--optim_args triton=True` (or foreach=...) is the user's: set as given, whatever the device."""
    _, optimizer = tiny_optimizer()
    choose_optimizer_kernels(optimizer, "decouple_lr=True,triton=True,foreach=False")
    assert [(g["triton"], g["foreach"]) for g in optimizer.param_groups] == [(True, False)]


def test_a_state_saved_with_triton_loads_onto_the_cpu_path(triton_installed):
    """A checkpoint written on a GPU holds `triton: True` in its groups; loaded where the parameters are on a CPU,
    the group takes the CPU path and steps as a CPU optimizer loaded from its own state does."""
    model, optimizer = tiny_optimizer()
    choose_optimizer_kernels(optimizer, None)
    step(model, optimizer)
    saved = optimizer.state_dict()
    from_gpu = {**saved, "param_groups": [{**g, "triton": True} for g in saved["param_groups"]]}
    results = []
    for state in (saved, from_gpu):
        resumed_model, resumed = tiny_optimizer()
        resumed_model.load_state_dict(model.state_dict())
        choose_optimizer_kernels(resumed, None)
        resumed.load_state_dict(copy.deepcopy(state))  # its tensors would be stepped in place
        assert [g["triton"] for g in resumed.param_groups] == [False]
        step(resumed_model, resumed)
        results.append(torch.cat([p.flatten() for p in resumed_model.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


def test_a_cpu_run_on_a_machine_with_flash_attn_takes_sdpa(tmp_path, monkeypatch):
    """flash-attn's kernels take CUDA tensors only: a `--use_cpu` run where a GPU is visible and flash-attn installed
    trains with the packed SDPA, as on a machine without them (`attention.default_attention` for the run's device)."""
    from hf_bertology.training import attention

    class NoGpuFromHere(TrainerCallback):  # torch's own optimizer step would then look for a real one
        def on_train_begin(self, *args, **kwargs):
            monkeypatch.undo()

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine while the run is set up...
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: name == "flash_attn" or find_spec(name, *a))
    run, _ = pretrain(tmp_path, "cpu", recipe="bert-tiny", callbacks=[NoGpuFromHere()])  # ...and a CPU run
    assert run.steps == 3 and run.attention == attention.PACKED_ATTENTION


def test_the_fused_mlm_loss_on_a_cpu_with_liger_installed_is_the_chunked_one(monkeypatch):
    """Liger-Kernel's loss is a Triton kernel: with it installed, a CPU's fused MLM loss (the head of BERT-sized
    vocabularies, `return_logits=False`) is the chunked torch one, equal to the unfused loss and its gradient."""
    from hf_bertology.models.fused_cross_entropy import sparse_mlm_loss

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: name == "liger_kernel" or find_spec(name, *a))
    torch.manual_seed(0)
    decoder = torch.nn.Linear(16, 50)
    hidden = torch.randn(12, 16, requires_grad=True)
    targets = torch.randint(0, 50, (12,)).masked_fill(torch.arange(12) % 4 == 0, -100)
    _, fused, _ = sparse_mlm_loss(hidden, decoder, targets, return_logits=False)
    (fused_grad,) = torch.autograd.grad(fused, hidden)
    unfused = torch.nn.functional.cross_entropy(decoder(hidden), targets, reduction="sum")
    (unfused_grad,) = torch.autograd.grad(unfused, hidden)
    torch.testing.assert_close(fused, unfused)
    torch.testing.assert_close(fused_grad, unfused_grad)
