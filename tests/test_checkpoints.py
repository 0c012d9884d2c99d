"""What survives what (issue 27; docs/reliability.md lists each guarantee with its test here or in test_resume.py).

A checkpoint is complete only with a marker holding the step, the process count and every file's digest
(`checkpoints.verify`); `--resume_from_checkpoint last` takes the newest one that verifies and names what it skipped;
rotation goes by step and keeps the newest complete checkpoint; a live run's output folder is locked; a finished run
stays finished; a full disk during a save is one line; weights get the umask's mode. The runs are tiny (bert-tiny,
4-8 steps); the deaths inside a save are `os._exit` at a chosen point of a child (what SIGKILL leaves: no cleanup)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.training import checkpoints
from hf_bertology.training.checkpoints import (
    MARKER,
    RunLock,
    check_checkpoint,
    last_complete_checkpoint,
    mark_complete,
    newest_complete,
    rotate,
    verify,
)
from hf_bertology.utils import BertologyError
from platform_support import PYTHON, REPO, SRC, pretrain_argv, subprocess_env, write_corpus


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("tok")
    corpus = write_corpus(base / "corpus.txt", n_docs=40)
    hb.get_recipe("bert-tiny").train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(base / "tok")
    return base


def argv(base: Path, out: Path, steps: int, *extra: str) -> list[str]:
    flags = ["--max_steps", str(steps), "--save_steps", "2", "--save_total_limit", "2"]
    flags += ["--tokenizer_name", str(base / "tok"), *extra]
    return ["pretrain", *pretrain_argv("bert-tiny", base / "corpus.txt", out, *flags)]


def fake_checkpoint(folder: Path, step: int, world_size: int = 1, mark: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (folder / "optimizer.pt").write_bytes(b"o" * 100)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if mark:
        mark_complete(folder, step, world_size)
    return folder


# -- 2, 12: a checkpoint proves itself ---------------------------------------------------------------------------------
def test_verify_names_the_file_and_the_reason(tmp_path):
    ok = fake_checkpoint(tmp_path / "checkpoint-6", 6)
    assert verify(ok) is None
    marker = json.loads((ok / MARKER).read_text())
    assert marker["global_step"] == 6 and marker["world_size"] == 1
    assert set(marker["files"]) == {"model.safetensors", "optimizer.pt", "trainer_state.json"}

    def damaged(name: str, damage) -> str:
        folder = tmp_path / name
        shutil.copytree(ok, folder)
        damage(folder)
        return verify(folder)

    cases = {
        "truncated": (lambda f: truncate(f / "model.safetensors", 512), "model.safetensors has 512 bytes, 1024"),
        "empty": (lambda f: truncate(f / "optimizer.pt", 0), "optimizer.pt has 0 bytes, 100"),
        "garbled": (lambda f: garble(f / "model.safetensors"), "model.safetensors changed after it was saved"),
        "missing": (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing"),
        "added": (lambda f: (f / "rng_state.pth").write_bytes(b"r"), "rng_state.pth was written after"),
        "no marker": (lambda f: (f / MARKER).unlink(), "no completion marker"),
        "bad marker": (lambda f: (f / MARKER).write_text('{"global_st'), f"its {MARKER} is unreadable"),
        "old marker": (lambda f: (f / MARKER).write_text('{"global_step": 6}'), "lists no file digests"),
    }
    for i, (case, (damage, reason)) in enumerate(cases.items()):
        got = damaged(f"c{i}/checkpoint-6", damage)
        assert got is not None and reason in got, (case, got)
    moved = tmp_path / "checkpoint-8"
    shutil.copytree(ok, moved)  # a marker for another step
    assert "is for step 6" in verify(moved)


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(size)


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100:104] = b"\xff\xff\xff\xff"  # same size, other bytes (NaN-like floats in real weights)
    path.write_bytes(bytes(data))


def test_damage_deep_inside_a_large_file_is_found(tmp_path):
    """Issue 40, item 3: damage was only tested in the first bytes of small files, so a digest that read only part
    of a file (its first MiB chunk) passed. A 6 MiB weights file damaged at 4 MiB, and one byte off its last byte."""
    folder = fake_checkpoint(tmp_path / "checkpoint-2", 2, mark=False)
    weights = folder / "model.safetensors"
    weights.write_bytes(torch.arange(6 * 2**18, dtype=torch.float32).numpy().tobytes())  # 6 MiB
    mark_complete(folder, 2, 1)
    assert verify(folder) is None
    for offset in (4 * 2**20 + 123, weights.stat().st_size - 1):
        data = bytearray(weights.read_bytes())
        data[offset] ^= 0x40  # one bit of one float: same size, other value
        weights.write_bytes(bytes(data))
        assert "model.safetensors changed after it was saved" in (verify(folder) or ""), offset
        data[offset] ^= 0x40
        weights.write_bytes(bytes(data))
        assert verify(folder) is None


def test_last_takes_the_newest_that_verifies_and_names_the_others(tmp_path):
    for step in (2, 4, 6):
        fake_checkpoint(tmp_path / f"checkpoint-{step}", step)
    fake_checkpoint(tmp_path / "checkpoint-8", 8, mark=False)  # the first save of a run cut off: no fallback
    garble(tmp_path / "checkpoint-6" / "model.safetensors")
    newest, skipped = newest_complete(tmp_path)
    assert newest == tmp_path / "checkpoint-4"
    assert [(p.name, reason.split(" ")[0]) for p, reason in skipped] == [
        ("checkpoint-8", "no"),
        ("checkpoint-6", "model.safetensors"),
    ]


def test_resume_skips_a_damaged_checkpoint_and_refuses_it_by_name(tmp_path, tokenizer_dir, capsys):
    """Damaged weights in the newest checkpoint (before: loaded and trained to NaN, exit 0; truncated ones a
    safetensors traceback): `last` resumes from the one before, with a line; named explicitly, one error line."""
    out = tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 4)) == 0
    garble(out / "checkpoint-4" / "model.safetensors")
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", str(out / "checkpoint-4"))) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(r"error: .*checkpoint-4: model.safetensors changed after it was saved", err), err
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0
    err = capsys.readouterr().err
    assert "skipped checkpoint-4: model.safetensors changed after it was saved" in err, err
    assert "resuming from " + str(out / "checkpoint-2") in err, err
    assert verify(out / "checkpoint-6") is None
    assert all(torch.isfinite(t).all() for t in load_file(out / "model.safetensors").values())


# -- 3: rotation by step --------------------------------------------------------------------------------------------
def test_rotation_goes_by_step_and_keeps_the_newest_complete(tmp_path):
    for step in (2, 4, 6, 8, 10):
        fake_checkpoint(tmp_path / f"checkpoint-{step}", step, mark=step <= 4)
        past = time.time() - 1000 * step  # mtimes in the reverse order of the steps (a copied or restored folder)
        os.utime(tmp_path / f"checkpoint-{step}", (past, past))
    deleted = rotate(tmp_path, limit=2)
    # the two newest by step stay, and checkpoint-4, the newest complete one (6-10 are unmarked)
    assert [p.name for p in deleted] == ["checkpoint-2", "checkpoint-6"]
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == [
        "checkpoint-4",
        "checkpoint-8",
        "checkpoint-10",
    ]
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-4"
    # a run resumed from an earlier checkpoint has just marked checkpoint-4 again: kept, though older than 8 and 10
    fake_checkpoint(tmp_path / "checkpoint-12", 12)
    assert [p.name for p in rotate(tmp_path, limit=2, just_marked=tmp_path / "checkpoint-4")] == ["checkpoint-8"]


# -- 1: one run per folder ----------------------------------------------------------------------------------------------
HOLD_LOCK = (
    "import os, sys, time\n"
    "from hf_bertology.training.checkpoints import RunLock\n"
    "lock = RunLock(sys.argv[1]); lock.acquire()\n"
    "worker = os.fork()  # as a DataLoader worker does, and it outlives a run killed -9 by seconds\n"
    "if worker == 0: time.sleep(600); os._exit(0)\n"
    "print('locked', worker, flush=True); time.sleep(600)\n"
)


def test_a_live_run_holds_its_folder_and_a_dead_one_does_not(tmp_path, tokenizer_dir, capsys):
    """A second run into a folder a live run holds is refused in one line (before: both exit 0 and one run's
    result is lost); once that run is killed -9, its stale lock is taken over with a line naming it, even while a
    child it forked (a DataLoader worker) still lives."""
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [PYTHON, "-c", HOLD_LOCK, str(out)], env=subprocess_env(), cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    worker = None
    try:
        said, worker = holder.stdout.readline().split()
        worker = int(worker)
        assert said == "locked"
        assert cli.main(argv(tokenizer_dir, out, 2)) == 2
        err = capsys.readouterr().err
        line = err.strip().splitlines()[-1]
        assert re.fullmatch(
            rf"error: {re.escape(str(out))} is in use by another run \(pid {holder.pid} on .*", line
        ), err
        assert not checkpoints.list_checkpoints(out)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    try:
        os.kill(worker, 0)  # the worker lives on
        with RunLock(out):  # our logger writes to stderr (cli.main set it up above)
            err = capsys.readouterr().err
            assert f"taking over the lock of a run that is no longer running (pid {holder.pid} on" in err, err
            with pytest.raises(BertologyError, match="in use by another run"):
                RunLock(out).acquire()  # held again, now by this process
        assert not (out / checkpoints.LOCK_NAME).exists()  # released: a later run starts without a stale line
    finally:
        if worker is not None:
            os.kill(worker, signal.SIGKILL)


def test_an_output_dir_that_cannot_be_a_folder_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BertologyError, match="is a file, not a folder"):
        RunLock(tmp_path / "file").acquire()
    with pytest.raises(BertologyError, match="cannot write to --output_dir"):
        RunLock(tmp_path / "file" / "below").acquire()


# -- 4: a finished run stays finished --------------------------------------------------------------------------------
def test_a_finished_run_stays_finished(tmp_path, tokenizer_dir, capsys):
    out = tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 4)) == 0
    weights = (out / "model.safetensors").read_bytes()
    card = (out / "README.md").read_text()
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last")) == 0
    assert "is at step 4 and --max_steps is 4: nothing to train" in capsys.readouterr().err
    assert [p.name for p in checkpoints.list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]
    assert (out / "model.safetensors").read_bytes() == weights and (out / "README.md").read_text() == card
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0  # a larger one goes on
    assert [p.name for p in checkpoints.list_checkpoints(out)] == ["checkpoint-4", "checkpoint-6"]
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6


def finished_run_without_a_resumable_checkpoint(tmp_path, tokenizer_dir, damage) -> tuple[Path, bytes]:
    out = tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 4)) == 0
    for checkpoint in checkpoints.list_checkpoints(out):
        damage(checkpoint)
    return out, (out / "model.safetensors").read_bytes()


def assert_refused_and_kept(out: Path, weights: bytes, err: str, *said: str) -> str:
    assert "Traceback" not in err and "training from scratch" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: {out} holds a finished model (model.safetensors, all_results.json)"), err
    for words in ("--resume_from_checkpoint last would train from scratch", "--overwrite_output_dir", *said):
        assert words in line, (words, line)
    assert (out / "model.safetensors").read_bytes() == weights
    assert [p.name for p in checkpoints.list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]
    return line


def test_a_finished_model_is_not_trained_away_when_no_checkpoint_verifies(tmp_path, tokenizer_dir, capsys):
    """Issue 40, item 1 (before: the skip lines, a run from scratch with exit 0, and the finished model replaced):
    every checkpoint damaged, the README's resume line refuses in one line naming each; --overwrite_output_dir
    starts over."""
    out, weights = finished_run_without_a_resumable_checkpoint(
        tmp_path, tokenizer_dir, lambda c: garble(c / "model.safetensors")
    )
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last")) == 2
    line = assert_refused_and_kept(out, weights, capsys.readouterr().err)
    assert re.search(
        r"\(checkpoint-4: model.safetensors changed after .*; checkpoint-2: model.safetensors changed", line
    )
    assert "older hf_bertology" not in line, line
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last", "--overwrite_output_dir")) == 0
    assert verify(out / "checkpoint-2") is None and verify(out / "checkpoint-4") is None  # trained again


def test_an_older_versions_checkpoints_do_not_replace_its_finished_model(tmp_path, tokenizer_dir, capsys):
    """Issue 40, item 1: a run finished by a version whose markers carry no digests (or that wrote none), resumed
    after an upgrade: refused in one line that names those checkpoints as an older version's and how to go on."""

    def old_marker(checkpoint: Path) -> None:
        (checkpoint / MARKER).write_text(json.dumps({"global_step": checkpoints.step_of(checkpoint)}))

    out, weights = finished_run_without_a_resumable_checkpoint(tmp_path, tokenizer_dir, old_marker)
    (out / "checkpoint-2" / MARKER).unlink()  # older still: no marker at all
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last")) == 2
    line = assert_refused_and_kept(
        out,
        weights,
        capsys.readouterr().err,
        f"checkpoint-4: its {MARKER} lists no file digests (written by an older hf_bertology)",
        "checkpoint-2: no completion marker",
        "checkpoint-4, checkpoint-2 may be an older hf_bertology's (no digests): resume with that version, or "
        f"start from its weights with --model_name_or_path {out / 'checkpoint-4'}",
    )
    assert f"--model_name_or_path {out} with another --output_dir" in line, line


