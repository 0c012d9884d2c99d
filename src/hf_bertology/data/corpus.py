"""Reading a corpus into documents: local files (plain text, WikiExtractor, jsonl), Hub datasets, streaming.

Every source becomes a `datasets` dataset with one column, `text`, one document per row. Local files are read
line by line in binary, so a file of any size (or a single 50 MB line) is read with bounded memory, and invalid
input fails with one line naming the file and byte offset.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import socket
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import huggingface_hub

from ..utils import BertologyError, logger

TEXT_SUFFIXES = {".txt", ".raw", ".text", ".tokens", ""}
JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
_DOC_START = re.compile(rb"^<doc[ >]")
# WikiText's article title line: ` = Title = ` (section headings have two or more `=`: ` = = Section = = `).
_WIKITEXT_TITLE = re.compile(r"^ = [^=].* = $")
_WIKITEXT_HEADING = re.compile(r"^ (= )+.* (= ?)+$")
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+(?=[\"'“‘(\[]*[A-Z0-9À-ÖØ-Þ])")
MAX_SENTENCE_CHARS = 2000  # longer "sentences" (tables, a 50 MB line) are cut at whitespace near this length


# Files a corpus directory often holds beside its text (checksums, licence, readme): not training text.
NOT_CORPUS_NAMES = {
    "sha256sums",
    "sha1sums",
    "md5sums",
    "checksums",
    "license",
    "licence",
    "copying",
    "readme",
    "notice",
}


def is_corpus_file(path: Path) -> bool:
    """Whether a file found in a directory is corpus text: a text or JSON Lines suffix, or none (WikiExtractor's
    `wiki_00`), and not a known companion file (`SHA256SUMS`, `LICENSE`)."""
    if path.name.startswith(".") or path.stem.lower() in NOT_CORPUS_NAMES:
        return False
    return path.suffix.lower() in TEXT_SUFFIXES | JSON_SUFFIXES


def expand_paths(paths: str | Sequence[str]) -> list[Path]:
    """Files named by `paths`: files, globs and directories. A directory is searched recursively for corpus files
    (`is_corpus_file`: hidden files, a `README.md` or `SHA256SUMS` beside the text are skipped, and logged); a file
    named or matched by a glob is always read."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for entry in paths:
        entry = str(entry)
        matches = sorted(glob.glob(entry, recursive=True)) if glob.has_magic(entry) else [entry]
        if not matches:
            raise BertologyError(f"no file matches {entry!r}")
        for match in matches:
            path = Path(match)
            if path.is_dir():
                found = sorted(p for p in path.rglob("*") if p.is_file())
                kept = [p for p in found if is_corpus_file(p)]
                skipped = [p.name for p in found if not is_corpus_file(p) and not p.name.startswith(".")]
                if not kept:
                    detail = f" (skipped: {', '.join(skipped[:5])})" if skipped else ""
                    raise BertologyError(f"directory {path} holds no text or JSON Lines files{detail}")
                if skipped:
                    logger.info("%s: skipped %d files that are not corpus text: %s", path, len(skipped), skipped[:5])
                files.extend(kept)
            elif path.is_file():
                files.append(path)
            else:
                raise BertologyError(f"training file not found: {path}")
    for path in files:
        if not os.access(path, os.R_OK):
            raise BertologyError(f"cannot read {path}: permission denied")
    return files


def _check_binary(path: Path) -> None:
    with open(path, "rb") as handle:
        head = handle.read(8192)
    if b"\x00" in head:
        raise BertologyError(f"{path} looks like a binary file (NUL bytes in its first 8 KiB), not text")


def _decoded_lines(path: Path) -> Iterator[str]:
    """Lines of `path` as text; non-UTF-8 bytes raise an error naming the file and the byte offset."""
    offset = 0
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise BertologyError(
                    f"{path} is not valid UTF-8: byte {offset + err.start} ({raw[err.start : err.start + 1]!r}); "
                    "convert it, e.g. `iconv -f latin1 -t utf-8`"
                ) from None
            offset += len(raw)


