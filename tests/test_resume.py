"""Kill and resume: `bertology pretrain` killed with SIGKILL after a checkpoint, resumed with
`--resume_from_checkpoint last`, ends with the weights of an uninterrupted run (CPU, same seed): the data order,
the masks (keyed by seed, epoch and example id), the model's RNG (torch's global RNG, saved in rng_state.pth) and the
optimizer all come back. A checkpoint cut off
while being written is never picked."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.training.checkpoints import MARKER, last_complete_checkpoint, list_checkpoints, mark_complete
from platform_support import PYTHON, REPO, pretrain_argv, subprocess_env, tiny_recipes, write_corpus

MAX_STEPS, SAVE_STEPS = 40, 5
KILL_SEED = 1234


@pytest.fixture(autouse=True)
def one_thread():
    """The child runs with one thread: so do the in-process runs, so all three sum in the same order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def flags(*extra: str) -> list[str]:
    return ["--max_steps", str(MAX_STEPS), "--save_steps", str(SAVE_STEPS), "--save_total_limit", "3", *extra]


def kill_after_checkpoint(
    argv: list[str], output_dir: Path, step: int, timeout: float = 300, sig: int = signal.SIGKILL
) -> tuple[int, str]:
    """Run `bertology pretrain argv` in a child; send it `sig` as soon as checkpoint `step` is complete. Its exit
    status and stderr."""
    child = subprocess.Popen(
        [PYTHON, "-m", "hf_bertology", "pretrain", *argv],
        env=subprocess_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    marker = output_dir / f"checkpoint-{step}" / MARKER
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        child.send_signal(sig)
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert marker.exists(), f"checkpoint-{step} never completed: {stderr.decode()[-3000:]}"
    return child.returncode, stderr.decode()


def fake_partial_checkpoint(source: Path, target: Path) -> None:
    """What a kill during `_save_checkpoint` leaves: some files, the weights cut short, no state, no marker."""
    target.mkdir(exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, target / name)
    weights = (target / "model.safetensors").read_bytes()
    (target / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    for name in (MARKER, "trainer_state.json", "optimizer.pt", "rng_state.pth"):
        (target / name).unlink(missing_ok=True)


def run_kill_and_resume(recipe: str, tmp_path: Path, *extra: str) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=60)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    # One tokenizer for both runs: training one is not deterministic across processes (tokenizers orders tied
    # symbols arbitrarily), and the point here is the Trainer state. Resuming reuses the checkpoint's tokenizer.
    tokenizer_dir = tmp_path / "tokenizer"
    hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer_dir)
    extra = ("--tokenizer_name", str(tokenizer_dir), *extra)
    assert cli.main(["pretrain", *pretrain_argv(recipe, corpus, reference, *flags(*extra))]) == 0

    step = random.Random(KILL_SEED).choice(range(SAVE_STEPS, MAX_STEPS // 2 + 1, SAVE_STEPS))
    returncode, _ = kill_after_checkpoint(pretrain_argv(recipe, corpus, killed, *flags(*extra)), killed, step)
    assert returncode == -signal.SIGKILL
    assert not (killed / "model.safetensors").exists()  # it died before the end
    last = last_complete_checkpoint(killed)
    assert last is not None and int(last.name.split("-")[1]) >= step
    # The kill may also have hit a save: make sure the newest folder is a half-written one.
    partial = killed / f"checkpoint-{int(last.name.split('-')[1]) + SAVE_STEPS}"
    fake_partial_checkpoint(last, partial)
    assert list_checkpoints(killed)[-1] == partial and last_complete_checkpoint(killed) == last

    resumed_argv = pretrain_argv(recipe, corpus, killed, *flags(*extra, "--resume_from_checkpoint", "last"))
    assert cli.main(["pretrain", *resumed_argv]) == 0
    state = json.loads((killed / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == MAX_STEPS

    expected, got = load_file(reference / "model.safetensors"), load_file(killed / "model.safetensors")
    assert expected.keys() == got.keys()
    different = [k for k in expected if not torch.equal(expected[k], got[k])]
    assert not different, f"{len(different)} tensors differ after resuming from {last.name}, e.g. {different[:3]}"


def test_kill_and_resume_equals_an_uninterrupted_run(tmp_path):
    run_kill_and_resume(tiny_recipes()[0], tmp_path)


@pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)])
def test_kill_and_resume_a_streamed_run(tmp_path, workers):
    """`--streaming`: each streamed example's masks are keyed by its position in the stream, and the Trainer reads
    the stream again up to the checkpoint's step, so a kill -9 and a resume end bitwise equal too (with workers as
    well: each reads its shards in the same order again). One micro-batch a step, as before global batches: with
    gradient accumulation a streamed resume is not bitwise yet (docs/reliability.md, "Limits")."""
    streamed = ("--streaming", "--dataloader_num_workers", workers, "--gradient_accumulation_steps", "1")
    run_kill_and_resume(tiny_recipes()[0], tmp_path, *streamed)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_saves_the_step_it_stopped_at(tmp_path, sig):
    """Ctrl-C (or a scheduler's SIGTERM) in the middle of a run: the step under way finishes, a complete checkpoint
    of it is saved (not only the last `--save_steps` multiple), the command exits 130 with a line saying how to go
    on and writes no final folder; `--resume_from_checkpoint last` then continues from that step to the weights of
    an uninterrupted run."""
    recipe = tiny_recipes()[0]
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=60)
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    tokenizer_dir = tmp_path / "tokenizer"
    hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer_dir)
    argv = pretrain_argv(recipe, corpus, stopped, *flags("--tokenizer_name", str(tokenizer_dir)))
    returncode, stderr = kill_after_checkpoint(argv, stopped, SAVE_STEPS, sig=sig)
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "interrupted", stderr[-3000:]
    said = re.search(r"stopped after step (\d+) with a checkpoint in .*--resume_from_checkpoint last", stderr)
    assert said, stderr[-3000:]
    step = int(said.group(1))
    assert step > SAVE_STEPS and last_complete_checkpoint(stopped) == stopped / f"checkpoint-{step}"
    assert not (stopped / "model.safetensors").exists() and not (stopped / "all_results.json").exists()

    assert cli.main(["pretrain", *argv, "--resume_from_checkpoint", "last"]) == 0
    assert (
        cli.main(
            ["pretrain", *pretrain_argv(recipe, corpus, reference, *flags("--tokenizer_name", str(tokenizer_dir)))]
        )
        == 0
    )
    expected, got = load_file(reference / "model.safetensors"), load_file(stopped / "model.safetensors")
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", tiny_recipes())
@pytest.mark.parametrize("workers", ["0", "2"])
def test_kill_and_resume_every_variant(recipe, workers, tmp_path):
    """With dataloader workers too: masks are a function of (seed, epoch, example id), not of a worker's RNG."""
    run_kill_and_resume(recipe, tmp_path, "--dataloader_num_workers", workers)


