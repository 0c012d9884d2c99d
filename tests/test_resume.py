"""Kill and resume: `bertology pretrain` killed with SIGKILL after a checkpoint, resumed with
`--resume_from_checkpoint last`, ends with the weights and optimizer state of an uninterrupted run (CPU, same seed),
for every family: the data order, the masks (keyed by seed, epoch and example id), the model's RNG (torch's global
RNG, saved in rng_state.pth), the optimizer and XLNet's memory all come back. A checkpoint cut off while being written
is never picked. One killed run is a new interpreter (`python -m hf_bertology`); the others are forked from a server
that imported hf_bertology once (`forkserver`), which makes every family's case cheap enough for `make test`."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
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
from platform_support import PYTHON, REPO, pretrain_argv, pretrain_in_child, subprocess_env, tiny_recipes, write_corpus

MAX_STEPS, SAVE_STEPS = 40, 5
# Every family in `make test`: a run's cost is its set-up, not its steps; 12 steps leave the kill time to land.
FAMILY_MAX_STEPS, FAMILY_SAVE_STEPS = 12, 4
KILL_SEED = 1234


@pytest.fixture(autouse=True)
def one_thread():
    """The child runs with one thread: so do the in-process runs, so all three sum in the same order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def flags(*extra: str, max_steps: int = MAX_STEPS, save_steps: int = SAVE_STEPS) -> list[str]:
    return ["--max_steps", str(max_steps), "--save_steps", str(save_steps), "--save_total_limit", "3", *extra]


@functools.cache
def forkserver() -> multiprocessing.context.BaseContext:
    """A process that imports hf_bertology once and forks a child per run: an interpreter start and that import take
    5-10 s of CPU, several times a tiny run."""
    context = multiprocessing.get_context("forkserver")
    modules = ["hf_bertology.training.pretrain", "hf_bertology.training.xlnet_trainer", "platform_support"]
    context.set_forkserver_preload(modules)
    return context


class ForkedPretrain:
    """`bertology pretrain argv` in a child of `forkserver()`, with the `subprocess.Popen` calls used here."""

    def __init__(self, argv: list[str], log: Path):
        self.log = log
        self.process = forkserver().Process(target=pretrain_in_child, args=(argv, str(log)))
        self.process.start()

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def send_signal(self, sig: int) -> None:
        if self.process.exitcode is None:
            os.kill(self.process.pid, sig)

    def communicate(self, timeout: float) -> tuple[None, bytes]:
        self.process.join(timeout)
        return None, self.log.read_bytes() if self.log.exists() else b""

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float) -> None:
        self.process.join(timeout)


def kill_after_checkpoint(
    argv: list[str],
    output_dir: Path,
    step: int,
    timeout: float = 300,
    sig: int = signal.SIGKILL,
    forked: bool = False,
) -> tuple[int, str]:
    """Run `bertology pretrain argv` in a child (a new interpreter, or `forked` from `forkserver()`); send it `sig`
    as soon as checkpoint `step` is complete. Its exit status and stderr."""
    if forked:
        child = ForkedPretrain(argv, output_dir.with_name(output_dir.name + ".log"))
    else:
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


