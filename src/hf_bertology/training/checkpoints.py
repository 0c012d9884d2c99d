"""Run folders and checkpoints: what makes a checkpoint complete, which one `last` resumes, which ones rotate away,
and who may write into an output folder. The one place that decides "is this checkpoint complete" (`verify`).

- `mark_complete` writes `checkpoint_complete.json` (the step, the processes, every file's size and SHA-256) once
  every process has written its files; `verify` says why a folder is not complete; `newest_complete` is `last`.
- `rotate` deletes by step, never the newest complete checkpoint.
- `RunLock` (an `fcntl` lock) keeps a second run out of a live run's folder; `check_shared_folder` has every process
  of a job see one folder; `apply_umask` gives weights the user's file mode.

Why the stock Trainer's checkpoints are not trusted, and what survives what: docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time
import weakref
from contextlib import contextmanager
from pathlib import Path

from ..utils import BertologyError, logger

MARKER = "checkpoint_complete.json"
LOCK_NAME = ".bertology.lock"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_CHUNK = 1 << 20


# -- what a checkpoint holds ----------------------------------------------------------------------------------------
def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """`checkpoint-N` folders of `output_dir`, by step (not by modification time)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found)]


def step_of(checkpoint: str | os.PathLike) -> int:
    match = _CHECKPOINT.match(Path(checkpoint).name)
    return int(match.group(1)) if match else -1


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    """Every file under `folder` (relative, sorted), except the marker and its temporary copy."""
    names = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(name for name in names if name not in (MARKER, MARKER + ".tmp"))


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not possible everywhere (Windows); the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def apply_umask(folder: str | os.PathLike) -> None:
    """Give the files under `folder` the mode a plain `open()` would (0666 minus the umask): safetensors and
    `tempfile` write theirs 0600, so a run folder shared with a group could not be read by it."""
    mask = os.umask(0)
    os.umask(mask)
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~mask)


def mark_complete(folder: str | os.PathLike, step: int, world_size: int) -> None:
    """Write `folder`'s marker: the step, the process count and every file's size and SHA-256. Call it once every
    process has written its part; the marker is renamed into place whole or not at all."""
    folder = Path(folder)
    apply_umask(folder)
    files = {
        name: {"bytes": (folder / name).stat().st_size, "sha256": file_digest(folder / name)}
        for name in _files(folder)
    }
    tmp = folder / (MARKER + ".tmp")
    with open(tmp, "w") as handle:
        json.dump({"global_step": step, "world_size": world_size, "files": files}, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, folder / MARKER)
    fsync_dir(folder)


def read_marker(folder: str | os.PathLike) -> dict | None:
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def verify(folder: str | os.PathLike) -> str | None:
    """Why `folder` is not a complete checkpoint (one phrase naming the file), or None when it is: its marker
    exists, is for its step, and every file it lists is there with its size and digest, and no other file."""
    folder = Path(folder)
    if not (folder / MARKER).is_file():
        return "no completion marker (cut off while saving, or not written by bertology pretrain)"
    marker = read_marker(folder)
    if marker is None:
        return f"its {MARKER} is unreadable"
    files = marker.get("files")
    if not isinstance(files, dict):
        return f"its {MARKER} lists no file digests (written by an older hf_bertology)"
    if marker.get("global_step") != step_of(folder):
        return f"its {MARKER} is for step {marker.get('global_step')}"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected.get("bytes"):
            return f"{name} has {size} bytes, {expected.get('bytes')} when it was saved (truncated or rewritten)"
        if file_digest(path) != expected.get("sha256"):
            return f"{name} changed after it was saved (damaged, or written over by another run)"
    extra = [name for name in _files(folder) if name not in files]
    if extra:
        return f"{extra[0]} was written after the checkpoint was complete (another run saving into it?)"
    return None


def newest_complete(output_dir: str | os.PathLike) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint of `output_dir` (by step) and the newer ones skipped, with the reason."""
    skipped = []
    for checkpoint in reversed(list_checkpoints(output_dir)):
        reason = verify(checkpoint)
        if reason is None:
            return checkpoint, skipped
        skipped.append((checkpoint, reason))
    return None, skipped


def last_complete_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint in `output_dir`, or None (see `newest_complete`)."""
    return newest_complete(output_dir)[0]