# -- 9, 10: a full disk, file modes ---------------------------------------------------------------------------------
def test_disk_full_during_a_save_is_one_line_and_keeps_the_last_checkpoint(
    tmp_path, tokenizer_dir, capsys, monkeypatch
):
    out = tmp_path / "out"
    save = torch.save

    def full_at_step_4(obj, f, *args, **kwargs):
        if "checkpoint-4" in str(f) and str(f).endswith("optimizer.pt"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_at_step_4)
    assert cli.main(argv(tokenizer_dir, out, 6)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("error:"))  # a progress bar may follow it
    assert line.startswith("error: could not save checkpoint-4 (") and "No space left on device" in line, line
    assert "the previous complete checkpoint, checkpoint-2, is intact" in line, line
    assert last_complete_checkpoint(out) == out / "checkpoint-2" and not (out / "checkpoint-4").exists()
    monkeypatch.setattr(torch, "save", save)
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0
    assert last_complete_checkpoint(out) == out / "checkpoint-6"


ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
TORCH_STOPPED = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # as torch.save
SAFETENSORS_STOPPED = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def half_written(path, data: bytes, error: BaseException):
    """A write the disk stops part-way: half the bytes land in `path`, then the writer's own error."""
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])
    raise error


def stop_torch_save(monkeypatch, where: str) -> None:
    save = torch.save

    def stopped(obj, f, *args, **kwargs):
        if where in str(f):
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            half_written(f, buffer.getvalue(), TORCH_STOPPED)
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", stopped)