def run_kill_and_resume(
    recipe: str,
    tmp_path: Path,
    *extra: str,
    max_steps: int = MAX_STEPS,
    save_steps: int = SAVE_STEPS,
    forked: bool = False,
    killed_with: tuple[tuple[str, ...], ...] = ((),),
    n_docs: int = 60,
) -> None:
    """An uninterrupted run with `extra`; then, for each flag set of `killed_with` (added to `extra`), a run killed
    -9 after a checkpoint and resumed with `last`: its weights and optimizer state are the uninterrupted run's."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=n_docs)
    reference = tmp_path / "reference"
    # One tokenizer for every run: training one is not deterministic across processes (tokenizers orders tied
    # symbols arbitrarily), and the point here is the Trainer state. Resuming reuses the checkpoint's tokenizer.
    tokenizer_dir = tmp_path / "tokenizer"
    hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer_dir)
    extra = ("--tokenizer_name", str(tokenizer_dir), *extra)
    steps = dict(max_steps=max_steps, save_steps=save_steps)
    assert cli.main(["pretrain", *pretrain_argv(recipe, corpus, reference, *flags(*extra, **steps))]) == 0
    expected = load_file(reference / "model.safetensors")
    expected_optimizer = optimizer_tensors(reference / f"checkpoint-{max_steps}")

    step = random.Random(KILL_SEED).choice(range(save_steps, max_steps // 2 + 1, save_steps))
    for number, more in enumerate(killed_with):
        killed = tmp_path / f"killed-{number}"
        argv = pretrain_argv(recipe, corpus, killed, *flags(*extra, *more, **steps))
        returncode, stderr = kill_after_checkpoint(argv, killed, step, forked=forked)
        assert returncode == -signal.SIGKILL, stderr[-3000:]
        assert not (killed / "model.safetensors").exists()  # it died before the end
        last = last_complete_checkpoint(killed)
        assert last is not None and int(last.name.split("-")[1]) >= step
        # The kill may also have hit a save: make sure the newest folder is a half-written one.
        partial = killed / f"checkpoint-{int(last.name.split('-')[1]) + save_steps}"
        fake_partial_checkpoint(last, partial)
        assert list_checkpoints(killed)[-1] == partial and last_complete_checkpoint(killed) == last

        assert cli.main(["pretrain", *argv, "--resume_from_checkpoint", "last"]) == 0
        state = json.loads((killed / f"checkpoint-{max_steps}" / "trainer_state.json").read_text())
        assert state["global_step"] == max_steps

        got = load_file(killed / "model.safetensors")
        assert expected.keys() == got.keys()
        different = [k for k in expected if not torch.equal(expected[k], got[k])]
        said = f"{' '.join(more) or 'killed'}, resumed from {last.name}"
        assert not different, f"{said}, {len(different)} tensors differ, e.g. {different[:3]}"
        got_optimizer = optimizer_tensors(killed / f"checkpoint-{max_steps}")
        assert expected_optimizer.keys() == got_optimizer.keys(), said
        different = [k for k in expected_optimizer if not same(expected_optimizer[k], got_optimizer[k])]
        assert not different, f"{said}, the optimizer state differs in {len(different)} tensors, e.g. {different[:3]}"


def optimizer_tensors(checkpoint: Path) -> dict:
    """Every value of a checkpoint's `optimizer.pt` state (tensors, and the counts some optimizers keep as numbers), by
    parameter and name (`3.exp_avg`)."""
    state = torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    return {f"{index}.{name}": value for index, values in state.items() for name, value in values.items()}


def same(a, b) -> bool:
    return torch.equal(a, b) if torch.is_tensor(a) and torch.is_tensor(b) else type(a) is type(b) and a == b


def test_kill_and_resume_equals_an_uninterrupted_run(tmp_path):
    run_kill_and_resume(tiny_recipes()[0], tmp_path)  # killed: `python -m hf_bertology` (the others: forked)


@pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)])
def test_kill_and_resume_a_streamed_run(tmp_path, workers):
    """`--streaming`: each streamed example's masks are keyed by its position in the stream, and the Trainer reads
    the stream again up to the checkpoint's step, so a kill -9 and a resume end bitwise equal too (with workers as
    well: each reads its shards in the same order again). One micro-batch a step, as before global batches: with
    gradient accumulation a streamed resume is not bitwise yet (docs/reliability.md, "Limits")."""
    streamed = ("--streaming", "--dataloader_num_workers", workers, "--gradient_accumulation_steps", "1")
    run_kill_and_resume(tiny_recipes()[0], tmp_path, *streamed, forked=True)


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
    returncode, stderr = kill_after_checkpoint(argv, stopped, SAVE_STEPS, sig=sig, forked=True)
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


@pytest.mark.parametrize("recipe", tiny_recipes())
def test_kill_and_resume_every_variant(recipe, tmp_path):
    """Every family's state comes back (XLNet's memory too), with 0 and with 2 dataloader workers, to the weights of
    one uninterrupted run: masks are a function of (seed, epoch, example id), not of a worker's RNG. The killed runs
    are forked from `forkserver()`."""
    workers = tuple(("--dataloader_num_workers", count) for count in ("0", "2"))
    run_kill_and_resume(
        recipe, tmp_path, max_steps=FAMILY_MAX_STEPS, save_steps=FAMILY_SAVE_STEPS, forked=True, killed_with=workers
    )


def test_xlnet_resumed_at_an_epoch_end_starts_its_memory_again(tmp_path):
    """Killed after a checkpoint at an epoch's end: the next epoch starts every stream again, so the memory that
    checkpoint holds is not restored (the uninterrupted run's next step attends to none)."""
    # one micro-batch a step (the tiny preset's global batch is 8, the flags' micro-batch 4), so step 5 ends the epoch
    one = ("--gradient_accumulation_steps", "1")
    run_kill_and_resume("xlnet-tiny", tmp_path, *one, max_steps=10, save_steps=5, forked=True, n_docs=6)
    state = json.loads((tmp_path / "reference" / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["epoch"] == 1.0  # 22 examples: 5 batches of 4 an epoch
    assert (tmp_path / "killed-0" / "checkpoint-5" / "xlnet_mems_0.safetensors").is_file()


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
