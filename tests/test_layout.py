"""The layout rules of docs/ARCHITECTURE.md, read from the source's own imports (nothing is imported or run).

- Imports run one way, downwards through the layers; a folder may import itself.
- No import cycle between modules.
- Every file of `models/` imports only the standard library, torch, transformers and `models/` itself (relatively),
  so `save_pretrained` copies a self-contained set of files and `trust_remote_code=True` works without hf_bertology.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hf_bertology"

# docs/ARCHITECTURE.md, "Layers": a module may import only modules of a lower layer, or of its own unit.
LAYERS = {
    "utils.py": 0,
    "models/": 1,
    "collators/": 1,
    "data/": 1,
    "testing/": 1,
    "recipes/": 2,
    "hub/": 3,
    "joint.py": 4,
    "training/": 5,
    "export.py": 5,
    "evaluation/": 6,
    "cli.py": 7,
    "__main__.py": 8,
    "__init__.py": 7,
}


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def layer(rel: str) -> int:
    for prefix, rank in LAYERS.items():
        if rel == prefix or (prefix.endswith("/") and rel.startswith(prefix)):
            return rank
    raise AssertionError(f"{rel} belongs to no layer: add it to docs/ARCHITECTURE.md and to LAYERS here")


def unit(rel: str) -> str:
    """What may import itself freely: a folder, or one top-level file."""
    return rel.split("/")[0]


def module_file(dotted: list[str]) -> Path | None:
    """The file of module `hf_bertology.<dotted>` (a package's __init__.py), if it exists."""
    base = PACKAGE.joinpath(*dotted)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def imports(path: Path) -> tuple[list[Path], list[str]]:
    """(the hf_bertology files `path` imports anywhere in it, the other top-level modules it imports)."""
    own = path.relative_to(PACKAGE).with_suffix("").parts
    package = list(own[:-1])  # a module's package; for __init__.py, the package itself
    found, external = [], []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name.split(".")
                if name[0] == "hf_bertology":
                    target = module_file(name[1:])
                    found += [target] if target else []
                else:
                    external.append(name[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                name = (node.module or "").split(".")
                if name[0] != "hf_bertology":
                    external.append(name[0])
                    continue
                base = name[1:]
            else:
                if node.level - 1 > len(package):
                    raise AssertionError(f"{relative(path)}: relative import beyond the package")
                base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:  # `from . import glue` names a module; `from .x import name` names x
                target = module_file(base + [alias.name]) or module_file(base)
                if target is None:
                    raise AssertionError(f"{relative(path)}: cannot resolve the import of {'.'.join(base)}")
                found.append(target)
    return [f for f in found if f != path], external


SOURCES = sorted(PACKAGE.rglob("*.py"))
GRAPH = {path: imports(path)[0] for path in SOURCES}


def test_every_source_file_is_read():
    rels = {relative(path) for path in SOURCES}
    assert {
        "recipes/registry.py",
        "training/pretrain.py",
        "evaluation/glue/run.py",
        "models/modeling_bert.py",
    } <= rels
    assert sum(len(targets) for targets in GRAPH.values()) > 50  # the graph is not empty by a parsing mistake


def test_imports_run_downwards():
    upward = [
        f"{relative(a)} (layer {layer(relative(a))}) -> {relative(b)} (layer {layer(relative(b))})"
        for a, targets in GRAPH.items()
        for b in targets
        if unit(relative(a)) != unit(relative(b)) and layer(relative(a)) <= layer(relative(b))
    ]
    assert upward == []


def test_no_import_cycles():
    state: dict[Path, int] = {}  # 1: on the current path, 2: done

    def visit(node: Path, path: list[Path]) -> list[Path] | None:
        state[node] = 1
        for target in GRAPH[node]:
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for start in SOURCES:
        if start not in state:
            cycle = visit(start, [start])
            assert cycle is None, " -> ".join(relative(p) for p in cycle)


MODEL_FILES = sorted(p for p in PACKAGE.glob("models/*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: relative(p))
def test_model_files_are_self_contained(path):
    targets, external = imports(path)
    assert all(t.parent == path.parent for t in targets), [relative(t) for t in targets]
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers"}
    assert set(external) <= allowed, set(external) - allowed


def test_every_variant_has_its_files():
    """A paper family is a configuration and a modeling file of models/; a variant that is another's objective
    changed (ELECTRA's ablations) is its row, on that family's classes, which live there too."""
    from hf_bertology.recipes import VARIANTS

    for kind in ("configuration", "modeling"):
        assert (PACKAGE / "models" / f"{kind}_composed.py").is_file()
    for variant in VARIANTS.values():
        for cls in (variant.config_class, variant.model_class):
            path = PACKAGE / "models" / f"{cls.__module__.rsplit('.', 1)[-1]}.py"
            assert cls.__module__.startswith("hf_bertology.models.") and path.is_file(), cls
    for name in ("bert", "roberta", "spanbert", "albert", "xlnet", "electra", "deberta_v3", "modernbert"):
        for kind in ("configuration", "modeling"):
            assert (PACKAGE / "models" / f"{kind}_{name}.py").is_file()
    assert not [p for p in PACKAGE.glob("models/*/") if p.name != "__pycache__"]  # one flat folder


# A module docstring says what the module is for in a few lines; reasoning and sources live in docs/ (issue 39).
MAX_DOCSTRING_LINES = 15
# Files still owned by other work of issue 39, whose docstrings are not shortened yet. This list must be empty when
# issue 39 lands.
LONG_DOCSTRINGS_PENDING: set[str] = set()


def docstring_lines(path: Path) -> int:
    """Lines of the module docstring of `path`, its quotes included (0 without one)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    first = body[0] if body else None
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    return first.end_lineno - first.lineno + 1 if is_docstring and isinstance(first.value.value, str) else 0


def test_module_docstrings_are_short():
    lines = {relative(path): docstring_lines(path) for path in SOURCES}
    too_long = {rel: n for rel, n in lines.items() if n > MAX_DOCSTRING_LINES and rel not in LONG_DOCSTRINGS_PENDING}
    assert too_long == {}, f"module docstrings over {MAX_DOCSTRING_LINES} lines: move the reasoning to docs/"
    shortened = sorted(rel for rel in LONG_DOCSTRINGS_PENDING if rel in lines and lines[rel] <= MAX_DOCSTRING_LINES)
    assert shortened == [], "take these off LONG_DOCSTRINGS_PENDING"


def test_no_hand_kept_copies():
    """Every objective is written once: model files share code through `models/` (their own folder), so no block is
    kept in step with another by a `# Copied from hf_bertology` marker."""
    marked = [relative(path) for path in SOURCES if "# Copied from hf_bertology" in path.read_text(encoding="utf-8")]
    assert marked == []


def family_names() -> set[str]:
    """Every name a family or an objective goes by, from the registry: the variants, the backbones, their
    `model_type`s and the aliases `--backbone` accepts."""
    from hf_bertology.recipes import BACKBONE_ALIASES, BACKBONES, VARIANTS

    return {*VARIANTS, *BACKBONES, *(b.model_type for b in BACKBONES.values()), *BACKBONE_ALIASES}


def name_comparisons(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each comparison (`==`, `!=`, `in`, `not in`, `startswith`/`endswith`) against a string
    literal in `names`, alone or in a tuple, list or set literal."""

    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for element in node.elts for s in literals(element)]
        return []

    found = []
    for node in ast.walk(tree):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith"):
                operands = list(node.args)
        found += [(node.lineno, s) for operand in operands for s in literals(operand) if s in names]
    return found


def test_no_branch_on_a_family_name_outside_recipes():
    """Each family's facts live in its row (`Variant`, `Backbone`, recipes/): no module outside recipes/ asks which
    family or objective it runs (`model_type == "roberta"`, `objective == "deberta-v3"`); it reads the row, the
    config's fields or the classes instead."""
    names = family_names()
    assert {"bert", "roberta", "deberta-v3", "deberta-v2", "xlnet"} <= names
    found = [
        f"{relative(path)}:{line} compares with {name!r}"
        for path in SOURCES
        if not relative(path).startswith("recipes/")
        for line, name in name_comparisons(ast.parse(path.read_text(encoding="utf-8")), names)
    ]
    assert found == []


def test_the_name_check_sees_a_comparison():
    tree = ast.parse('if config.model_type == "roberta" or x in ("a", "xlnet") or y.startswith("bert"): pass')
    assert sorted(name for _, name in name_comparisons(tree, {"roberta", "xlnet", "bert"})) == [
        "bert",
        "roberta",
        "xlnet",
    ]


MAX_MODEL_FUNCTION_LINES = 60  # docs/ARCHITECTURE.md, "Layers" (issue 50: a step read top to bottom)


def test_no_function_of_models_is_longer_than_60_lines():
    too_long = [
        f"{relative(path)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in SOURCES
        if relative(path).startswith("models/")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_MODEL_FUNCTION_LINES
    ]
    assert too_long == []


def test_no_method_is_swapped_on_an_instance():
    """No `types.MethodType` and no assignment to a module's `forward` in src (a layer that runs differently is a
    class of its own, `models/last_layer.py`)."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Name, ast.Attribute)) and getattr(node, "id", getattr(node, "attr", "")) == (
                "MethodType"
            ):
                found.append(f"{relative(path)}:{node.lineno} MethodType")
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                found += [
                    f"{relative(path)}:{node.lineno} assigns .forward"
                    for target in targets
                    if isinstance(target, ast.Attribute) and target.attr == "forward"
                ]
    assert found == []


def test_the_models_list_of_the_architecture_is_the_folder():
    """Every file of models/ is named in docs/ARCHITECTURE.md's layout, and every file it names there exists (the
    `configuration_<v>.py` / `modeling_<v>.py` pattern stands for the paper families' files)."""
    text = (PACKAGE.parents[1] / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("  recipes/", 1)[0]
    named = set(re.findall(r"\b([a-z_0-9]+\.py)\b", block))
    files = {path.name for path in (PACKAGE / "models").glob("*.py") if path.name != "__init__.py"}
    pattern = {name for name in files if re.fullmatch(r"(configuration|modeling)_[a-z0-9_]+\.py", name)}
    assert named - files == set()
    assert files - named - pattern == set()
