"""The mutation list stays applicable: every mutant's line is found once (mutants/run.py calls it stale otherwise)."""

from __future__ import annotations

import importlib.util
import sys

from platform_support import REPO

_spec = importlib.util.spec_from_file_location("mutants_run", REPO / "mutants" / "run.py")
mutants = sys.modules["mutants_run"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(mutants)


def test_mutate_matches_the_exact_line_text_once():
    text = "a = 1\n    b = f(x)  # why\nc = 3\n"
    mutated, problem = mutants.mutate(text, "b = f(x)  # why", "b = g(x)")
    assert (mutated, problem) == ("a = 1\n    b = g(x)\nc = 3\n", "")
    assert mutants.mutate(text, "b = f(y)", "z") == (None, "stale")
    assert mutants.mutate("x\nx\n", "x", "y") == (None, "ambiguous")


def test_every_listed_mutant_applies_to_this_tree():
    listed = mutants.load()
    assert len(listed) >= 40
    for mutant in listed:
        path = REPO / mutant.file
        assert path.is_file(), mutant.id
        mutated, problem = mutants.mutate(path.read_text(encoding="utf-8"), mutant.original, mutant.replacement)
        assert problem == "" and mutated != path.read_text(encoding="utf-8"), (mutant.id, problem)
        assert mutant.tests and all((REPO / t.split("::")[0]).exists() for t in mutant.tests if t.startswith("tests/"))
