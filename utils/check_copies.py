"""Check that every marked copy in `src/` still equals its source, as `transformers`' `utils/check_copies.py` does.

A variant's `modeling_*.py` may import only the standard library, torch, transformers and its own folder (it is
copied next to the weights for `trust_remote_code=True`; `tests/test_layout.py`), so a block that several families
need stands in each of their files. Each copy says where it comes from, and this script fails when they drift apart.

Two kinds of marker (the source named by its dotted path under `src/`, e.g. `hf_bertology.models.modeling_bert`):

1. A whole function, class or method (transformers' convention), the comment on the line just above its `def`/`class`
   (or above its first decorator)::

       # Copied from hf_bertology.models.modeling_bert._denominator
       def _denominator(...):

2. A block inside a function. The source names the block with a pair of comments inside the source object::

       # Copy source: sparse_mlm
       ...lines...
       # End copy source: sparse_mlm

   and the copy holds the same lines between::

       # Copied from hf_bertology.models.modeling_bert.BertologyBertForPreTraining.forward[sparse_mlm] with nsp->sop
       ...lines...
       # End copied block

Either marker may end with `with A->B, C->D`: plain text replacements applied in that order to the source's text
before comparing (`Bert->Albert` does not change `bert`; write both where both occur). The source is re-indented to
the copy's indentation, and the source's own `# Copy source` lines are left out. Nothing is imported: the files are
read with `ast`.

Usage: `python utils/check_copies.py` (exit 1 listing `file:line` and a short diff for every copy that differs),
`python utils/check_copies.py --fix_and_overwrite` (rewrite each copy from its source). `--src DIR` checks another
tree (the tests use a temporary one).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED_FROM = re.compile(
    r"^(?P<indent>\s*)# Copied from (?P<source>[\w.]+)(?:\[(?P<block>\w+)\])?(?: with (?P<with>.+))?$"
)
END_COPIED = "# End copied block"
SOURCE_START = "# Copy source: "
SOURCE_END = "# End copy source: "
REPLACEMENT = re.compile(r"^\s*(?P<old>\S+)->(?P<new>\S*)\s*$")
MAX_DIFF_LINES = 20


class MarkerError(Exception):
    """A marker that names no source, or a copy with no end."""


@dataclass
class Copy:
    path: Path
    marker_line: int  # 1-based line of the `# Copied from` comment
    start: int  # 0-based index of the copy's first line
    end: int  # 0-based index past its last line
    source: str
    block: str | None
    replacements: list[tuple[str, str]]
    indent: str


def parse_replacements(text: str | None) -> list[tuple[str, str]]:
    if not text:
        return []
    pairs = []
    for part in text.split(","):
        match = REPLACEMENT.match(part)
        if match is None:
            raise MarkerError(f"replacement {part.strip()!r} is not `A->B`")
        pairs.append((match["old"], match["new"]))
    return pairs


def with_trailing_comments(lines: list[str], start: int, end: int) -> tuple[int, int]:
    """`(start, end)` grown over the comment lines right after the object that are indented deeper than its first
    line (`ast` ends an object at its last statement; a block's end marker may stand after it)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    while (
        end < len(lines)
        and lines[end].lstrip().startswith("#")
        and len(lines[end]) - len(lines[end].lstrip()) > indent
    ):
        end += 1
    return start, end


def object_span(tree: ast.Module, names: list[str]) -> tuple[int, int] | None:
    """0-based `(start, end)` lines of the function/class `names` (a path through nested classes), decorators
    included (trailing comments are added by the caller), or None."""
    body = tree.body
    node = None
    for name in names:
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first - 1, node.end_lineno


