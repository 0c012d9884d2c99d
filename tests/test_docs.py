"""The README and docs/ pages: every relative link and `#anchor` resolves, and every fenced `bash`/`python` block
parses and runs as written (docs/README.md, "Code blocks that run", says how a page marks a block).

Fast: links and anchors (GitHub's heading slugs), `compile()` of every Python block, `bash -n` of every bash block,
and a run of every unmarked block, page by page, in a scratch folder holding the names the pages use (`corpus.txt`,
`corpus/`, `wiki_00`). Slow (`-m slow`): the unmarked and the `slow` blocks of each page, in order. `skip` blocks
only parse."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

from platform_support import PYTHON, REPO, subprocess_env, write_corpus

SHARED = REPO.parent / "shared"
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<kind>\w+)(?:\s*\((?P<why>.+)\))?\s*-->$")
KINDS = ("slow", "skip")
LINK = re.compile(
    r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^()\s]+(?:\([^()\s]*\))?[^()\s]*)(?:\s+\"[^\"]*\")?\)"
)
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    kind: str  # "run", "slow" or "skip"
    why: str

    def __str__(self) -> str:
        where = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{where}:{self.line} ({self.lang}, {self.kind})"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page (any language), each with the marker of the nearest non-blank line before it."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or not opening["lang"]:
            if opening:  # a fence without a language: skip to its end, it holds nothing we run
                i = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
            i += 1
            continue
        indent = opening["indent"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == indent + "```"), None)
        if end is None:
            raise AssertionError(f"{page}:{i + 1}: a ```{opening['lang']} block that never closes")
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        if before.startswith("<!--") and "docs-test" in before and not marker:
            raise AssertionError(f"{page}:{i}: unreadable docs-test marker {before!r}")
        kind, why = ("run", "") if marker is None else (marker["kind"], marker["why"] or "")
        if kind not in ("run", *KINDS):
            raise AssertionError(f"{page}:{i}: unknown docs-test marker {kind!r} (known: {', '.join(KINDS)})")
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 1, opening["lang"], code, kind, why))
        i = end + 1
    return found


def code_blocks(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.lang in ("bash", "python")]


def parse_error(block: Block) -> str | None:
    """Why the block is not valid code of its language, or None."""
    if block.lang == "python":
        try:
            compile(block.code, str(block), "exec")
        except SyntaxError as error:
            return f"{error.msg} (block line {error.lineno})"
        return None
    done = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True)
    return done.stderr.strip() or None if done.returncode else None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, every character but letters, digits, `_`, `-`
    and spaces removed, spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' slugs (repeated ones numbered `-1`, `-2`, as GitHub does) and
    `<a name=...>`/`id=` targets."""
    seen: dict[str, int] = {}
    found = set(HTML_ID.findall(text))
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        heading = None if in_fence else HEADING.match(line)
        if heading:
            base = slug(heading["text"])
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Relative links (and `#anchors`) of a page, outside code, that name no file or no heading."""
    text = page.read_text(encoding="utf-8") if text is None else text
    prose, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            prose.append(re.sub(r"`[^`]*`", "", line))
    broken = []
    for target in (m["target"].strip("<>") for m in LINK.finditer("\n".join(prose))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading with that anchor in {resolved.name}")
    return broken


# -- the checker itself ------------------------------------------------------------------------------------------


def test_slugs_follow_github():
    """Anchors as GitHub writes them (checked by hand on rendered pages): backticks and punctuation go, `_` and
    `-` stay, non-ASCII letters stay, repeats are numbered."""
    assert slug("The command line and Python") == "the-command-line-and-python"
    assert slug("`make pretrain`") == "make-pretrain"
    assert slug("BERT (`bert-base|large|mini|tiny`)") == "bert-bert-baselargeminitiny"
    assert slug("Documents kept apart (`input_format: packed_documents`)") == (
        "documents-kept-apart-input_format-packed_documents"
    )
    assert slug("Speed: padding-free batches & the GPU step") == "speed-padding-free-batches--the-gpu-step"
    assert slug("Über **bold** [link](x.md)") == "über-bold-link"
    assert anchors("# A\n## A\n```bash\n# A\n```\n### A\n") == {"a", "a-1", "a-2"}


def test_the_checker_finds_broken_links_and_code(tmp_path):
    """A page with a missing file, a missing anchor, a Python block that is not Python, a bash block that is not
    bash and an unknown marker: each is reported; the good link, anchor and blocks are not."""
    (tmp_path / "other.md").write_text("# Other page\n## Its part\n")
    page = tmp_path / "page.md"
    text = (
        "# Title\n\nSee [other](other.md#its-part), [here](#title), [gone](missing.md), [bad](other.md#nope),\n"
        "[web](https://example.com/x#y) and `[code](not-a-link.md)`.\n\n"
        "```python\nprint('ok')\n```\n\n```python\ndef broken(:\n```\n\n"
        "<!-- docs-test: skip (a reason) -->\n```bash\necho ok | tr o O\n```\n\n```bash\nif then fi (\n```\n"
    )
    page.write_text(text)
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading with that anchor in other.md"]
    found = blocks(page)
    assert [(b.lang, b.kind, b.why) for b in found] == [
        ("python", "run", ""),
        ("python", "run", ""),
        ("bash", "skip", "a reason"),
        ("bash", "run", ""),
    ]
    assert [parse_error(b) is None for b in found] == [True, False, True, False]
    with pytest.raises(AssertionError, match="unknown docs-test marker"):
        blocks(page, "<!-- docs-test: later -->\n```bash\nls\n```\n")


# -- the pages -----------------------------------------------------------------------------------------------------


def test_links_and_anchors_resolve():
    broken = [f"{page.relative_to(REPO)}: {problem}" for page in pages() for problem in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_every_code_block_parses():
    """Every `bash` and `python` block, marked or not: Python compiles, bash passes `bash -n`."""
    errors = [f"{block}: {error}" for page in pages() for block in code_blocks(page) if (error := parse_error(block))]
    assert not errors, "\n".join(errors)
    assert sum(len(code_blocks(page)) for page in pages()) >= 20  # the collector finds the pages' blocks


def test_the_readme_fits_on_a_few_screens():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def scratch(tmp_path: Path) -> Path:
    """The folder a page's blocks run in: the names the pages use, a `bertology` and a `python` on the PATH that run
    this checkout, and `../shared` where the checkout has one."""
    work = tmp_path / "work"
    (work / "corpus").mkdir(parents=True)
    write_corpus(work / "corpus.txt", n_docs=40, seed=0)
    write_corpus(work / "corpus" / "a.txt", n_docs=20, seed=1)
    write_corpus(work / "corpus" / "b.txt", n_docs=20, seed=2)
    wiki = SHARED / "data" / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00"
    if wiki.is_file():
        (work / "wiki_00").symlink_to(wiki)
        (tmp_path / "shared").symlink_to(SHARED)
        (work / "glue_data").symlink_to(SHARED / "data" / "glue")
    else:
        write_corpus(work / "wiki_00", n_docs=40, seed=3)
    for name in ("examples", "benchmarks", "src"):
        (work / name).symlink_to(REPO / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("bertology", f'exec "{PYTHON}" -m hf_bertology "$@"'), ("python", f'exec "{PYTHON}" "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IXUSR)
    return work


def run_blocks(page: Path, kinds: tuple[str, ...], tmp_path: Path, timeout: int) -> None:
    work = scratch(tmp_path)
    env = subprocess_env(PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", HF_BERTOLOGY_CACHE=str(tmp_path))
    for block in code_blocks(page):
        if block.kind not in kinds:
            continue
        if block.lang == "python":
            command = [PYTHON, "-c", block.code]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{block} failed:\n{block.code}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    shutil.rmtree(work, ignore_errors=True)


def runnable(kinds: tuple[str, ...]) -> list[Path]:
    return [page for page in pages() if any(block.kind in kinds for block in code_blocks(page))]


@pytest.mark.parametrize("page", runnable(("run",)), ids=lambda page: str(page.relative_to(REPO)))
def test_unmarked_blocks_run(page, tmp_path):
    """The blocks without a marker, in the page's order, as written (a tiny recipe, a few steps, the scratch
    folder's names); they must stay fast: a long block gets `<!-- docs-test: slow (why) -->`."""
    run_blocks(page, ("run",), tmp_path, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("page", runnable(("slow",)), ids=lambda page: str(page.relative_to(REPO)))
def test_slow_blocks_run(page, tmp_path):
    """The `slow` blocks too, in order with the unmarked ones (a later block may read an earlier one's folder)."""
    run_blocks(page, ("run", "slow"), tmp_path, timeout=3600)