def stop_weights(monkeypatch, where) -> None:
    """`where(path)`: whether the disk is full for the weights written to path."""
    import transformers.modeling_utils as modeling_utils
    from safetensors.torch import save

    write = modeling_utils.safe_save_file

    def stopped(tensors, filename, *args, **kwargs):
        if where(str(filename)):
            half_written(filename, save(tensors), SAFETENSORS_STOPPED)
        return write(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(modeling_utils, "safe_save_file", stopped)


@pytest.mark.parametrize("writer", ["optimizer", "weights"])
def test_a_write_stopped_part_way_in_a_checkpoint_is_one_line(tmp_path, tokenizer_dir, capsys, monkeypatch, writer):
    """Issue 40, item 2: the disk fills while torch.save writes the optimizer state (its RuntimeError, not an
    OSError) or safetensors the weights (its SafetensorError); before: a traceback, exit 1."""
    out = tmp_path / "out"
    if writer == "optimizer":
        stop_torch_save(monkeypatch, f"checkpoint-4{os.sep}optimizer.pt")
    else:
        stop_weights(monkeypatch, lambda path: path.endswith(f"checkpoint-4{os.sep}model.safetensors"))
    assert cli.main(argv(tokenizer_dir, out, 6)) == 2
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "Traceback" not in err and line.startswith("error: could not save checkpoint-4 (a write stopped part-way:")
    said = "unexpected pos 576 vs 534" if writer == "optimizer" else "No space left on device (os error 28)"
    assert said in line and "the previous complete checkpoint, checkpoint-2, is intact" in line, line
    assert last_complete_checkpoint(out) == out / "checkpoint-2" and not (out / "checkpoint-4").exists()
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
    monkeypatch.undo()
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0
    assert last_complete_checkpoint(out) == out / "checkpoint-6"


REAL_WRITERS = """
import json, os, resource, signal, sys, torch
from safetensors.torch import save_file
from hf_bertology.training.checkpoints import write_failure
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails (EFBIG) instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
tensors, said = {"w": torch.zeros(10_000)}, {}
def json_dump(path):
    with open(path, "w") as handle:
        json.dump(list(range(10_000)), handle)
writers = {"torch.save": lambda path: torch.save(tensors, path), "safetensors": lambda path: save_file(tensors, path)}
for name, write in {**writers, "json": json_dump}.items():
    try:
        write(os.path.join(sys.argv[1], name))
        said[name] = "wrote it"
    except Exception as err:
        said[name] = [type(err).__name__, write_failure(err)]
print(json.dumps(said))
"""


def test_real_writers_stopped_part_way_are_recognised(tmp_path):
    """The writers' own errors when a write stops part-way, made real by a file size limit (RLIMIT_FSIZE: the
    writes fail with EFBIG, as with ENOSPC on a full disk), in a child: torch.save's RuntimeError, safetensors'
    SafetensorError and Python's OSError are each a write failure (`write_failure`), so the message patterns follow
    the installed versions."""
    done = subprocess.run(
        [PYTHON, "-c", REAL_WRITERS, str(tmp_path)], env=subprocess_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(isinstance(result, list) for result in said.values()), said  # each write failed
    assert [kind for kind, _ in said.values()] == ["RuntimeError", "SafetensorError", "OSError"], said
    assert all(reason for _, reason in said.values()), said
    assert "File too large" in said["json"][1] and "File too large" in said["safetensors"][1], said
    # and not everything is: a bug keeps its traceback
    assert checkpoints.write_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert checkpoints.write_failure(KeyError("optimizer")) is None


FINAL_FILES = ("config.json", "model.safetensors", "README.md", "all_results.json", "tokenizer.json")


def stop_final_write(monkeypatch, writer: str) -> None:
    """The disk fills while the final folder's weights, card or results are written (wherever they are written)."""
    if writer == "weights":
        return stop_weights(monkeypatch, lambda path: "checkpoint-" not in path)
    if writer == "card":
        write_text = Path.write_text

        def stopped(self, data, *args, **kwargs):
            if self.name == "README.md":  # only final folders have cards
                half_written(self, data.encode(), OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self)))
            return write_text(self, data, *args, **kwargs)

        return monkeypatch.setattr(Path, "write_text", stopped)
    dump = json.dump

    def stopped_dump(obj, handle, *args, **kwargs):
        if str(getattr(handle, "name", "")).endswith("all_results.json"):
            handle.write(json.dumps(obj)[:20])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)
        return dump(obj, handle, *args, **kwargs)

    monkeypatch.setattr(json, "dump", stopped_dump)


