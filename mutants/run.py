"""Mutation check: apply each one-line mutant of `mutants/mutants.yaml` to a copy of the repo and run its tests.

A mutant is caught when the tests it names fail on the mutated copy. Mutants are matched by the exact text of the
original line (leading and trailing blanks ignored), never by line number, so the list survives edits elsewhere in
a file; a mutant whose line is no longer found (or is found more than once) is reported as `stale` / `ambiguous`,
apart from `survived`. Written here rather than with `mutmut` or `cosmic-ray`: those generate their own operators
over every line and run the whole suite per mutant (hours on 2 CPU cores); the point here is a short, reviewed list
of mutations that break a property the README states, each run against the few fast tests that must catch it.

Each mutant runs in its own temporary copy of the working tree (tracked and untracked, non-ignored files), with
`PYTHONPATH=<copy>/src`, so `hf_bertology` is imported from the mutated copy. The copy sits next to a `shared`
link to the real `../shared` (the tests' data fixture finds it as it would from the checkout).

    python mutants/run.py                 # every mutant, 2 at a time, writes mutants/last_result.md
    python mutants/run.py -k electra      # the mutants whose id contains "electra" (their rows of the result only)
    python mutants/run.py --baseline      # first check that every named test passes on the unmutated copy
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "mutants" / "mutants.yaml"
RESULT = REPO / "mutants" / "last_result.md"
RECORD = REPO / "mutants" / "last_result.json"  # per mutant: its last status (a `-k` run updates its own rows)
MAX_JOBS = 2  # the CI machine has 2 cores; more jobs only contend


@dataclass
class Mutant:
    id: str
    file: str
    original: str
    replacement: str
    tests: list[str]
    why: str = ""
    status: str = ""
    seconds: float = 0.0
    detail: str = field(default="", repr=False)


def load(path: Path = LIST) -> list[Mutant]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutants = [Mutant(**entry) for entry in entries]
    ids = [m.id for m in mutants]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise SystemExit(f"error: duplicate mutant ids in {path}: {sorted(duplicates)}")
    return mutants


def mutate(text: str, original: str, replacement: str) -> tuple[str | None, str]:
    """`text` with the one line equal to `original` (blanks around ignored) replaced, indentation kept.

    Returns `(None, "stale")` when no line matches, `(None, "ambiguous")` when several do.
    """
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == original.strip()]
    if not hits:
        return None, "stale"
    if len(hits) > 1:
        return None, "ambiguous"
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")) :]
    lines[hits[0]] = indent + replacement.strip() + ending
    return "".join(lines), ""


def working_files(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [name for name in out.split("\0") if name and (repo / name).is_file()]


def make_copy(repo: Path, files: list[str]) -> Path:
    """A temporary copy of the working tree; returns its root (`<tmp>/repo`, next to a `shared` link)."""
    base = Path(tempfile.mkdtemp(prefix="mutant-"))
    root = base / "repo"
    for name in files:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    shared = repo.parent / "shared"
    if shared.exists():
        (base / "shared").symlink_to(shared.resolve())
    return root


def run_tests(root: Path, tests: list[str], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timeout"
    return done.returncode, (done.stdout + done.stderr)[-2000:]


def check(mutant: Mutant, repo: Path, files: list[str], timeout: float, baseline: bool = False) -> Mutant:
    start = time.monotonic()
    root = make_copy(repo, files)
    try:
        path = root / mutant.file
        if not path.is_file():
            mutant.status = "stale"
            mutant.detail = f"{mutant.file} does not exist"
            return mutant
        if not baseline:
            mutated, problem = mutate(path.read_text(encoding="utf-8"), mutant.original, mutant.replacement)
            if mutated is None:
                mutant.status = problem
                return mutant
            path.write_text(mutated, encoding="utf-8")
        code, output = run_tests(root, mutant.tests, timeout)
        mutant.detail = output
        if baseline:
            mutant.status = "passes" if code == 0 else "baseline-fails"
        elif code == 0:
            mutant.status = "survived"
        elif code in (4, 5):  # a usage error or no test collected: the list names tests that do not exist
            mutant.status = f"error (pytest exit {code})"
        else:  # 1: a test failed; 2: a test module no longer imports; -1: timeout (an endless loop)
            mutant.status = "caught"
        return mutant
    finally:
        mutant.seconds = time.monotonic() - start
        shutil.rmtree(root.parent, ignore_errors=True)


def record(ran: list[Mutant]) -> dict[str, dict]:
    """The stored statuses, updated with the mutants that just ran; entries no longer in the list are dropped."""
    known = {m.id for m in load()}
    stored = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    stored.update({m.id: {"status": m.status, "seconds": round(m.seconds), "when": now} for m in ran})
    return {key: value for key, value in stored.items() if key in known}


def report(stored: dict[str, dict]) -> str:
    mutants = load()
    statuses = {m.id: stored.get(m.id, {}).get("status", "not run") for m in mutants}
    caught = sum(status == "caught" for status in statuses.values())
    lines = [
        "# Mutation check: last result",
        "",
        f"**{caught}/{len(mutants)} caught** (`python mutants/run.py`, {MAX_JOBS} at a time; each mutant's last run).",
        "",
        "| mutant | file | status | seconds | when | tests |",
        "|---|---|---|---|---|---|",
    ]
    for m in mutants:
        entry = stored.get(m.id, {})
        lines.append(
            f"| {m.id} | `{m.file}` | {statuses[m.id]} | {entry.get('seconds', '')} | {entry.get('when', '')} "
            f"| {' '.join(m.tests)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "-k",
        dest="select",
        action="append",
        default=[],
        help="run only the mutants whose id contains this (repeatable)",
    )
    parser.add_argument("--jobs", type=int, default=MAX_JOBS, help=f"mutants run at once (at most {MAX_JOBS})")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a mutant's tests are stopped")
    parser.add_argument("--baseline", action="store_true", help="run the tests on the unmutated copy instead")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULT.relative_to(REPO)}")
    args = parser.parse_args(argv)
    mutants = [m for m in load() if not args.select or any(text in m.id for text in args.select)]
    files = working_files(REPO)
    start = time.monotonic()
    jobs = max(1, min(args.jobs, MAX_JOBS))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(check, m, REPO, files, args.timeout, args.baseline) for m in mutants]
        for future in concurrent.futures.as_completed(futures):
            m = future.result()
            print(f"{m.status:>14}  {m.id}  ({m.seconds:.0f} s)", flush=True)
            if m.status not in ("caught", "passes"):
                print("    " + m.detail[-800:].replace("\n", "\n    "), flush=True)
    elapsed = time.monotonic() - start
    bad = [m for m in mutants if m.status not in ("caught", "passes")]
    print(f"{len(mutants) - len(bad)}/{len(mutants)} {'pass' if args.baseline else 'caught'}")
    print(f"{elapsed / 60:.1f} min")
    if not args.baseline and not args.no_write:
        stored = record(mutants)
        RECORD.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
        RESULT.write_text(report(stored), encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