def check_checkpoint(checkpoint: str | os.PathLike, world_size: int | None = None) -> None:
    """One BertologyError line if `checkpoint` cannot be resumed: incomplete or damaged (`verify`), or saved by
    another number of processes (the global batch and which examples each process reads would change)."""
    reason = verify(checkpoint)
    if reason is not None:
        raise BertologyError(f"{checkpoint}: {reason}; pass an earlier checkpoint or `last`")
    saved = (read_marker(checkpoint) or {}).get("world_size")
    if world_size is not None and saved is not None and saved != world_size:
        raise BertologyError(
            f"{checkpoint} was saved by a run of {saved} process(es) and this run has {world_size}: resume it with "
            f"{saved} (e.g. torchrun --nproc_per_node {saved}); another count changes the global batch "
            "(per-device batch × processes × accumulation) and which examples each process reads. To go on with "
            f"{world_size}, start a new run from its weights (--model_name_or_path {checkpoint}) with a "
            "--per_device_train_batch_size or --gradient_accumulation_steps that keeps the global batch"
        )


def finished_step(checkpoint: str | os.PathLike, max_steps: int) -> int | None:
    """The step `checkpoint` was saved at if it has already reached `max_steps` (> 0), else None."""
    try:
        step = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if max_steps > 0 and step >= max_steps else None


def prepare_folder(folder: str | os.PathLike) -> None:
    """Before saving `checkpoint-N` again (a run resumed from an earlier checkpoint reaches N a second time): remove
    the old folder, so a save cut off midway cannot leave the old marker over a mix of old and new files."""
    folder = Path(folder)
    if folder.exists():
        (folder / MARKER).unlink(missing_ok=True)
        fsync_dir(folder)
        shutil.rmtree(folder)


def rotate(
    output_dir: str | os.PathLike, limit: int | None, keep: tuple = (), just_marked: Path | None = None
) -> list[Path]:
    """Delete the oldest checkpoints (by step) beyond `limit`; never the newest complete one nor those in `keep`
    (the best model's). `just_marked`: the checkpoint the caller has just marked, if it is the newest (its files
    are not read again). The deleted folders."""
    if not limit or limit <= 0:
        return []
    checkpoints = list_checkpoints(output_dir)
    if len(checkpoints) <= limit:
        return []
    protected = set(checkpoints[-limit:]) | {Path(p) for p in keep if p}
    if just_marked is not None:  # this run's newest complete checkpoint, even below an older run's newer ones
        protected.add(Path(just_marked))
    if just_marked is not None and Path(just_marked) == checkpoints[-1]:
        newest = checkpoints[-1]
    else:
        newest = next((p for p in reversed(checkpoints) if verify(p) is None), None)
    if newest is not None:
        protected.add(newest)
    deleted = [p for p in checkpoints if p not in protected]
    for checkpoint in deleted:
        logger.info("save_total_limit: deleting %s", checkpoint)
        shutil.rmtree(checkpoint, ignore_errors=True)
    return deleted


# What the writers that are not Python's own raise when a write fails part-way (a full disk, a quota, a file size
# limit): torch.save a RuntimeError ("unexpected pos 576 vs 534", "basic_ios::clear: iostream error", "file write
# failed"), safetensors a SafetensorError ("I/O error: No space left on device (os error 28)").
_WRITE_STOPPED = re.compile(r"unexpected pos|iostream error|file write failed|I/O error|os error \d+")


def write_failure(err: BaseException) -> str | None:
    """What went wrong, in a phrase, if `err` is a write the environment stopped (disk full, quota, permissions, a
    file size limit), whichever writer raised it; None for anything else (a bug keeps its traceback)."""
    if isinstance(err, OSError):
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        return f"{where}{err.strerror or err}"
    text = " ".join(str(err).split())
    if isinstance(err, RuntimeError) or type(err).__name__ == "SafetensorError":
        if _WRITE_STOPPED.search(text):
            return f"a write stopped part-way: {text.split('] . ')[-1]}; a full disk or a quota?"
    return None


def save_failed(folder: Path, err: BaseException) -> BertologyError:
    """The one line for a save that failed (disk full, quota, permissions: `write_failure`); the cut-off folder is
    removed (it frees the space, and it holds no marker anyway)."""
    shutil.rmtree(folder, ignore_errors=True)
    previous = last_complete_checkpoint(folder.parent)
    kept = f"the previous complete checkpoint, {previous.name}, is intact" if previous else "no earlier checkpoint"
    return BertologyError(
        f"could not save {folder.name} ({write_failure(err) or err}); {kept}: free some space and go on with "
        "--resume_from_checkpoint last"
    )


