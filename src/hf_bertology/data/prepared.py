"""Prepared data kept once: a trained tokenizer or a run's examples, in a folder named by the hash of what made it.

    store = PreparedStore(root)                      # default: HF_DATASETS_CACHE/hf_bertology/prepared
    key = prepared_key("examples", corpus=..., tokenizer=tokenizer_identity(tok), settings=..., seed=42)
    folder = store.find("examples", key)             # None until a complete entry exists
    folder = store.write("examples", key, fill)      # fill(tmp_folder) writes it; renamed into place once whole

An entry is complete when its folder exists under its final name: it is filled in a temporary folder beside it,
its `prepared.json` written last, and renamed (atomic on one file system), so an interrupted run leaves only a
`.tmp-*` folder that nothing reads. The key holds the recipe's data fields, the tokenizer, the corpus's identity and
the data code itself (this package's sources, `datasets` and `tokenizers` versions), so a change to any of them
prepares again. docs/pretraining.md ("Prepared once").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import datasets
import tokenizers

from ..utils import BertologyError, logger

MANIFEST = "prepared.json"


def default_root() -> Path:
    """`HF_DATASETS_CACHE/hf_bertology/prepared`: beside the `datasets` cache that run_mlm-style scripts fill."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "hf_bertology" / "prepared"


def code_identity(*sources: str | os.PathLike) -> str:
    """What the data code is: this package's sources, any further `sources` (the caller's module that runs the
    steps), and the versions of `datasets` and `tokenizers`."""
    digest = hashlib.sha256(f"{datasets.__version__} {tokenizers.__version__}".encode())
    for source in [*sorted(Path(__file__).parent.glob("*.py")), *map(Path, sources)]:
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def tokenizer_identity(tokenizer) -> str:
    """A tokenizer's identity: its class, special tokens and whole `tokenizers` pipeline (vocabulary, merges,
    normaliser, pre-tokenizer), or `datasets`' hash of the object for a tokenizer without a Rust backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    described = backend.to_str() if backend is not None else datasets.fingerprint.Hasher.hash(tokenizer)
    specials = {name: getattr(tokenizer, f"{name}_token_id", None) for name in ("cls", "sep", "bos", "eos", "pad")}
    payload = json.dumps([type(tokenizer).__name__, specials, described], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def files_identity(paths) -> str:
    """Local files as their absolute paths, sizes and modification times (as `datasets` keys its cache)."""
    stats = [(os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]


def prepared_key(kind: str, steps: str | os.PathLike | None = None, **ingredients) -> str:
    """The key of an entry of `kind` ("tokenizer", "examples"): a hash of every ingredient (JSON-able values) and of
    the data code (`code_identity`, with the module `steps` that calls the builders)."""
    code = code_identity(*([steps] if steps else []))
    payload = json.dumps({"kind": kind, "code": code, **ingredients}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


class PreparedStore:
    """Entries `ROOT/KIND-KEY/`, each complete once renamed into place (see the module's docstring)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else default_root()

    def path(self, kind: str, key: str) -> Path:
        return self.root / f"{kind}-{key}"

    def find(self, kind: str, key: str) -> Path | None:
        """The complete entry, or None."""
        folder = self.path(kind, key)
        return folder if (folder / MANIFEST).is_file() else None

    def write(
        self, kind: str, key: str, fill: Callable[[Path], None], manifest: dict | None = None, replace: bool = False
    ) -> Path:
        """Fill a temporary folder with `fill(folder)`, write its manifest last and move it into place. An entry of
        the same key that appeared meanwhile (another node's) is kept; with `replace` (`--overwrite_cache`) an
        existing one is replaced."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{kind}-{key}-", dir=self.root))
        except OSError as err:
            raise BertologyError(f"cannot write prepared data under {self.root}: {err.strerror or err}") from None
        final = self.path(kind, key)
        try:
            fill(scratch)
            (scratch / MANIFEST).write_text(json.dumps({"kind": kind, "key": key, **(manifest or {})}, indent=1))
            if final.exists() and (replace or self.find(kind, key) is None):
                old = Path(tempfile.mkdtemp(prefix=f".tmp-old-{kind}-", dir=self.root))
                os.rename(final, old / "entry")  # out of the way in one step, then removed
                shutil.rmtree(old, ignore_errors=True)
            try:
                os.rename(scratch, final)
            except OSError:  # a complete entry of the same key is there already: the same data
                if self.find(kind, key) is None:
                    raise
                shutil.rmtree(scratch, ignore_errors=True)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        logger.info("prepared %s once: %s", kind, final)
        return final