@pytest.mark.parametrize("writer", ["weights", "card", "results"])
def test_a_full_disk_while_writing_the_final_folder_leaves_the_old_one_whole(
    tmp_path, tokenizer_dir, capsys, monkeypatch, writer
):
    """Issue 40, item 2: before, a full disk while the final folder was written was a traceback (exit 1) that left
    `config.json` and the modeling files at the top level without weights: a folder that looks like a model and is
    not. Now the folder is written aside and moved in whole: one line, exit 2, the earlier final folder byte for
    byte as it was, and the same line run again (disk freed) writes the new one from the last checkpoint."""
    out = tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 4)) == 0
    before = {name: (out / name).read_bytes() for name in FINAL_FILES}
    stop_final_write(monkeypatch, writer)
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line.startswith(f"error: could not write the final model to {out} ("), err
    assert "No space left on device" in line and f"the trained weights are in {out / 'checkpoint-6'}" in line, line
    assert {name: (out / name).read_bytes() for name in FINAL_FILES} == before
    assert not (out / ".final-partial").exists() and verify(out / "checkpoint-6") is None
    monkeypatch.undo()
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0
    final, checkpoint = load_file(out / "model.safetensors"), load_file(out / "checkpoint-6" / "model.safetensors")
    assert all(torch.equal(final[k], checkpoint[k]) for k in checkpoint)
    assert json.loads((out / "all_results.json").read_text())["train_loss"] > 0
    assert f'from_pretrained("{out}")' in (out / "README.md").read_text()  # the card names the folder, not aside