# -- one run per folder ------------------------------------------------------------------------------------------------
_HELD: weakref.WeakSet = weakref.WeakSet()  # the locks this process holds


def _forget_locks_in_child() -> None:
    """In a forked child (a DataLoader worker): close the copies of the held locks' descriptors, so that the child
    does not keep a dead run's folder locked (a flock belongs to the open file, which fork shares); closing a copy
    does not unlock the parent's."""
    for lock in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(lock._fd)
        lock._fd, lock._made = None, False
    _HELD.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fcntl either
    os.register_at_fork(after_in_child=_forget_locks_in_child)


class RunLock:
    """An exclusive lock on an output folder for the lifetime of a run (`with RunLock(dir):`).

    `fcntl.flock` on `.bertology.lock` (a hidden file, which pushes to the Hub leave out): the kernel drops it when the
    process dies, however it dies, so a lock file left by a killed run is stale by construction and is taken over,
    with a line naming that run (its pid, host and start time, which the file holds). Where `fcntl` does not exist
    (Windows) the folder is not locked. A folder the lock made and the run left empty (refused before writing
    anything) is removed with the lock. Forked children (DataLoader workers) do not hold it (`_forget_locks_in_child`).
    """

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / LOCK_NAME
        self._fd: int | None = None
        self._made = False  # whether acquiring made the folder: a run refused before writing leaves none behind

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            logger.warning("no fcntl on this platform: %s is not locked against a second run", self.path.parent)
            return
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise BertologyError(f"--output_dir {folder} is a file, not a folder")
        self._made = not folder.exists()
        for _ in range(3):  # the holder may remove the file between our open and our lock: open it again
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as err:
                raise BertologyError(f"cannot write to --output_dir {folder}: {err.strerror or err}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise BertologyError(
                    f"{self.path.parent} is in use by another run ({self._describe() or 'holder unknown'}): wait for "
                    "it to end, or give another --output_dir"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise BertologyError(f"could not lock {self.path}: it keeps being replaced")
        previous = os.read(fd, 4096).decode(errors="replace").strip()
        if previous:
            logger.warning("%s: taking over the lock of a run that is no longer running (%s)", self.path, previous)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
        os.fsync(fd)
        self._fd = fd
        _HELD.add(self)

    def _describe(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # before unlocking: a run that opens it after this gets a new file
        os.close(self._fd)
        self._fd = None
        _HELD.discard(self)
        if self._made:
            with contextlib.suppress(OSError):  # not empty: the run wrote into it
                self.path.parent.rmdir()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def check_shared_folder(output_dir: str | os.PathLike) -> None:
    """Every process of a multi-process job must write one folder: each writes a probe file named with a token rank
    0 draws, and each must see every other's. Node-local output folders (each node its own disk) are refused in one
    line on every process: one node would resume while the other starts over, and a checkpoint would be marked
    complete from the mixed run."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    token = [os.urandom(8).hex() if rank == 0 else None]
    dist.broadcast_object_list(token, src=0)
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".probe-{token[0]}-{rank}"
    probe.write_text(socket.gethostname())
    dist.barrier()
    missing = [r for r in range(world) if not (folder / f".probe-{token[0]}-{r}").exists()]
    seen: list = [None] * world
    dist.all_gather_object(seen, (rank, socket.gethostname(), missing))
    dist.barrier()
    probe.unlink(missing_ok=True)
    blind = [(r, host, miss) for r, host, miss in seen if miss]
    if blind:
        r, host, miss = blind[0]
        raise BertologyError(
            f"--output_dir {output_dir} is not one folder for all {world} processes: process {r} (on {host}) does not "
            f"see the files of process(es) {', '.join(map(str, miss))}; a multi-node run needs an output folder on a "
            "shared filesystem (see docs/reliability.md)"
        )


@contextmanager
def run_lock(output_dir: str | os.PathLike, is_main: bool):
    """The output folder, checked to be one folder for every process (`check_shared_folder`) and locked by the
    main process (`RunLock`) for the run's lifetime; a refusal is raised on every process."""
    import torch.distributed as dist

    check_shared_folder(output_dir)
    lock, refusal = RunLock(output_dir), [None]
    if is_main:
        try:
            lock.acquire()
        except BertologyError as err:
            refusal = [str(err)]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:
        raise BertologyError(refusal[0])
    try:
        yield lock
    finally:
        lock.release()
