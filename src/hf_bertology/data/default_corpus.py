"""The corpus `bertology pretrain` reads when none is given: WikiText-2 (raw), embedded in the package.

The validation and test files of WikiText-2 raw (Merity et al., 2016; CC BY-SA 3.0, see `wikitext2/NOTICE`) ship
xz-compressed (700 KB). The first run decompresses them once into a cache folder and checks each file's sha256
against the official archive's members, so a damaged install fails in one line instead of training on garbage.
Training reads `wiki.test.raw`, evaluation `wiki.valid.raw`: the same text `run_mlm.py`'s README uses, and a
held-out split, offline, on any machine. The training file of WikiText-2 (10.9 MB) is not embedded.
"""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

from ..utils import BertologyError

PACKAGE_DIR = Path(__file__).with_name("wikitext2")
NAME = "WikiText-2 (raw; embedded: test split for training, validation split for evaluation)"
HUB_ID, HUB_CONFIG = "wikitext", "wikitext-2-raw-v1"  # the same text on the Hub: what a model card names
# sha256 of the decompressed members of the official wikitext-2-raw-v1.zip (also in wikitext2/NOTICE).
SHA256 = {
    "wiki.test.raw": "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
    "wiki.valid.raw": "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
}
TRAIN, VALIDATION = "wiki.test.raw", "wiki.valid.raw"


def cache_dir() -> Path:
    """Where the decompressed files live: $HF_BERTOLOGY_CACHE/wikitext-2-raw, else under $XDG_CACHE_HOME (default
    ~/.cache)/hf_bertology."""
    root = os.environ.get("HF_BERTOLOGY_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hf_bertology"
    return Path(root) / "wikitext-2-raw"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_corpus_file(name: str) -> Path:
    """The decompressed file `name` (`wiki.test.raw` or `wiki.valid.raw`), written once into `cache_dir()`; a
    temporary file renamed into place, so two runs starting together never read half a file."""
    if name not in SHA256:
        raise ValueError(f"not an embedded file: {name!r}")
    target = cache_dir() / name
    if target.is_file() and _sha256(target) == SHA256[name]:
        return target
    source = PACKAGE_DIR / f"{name}.xz"
    if not source.is_file():
        raise BertologyError(f"the embedded corpus is missing from the installed package ({source}); reinstall it")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{name}.{os.getpid()}.partial")
    try:
        with lzma.open(source) as compressed, open(partial, "wb") as out:
            for block in iter(lambda: compressed.read(1 << 20), b""):
                out.write(block)
    except (lzma.LZMAError, EOFError) as err:
        partial.unlink(missing_ok=True)
        raise BertologyError(f"the embedded corpus {source} is damaged ({err}); reinstall the package") from None
    if _sha256(partial) != SHA256[name]:
        partial.unlink(missing_ok=True)
        raise BertologyError(f"the embedded corpus {source} does not match its sha256; reinstall the package")
    os.replace(partial, target)
    return target


def default_corpus_files() -> tuple[list[str], list[str]]:
    """([training file], [validation file]) of the embedded corpus, decompressed."""
    return [str(default_corpus_file(TRAIN))], [str(default_corpus_file(VALIDATION))]