def test_written_files_follow_the_umask(tmp_path, tokenizer_dir):
    """Before: model.safetensors was written 0600 (safetensors' own mode), whatever the umask."""
    old = os.umask(0o002)
    try:
        assert cli.main(argv(tokenizer_dir, tmp_path / "out", 2)) == 0
    finally:
        os.umask(old)
    for path in (tmp_path / "out" / "model.safetensors", tmp_path / "out" / "checkpoint-2" / "model.safetensors"):
        assert path.stat().st_mode & 0o777 == 0o664, (path, oct(path.stat().st_mode))


# -- 13: another process count ---------------------------------------------------------------------------------------
def test_another_process_count_is_refused_where_the_examples_would_change(tmp_path, tokenizer_dir, capsys):
    """Issue 51: another process count resumes when the global batch is held (tests/test_multiprocess.py trains
    it); where the steps would read other examples (another global batch, a stream) it is one line naming why."""
    out = tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 2)) == 0
    mark_complete(out / "checkpoint-2", 2, world_size=2)  # as a 2-process run marks it
    capsys.readouterr()
    for flags, why in [
        (["--global_batch_size", "4"], "its global batch was 8 and this run's is 4 (pass --global_batch_size 8)"),
        (["--streaming"], "a stream is shared out by process"),
    ]:
        assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last", *flags)) == 2
        err = capsys.readouterr().err.strip()
        line = err.splitlines()[-1]
        assert "Traceback" not in err and line.startswith(f"error: {out / 'checkpoint-2'} was saved by a run of 2"), (
            err
        )
        assert "2 processes and this run has 1" in line and why in line and "--nproc_per_node 2" in line, line
    with pytest.raises(BertologyError, match="2 process"):  # the marker's own check, for callers that want it
        check_checkpoint(out / "checkpoint-2", world_size=1)
    check_checkpoint(out / "checkpoint-2", world_size=2)