def test_last_checkpoint_skips_unfinished_ones(tmp_path):
    assert last_complete_checkpoint(tmp_path / "missing") is None
    for step in (2, 4, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x" * step)
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-10" / "trainer_state.json").write_text('{"global_st')  # cut off mid-write
    (tmp_path / "checkpoint-x").mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-4", "checkpoint-10"]
    # No marker, no checkpoint: weights next to a readable trainer_state.json are not enough (issue 27, item 12).
    assert last_complete_checkpoint(tmp_path) is None
    mark_complete(tmp_path / "checkpoint-2", 2, world_size=1)
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-2"


def test_resume_from_an_incomplete_checkpoint_is_one_error(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    (tmp_path / "out" / "checkpoint-3").mkdir(parents=True)
    argv = pretrain_argv("bert-tiny", corpus, tmp_path / "out", "--resume_from_checkpoint")
    assert cli.main(["pretrain", *argv, str(tmp_path / "out" / "checkpoint-3")]) == 2
    assert "incomplete" in capsys.readouterr().err
    assert cli.main(["pretrain", *argv, str(tmp_path / "nowhere")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    (tmp_path / "out" / "all_results.json").write_text("{}")  # a finished run's folder, given for a checkpoint
    assert cli.main(["pretrain", *argv, str(tmp_path / "out")]) == 2
    assert "a run's output folder, not a checkpoint; pass one of its checkpoint-N" in capsys.readouterr().err