def detect_format(path: Path) -> str:
    """'jsonl', 'wikiextractor' (`<doc ...>` blocks), 'wikitext' (WikiText's ` = Title = ` articles) or 'text'."""
    if path.suffix.lower() in JSON_SUFFIXES:
        return "jsonl"
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                if _DOC_START.match(raw.lstrip()):
                    return "wikiextractor"
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                return "wikitext" if _WIKITEXT_TITLE.match(line) else "text"
    return "text"


def read_documents(
    path: Path, doc_separator: str = "blank_line", text_field: str = "text", skip_title: bool = True
) -> Iterator[str]:
    """Documents of one file.

    - text: `doc_separator="blank_line"` (a blank line ends a document; lines inside are joined with newlines) or
      `"line"` (one document per line).
    - WikiExtractor: `<doc ...>` ... `</doc>`; the first line (the article title) is dropped when `skip_title`.
    - WikiText (`wiki.*.raw`): an article runs from one ` = Title = ` line to the next; its paragraphs are joined
      with newlines, title and section headings (` = = Section = = `) dropped, as run_mlm.py's lines would be
      without the headings. WikiText's own tokenisation (` @-@ `, spaces around punctuation) is kept.
    - jsonl: one JSON object per line, the document in `text_field`.
    """
    if doc_separator not in ("blank_line", "line"):
        raise BertologyError(f"doc_separator must be 'blank_line' or 'line', got {doc_separator!r}")
    _check_binary(path)
    kind = detect_format(path)
    lines = _decoded_lines(path)
    if kind == "jsonl":
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise BertologyError(f"{path}:{number}: invalid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise BertologyError(f"{path}:{number}: a JSON {type(record).__name__}, not an object (JSON Lines)")
            if text_field not in record:
                raise BertologyError(f"{path}:{number}: no {text_field!r} field (set --text_column)")
            text = record[text_field]
            if text is None:  # a record without text: nothing to train on (not the string "None")
                continue
            if not isinstance(text, str):
                raise BertologyError(f"{path}:{number}: {text_field!r} is a {type(text).__name__}, not a string")
            yield text
        return
    if kind == "wikiextractor":
        body: list[str] | None = None
        for line in lines:
            if line.startswith("<doc"):
                body = []
            elif line.startswith("</doc>"):
                if body:
                    yield "\n".join(body[1:] if skip_title else body)
                body = None
            elif body is not None and line.strip():
                body.append(line.strip())
        if body:  # a file cut off inside its last article (no `</doc>`): keep what is there
            logger.warning("%s: the last <doc> has no </doc> (a truncated file?); its text is kept", path)
            yield "\n".join(body[1:] if skip_title else body)
        return
    if kind == "wikitext":
        article: list[str] = []
        for line in lines:
            line = line.rstrip("\n")
            if _WIKITEXT_TITLE.match(line):
                if article:
                    yield "\n".join(article)
                article = []
            elif line.strip() and not _WIKITEXT_HEADING.match(line):
                article.append(line.strip())
        if article:
            yield "\n".join(article)
        return
    if doc_separator == "line":
        for line in lines:
            if line.strip():
                yield line.strip()
        return
    block: list[str] = []
    for line in lines:
        if line.strip():
            block.append(line.strip())
        elif block:
            yield "\n".join(block)
            block = []
    if block:
        yield "\n".join(block)


def _generate(files: list[str], doc_separator: str, text_field: str, fingerprint: str) -> Iterator[dict]:
    # `fingerprint` (sizes and mtimes) only keys the datasets cache, so an edited file is read again.
    for name in files:
        for document in read_documents(Path(name), doc_separator, text_field):
            if document.strip():
                yield {"text": document}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub endpoint answers a TCP connection within `timeout` seconds (False in offline mode). Without
    this check an offline `load_dataset` retries for about 30 s before failing."""
    if huggingface_hub.constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE:
        return False
    url = urllib.parse.urlsplit(huggingface_hub.constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def offline_mode(offline: bool):
    """`datasets`' and `huggingface_hub`'s offline switches on (a cached dataset still loads, a missing one fails at
    once), restored afterwards."""
    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    if offline:
        datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def load_corpus(
    train_files: str | Sequence[str] | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    split: str = "train",
    text_column: str = "text",
    doc_separator: str = "blank_line",
    streaming: bool = False,
    cache_dir: str | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """One document per row in a `text` column, from local files or a Hub dataset.

    Local files are parsed by our reader (formats in `read_documents`) through `Dataset.from_generator`, cached as
    Arrow on disk (keyed by the files' sizes and mtimes) or streamed with `streaming=True`. A Hub dataset is loaded
    with `datasets.load_dataset`; each non-empty row of `text_column` is a document (as run_mlm.py treats lines).
    """
    if bool(train_files) == bool(dataset_name):
        raise BertologyError("give either --train_file or --dataset_name")
    if train_files:
        files = [str(p) for p in expand_paths(train_files)]
        stats = [os.stat(f) for f in files]
        fingerprint = ";".join(f"{f}:{s.st_size}:{s.st_mtime_ns}" for f, s in zip(files, stats))
        kwargs = {
            "files": files,
            "doc_separator": doc_separator,
            "text_field": text_column,
            "fingerprint": fingerprint,
        }
        # `datasets` fails on a generator that yields nothing ("corresponds to no data"): say so in our words.
        if next(_generate(**kwargs), None) is None:
            raise BertologyError(f"the corpus is empty: no text in {', '.join(files)}")
        features = datasets.Features({"text": datasets.Value("string")})
        if streaming:
            return datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs=kwargs)
        try:
            corpus = datasets.Dataset.from_generator(
                _generate, features=features, gen_kwargs=kwargs, cache_dir=cache_dir
            )
        except datasets.exceptions.DatasetGenerationError as err:
            cause = err.__cause__ or err.__context__
            if isinstance(cause, BertologyError):
                raise cause from None
            raise
        except ValueError as err:  # datasets refuses a generator that yields nothing
            if "corresponds to no data" not in str(err):
                raise
            corpus = None
        if corpus is None or len(corpus) == 0:
            raise BertologyError(f"the corpus is empty: no text in {', '.join(files)}")
        logger.info("read %d documents from %d file(s)", len(corpus), len(files))
        return corpus
    offline = not hub_reachable()
    try:
        with offline_mode(offline):
            corpus = datasets.load_dataset(
                dataset_name, dataset_config_name, split=split, streaming=streaming, cache_dir=cache_dir
            )
    except Exception as err:  # offline, unknown name, ...: the user needs one line, not the HTTP stack
        where = "the Hub is unreachable and it is not in the local cache" if offline else f"{type(err).__name__}"
        raise BertologyError(
            f"could not load dataset {dataset_name!r} ({dataset_config_name or 'default'}): {where}; pass a local "
            "corpus (--train_file FILE), or neither flag for the embedded WikiText-2"
        ) from None
    if text_column not in corpus.column_names:
        raise BertologyError(f"dataset {dataset_name!r} has no column {text_column!r} (set --text_column)")
    corpus = corpus.select_columns([text_column])
    if text_column != "text":
        corpus = corpus.rename_column(text_column, "text")
    return corpus.filter(lambda row: bool(row["text"].strip()))


def split_sentences(document: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Sentences of a document: each line is split after `.`/`!`/`?` before a capital or digit.

    A rule-based splitter (no model download; good enough to form NSP/SOP segments, which only need
    sentence-sized units). Pieces longer than `max_chars` are cut at the last whitespace before the limit, so one
    enormous line becomes many bounded pieces.
    """
    sentences: list[str] = []
    for line in document.split("\n"):
        line = line.strip()
        if not line:
            continue
        for sentence in _SENTENCE_END.split(line):
            start = 0  # walk an index: slicing the rest again and again would be quadratic on a 50 MB line
            while len(sentence) - start > max_chars:
                cut = sentence.rfind(" ", start + max_chars // 2, start + max_chars)
                cut = start + max_chars if cut <= start else cut
                sentences.append(sentence[start:cut].strip())
                start = cut
            if sentence[start:].strip():
                sentences.append(sentence[start:].strip())
    return [s for s in sentences if s]