# -- 2, 3, 12: deaths inside a save and inside rotation -------------------------------------------------------------
DIE_AT = """
import os, sys, shutil, torch
from hf_bertology import cli
from hf_bertology.training import checkpoints
point, step = sys.argv[1], sys.argv[2]
if point != "rotate":  # die as checkpoint-STEP's file POINT* is saved (optimizer.pt: after the weights)
    save = torch.save
    def dying(obj, f, *a, **k):
        if f"checkpoint-{step}" in str(f) and os.path.basename(str(f)).startswith(point):
            os._exit(9)
        return save(obj, f, *a, **k)
    torch.save = dying
else:  # die in the middle of deleting an old checkpoint
    rmtree = shutil.rmtree
    def dying_rmtree(path, *a, **k):
        os.remove(os.path.join(path, "model.safetensors"))
        os._exit(9)
    checkpoints.shutil.rmtree = dying_rmtree
sys.exit(cli.main(sys.argv[3:]))
"""


def die_at(point: str, step: int, args: list[str]) -> None:
    done = subprocess.run(
        [PYTHON, "-c", DIE_AT, point, str(step), *args], env=subprocess_env(), cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 9, done.stderr[-3000:]


def test_killed_while_saving_again_over_a_complete_checkpoint(tmp_path, tokenizer_dir, capsys):
    """A run resumed from checkpoint-2 reaches step 4 again and dies saving it over the complete checkpoint-4
    (before: the old marker stayed over a mix of new weights and old optimizer, and that mix was resumed).
    The old checkpoint-4 is removed before the new one is written; `last` resumes from checkpoint-2; the end equals
    an uninterrupted run."""
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert cli.main(argv(tokenizer_dir, out, 4, "--save_total_limit", "5")) == 0
    shutil.copytree(out, reference)  # the same run resumed from checkpoint-2 without dying
    resume_2 = ("--resume_from_checkpoint", str(reference / "checkpoint-2"))
    assert cli.main(argv(tokenizer_dir, reference, 6, "--save_total_limit", "5", *resume_2)) == 0
    die_at("optimizer.pt", 4, argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", str(out / "checkpoint-2")))
    assert verify(out / "checkpoint-4") is not None and last_complete_checkpoint(out) == out / "checkpoint-2"
    assert cli.main(argv(tokenizer_dir, out, 6, "--resume_from_checkpoint", "last")) == 0
    expected, got = load_file(reference / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_killed_while_rotating(tmp_path, tokenizer_dir):
    """A death in the middle of deleting an old checkpoint leaves a folder that never verifies, and the newest
    complete one untouched."""
    out = tmp_path / "out"
    die_at("rotate", 6, argv(tokenizer_dir, out, 6))
    # checkpoint-6 was marked, then rotation started on checkpoint-2 and died half-way
    assert verify(out / "checkpoint-2") is not None
    assert last_complete_checkpoint(out) == out / "checkpoint-6"
    assert cli.main(argv(tokenizer_dir, out, 8, "--resume_from_checkpoint", "last")) == 0
    assert [p.name for p in checkpoints.list_checkpoints(out)] == ["checkpoint-6", "checkpoint-8"]


def test_an_unmarked_first_checkpoint_is_not_resumed(tmp_path, tokenizer_dir, capsys):
    """Item 12: the run's only checkpoint was cut off after its weights and trainer_state.json, before the collator's
    RNG states and the marker (before: a fallback took it for complete, and the run ended with other weights):
    `last` starts over, saying why."""
    out = tmp_path / "out"
    die_at("collator_rng_state", 2, argv(tokenizer_dir, out, 4))
    assert (out / "checkpoint-2" / "trainer_state.json").is_file() and not (out / "checkpoint-2" / MARKER).exists()
    capsys.readouterr()
    assert cli.main(argv(tokenizer_dir, out, 2, "--resume_from_checkpoint", "last")) == 0
    err = capsys.readouterr().err
    assert "skipped checkpoint-2: no completion marker" in err and "training from scratch" in err, err
    assert verify(out / "checkpoint-2") is None


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("fcntl locks and os._exit deaths are POSIX")


# -- 14: node-local output folders ------------------------------------------------------------------------------------
NODE_LOCAL = """
import json, os, sys
from hf_bertology import cli
argv = [arg.replace("NODE", os.environ["RANK"]) for arg in json.loads(sys.argv[1])]
sys.exit(cli.main(["pretrain", *argv]))
"""


def test_node_local_output_folders_are_refused(tmp_path, tokenizer_dir):
    """Two processes whose `--output_dir` is not one folder (as two nodes each writing their own disk; here each
    rank gets its own path): every process stops with one line before reading the corpus, nothing is written."""
    worker = tmp_path / "node_local.py"
    worker.write_text(NODE_LOCAL)
    args = argv(tokenizer_dir, tmp_path / "node-NODE", 2, "--ddp_backend", "gloo")[1:]
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*launcher, str(worker), json.dumps(args)],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    # one line per process (their lines may interleave); the only traceback is the launcher's ChildFailedError
    said = re.findall(
        r"error: --output_dir \S+ is not one folder for all 2 processes: .*? shared filesystem", done.stderr
    )
    # no frame of our code (a traceback through the package the children import), whatever the clone's folder is named
    assert len(said) == 2 and str(SRC / "hf_bertology") not in done.stderr, done.stderr[-3000:]
    for rank in (0, 1):
        assert not checkpoints.list_checkpoints(tmp_path / f"node-{rank}")


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_on_one_process(tmp_path, tokenizer_dir, capsys):
    """Item 13 end to end: a real 2-process run (torchrun, gloo) marks its checkpoints with world size 2 (rank 0
    digests rank 1's RNG file too); resuming it with 1 process holds the global batch and says so (issue 51;
    refused before)."""
    worker = tmp_path / "launch.py"
    worker.write_text(NODE_LOCAL)
    out = tmp_path / "out"
    args = argv(tokenizer_dir, out, 2, "--ddp_backend", "gloo")[1:]
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*launcher, str(worker), json.dumps(args)], env=subprocess_env(), cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    marker = json.loads((out / "checkpoint-2" / MARKER).read_text())
    assert marker["world_size"] == 2 and {"rng_state_0.pth", "rng_state_1.pth"} <= set(marker["files"])
    assert cli.main(argv(tokenizer_dir, out, 4, "--resume_from_checkpoint", "last")) == 0
    said = capsys.readouterr().err
    assert "saved by 2 processes, on 1 process: the global batch 8 is held" in said, said[-3000:]