def node_starting_at(tree: ast.Module, line: int) -> tuple[int, int] | None:
    """0-based span of the function/class whose first line (or first decorator) is the 1-based `line`."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first == line:
                return first - 1, node.end_lineno
    return None


def find_copies(path: Path, lines: list[str]) -> list[Copy]:
    tree = None
    copies = []
    for index, line in enumerate(lines):
        match = COPIED_FROM.match(line)
        if match is None:
            continue
        where = f"{path}:{index + 1}"
        replacements = parse_replacements(match["with"])
        if match["block"]:
            end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == END_COPIED), None)
            if end is None:
                raise MarkerError(f"{where}: no `{END_COPIED}` after this block marker")
            start = index + 1
        else:
            tree = tree or ast.parse("".join(lines), filename=str(path))
            span = node_starting_at(tree, index + 2)
            if span is None:
                raise MarkerError(f"{where}: no function or class right below this marker")
            start, end = with_trailing_comments(lines, *span)
        copies.append(
            Copy(path, index + 1, start, end, match["source"], match["block"], replacements, match["indent"])
        )
    return copies


def source_lines(src: Path, dotted: str, block: str | None, cache: dict) -> list[str]:
    """The lines of `dotted` (module path, then object path) under `src`, or of its named block."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = src.joinpath(*parts[:cut]).with_suffix(".py")
        if module.is_file():
            break
    else:
        raise MarkerError(f"{dotted}: no module of that name under {src}")
    if module not in cache:
        text = module.read_text()
        cache[module] = (text.splitlines(keepends=True), ast.parse(text, filename=str(module)))
    lines, tree = cache[module]
    span = object_span(tree, parts[cut:])
    if span is None:
        raise MarkerError(f"{dotted}: {module} has no {'.'.join(parts[cut:])}")
    start, end = with_trailing_comments(lines, *span)
    found = lines[start:end]
    if block is None:
        return found
    starts = [i for i, line in enumerate(found) if line.strip() == SOURCE_START + block]
    ends = [i for i, line in enumerate(found) if line.strip() == SOURCE_END + block]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise MarkerError(f"{dotted}[{block}]: needs one `{SOURCE_START}{block}` ... `{SOURCE_END}{block}` pair")
    return found[starts[0] + 1 : ends[0]]


def expected_lines(copy: Copy, src: Path, cache: dict) -> list[str]:
    lines = [
        line
        for line in source_lines(src, copy.source, copy.block, cache)
        if not line.strip().startswith((SOURCE_START, SOURCE_END))
    ]
    text = "".join(lines)
    for old, new in copy.replacements:
        text = text.replace(old, new)
    lines = text.splitlines(keepends=True)
    first = next((line for line in lines if line.strip()), "")
    source_indent = first[: len(first) - len(first.lstrip())]
    out = []
    for line in lines:
        if line.strip() and not line.startswith(source_indent):
            raise MarkerError(f"{copy.source}: a line indented less than the block's first line: {line.strip()!r}")
        out.append(copy.indent + line[len(source_indent) :] if line.strip() else "\n")
    return out


def python_files(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def check(src: Path, fix: bool) -> list[str]:
    """The report lines of every copy that differs (rewritten from the source when `fix`)."""
    problems, cache = [], {}
    for path in python_files(src):
        lines = path.read_text().splitlines(keepends=True)
        try:
            copies = find_copies(path, lines)
        except MarkerError as error:
            problems.append(str(error))
            continue
        changed = False
        for copy in reversed(copies):  # from the bottom, so rewriting one keeps the others' line numbers
            try:
                expected = expected_lines(copy, src, cache)
            except MarkerError as error:
                problems.append(f"{path}:{copy.marker_line}: {error}")
                continue
            found = lines[copy.start : copy.end]
            if found == expected:
                continue
            name = copy.source + (f"[{copy.block}]" if copy.block else "")
            if fix:
                lines[copy.start : copy.end] = expected
                changed = True
                problems.append(f"{path}:{copy.marker_line}: rewritten from {name}")
                continue
            diff = list(difflib.unified_diff(expected, found, f"{name} (after replacements)", "this copy", n=1))
            shown = "".join(diff[:MAX_DIFF_LINES]) + ("  ...\n" if len(diff) > MAX_DIFF_LINES else "")
            problems.append(f"{path}:{copy.marker_line}: differs from {name}\n{shown}")
        if changed:
            path.write_text("".join(lines))
    return problems


def count_markers(src: Path) -> int:
    return sum(1 for path in python_files(src) for line in path.read_text().splitlines() if COPIED_FROM.match(line))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the tree whose dotted names the markers use")
    parser.add_argument("--fix_and_overwrite", action="store_true", help="rewrite every copy from its source")
    args = parser.parse_args(argv)
    problems = check(args.src, args.fix_and_overwrite)
    for problem in problems:
        print(problem.rstrip())
    if args.fix_and_overwrite:
        return 0 if all("rewritten from" in p for p in problems) else 1
    if problems:
        print(
            f"{len(problems)} marked cop{'y differs' if len(problems) == 1 else 'ies differ'} from the source; "
            "`python utils/check_copies.py --fix_and_overwrite` rewrites them"
        )
        return 1
    print(f"{count_markers(args.src)} marked copies, all equal to their sources")
    return 0


if __name__ == "__main__":
    sys.exit(main())
