"""pyproject.toml's lower bounds are the releases `make test-lowest` installs: every pin of `.ci/lowest.txt` is its
package's `>=` in pyproject.toml, so a raised floor is raised in both places (and tested by `make test-lowest`)."""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from platform_support import REPO

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def declared_floors() -> dict[str, str]:
    """package -> the version of its `>=` in pyproject.toml's dependencies."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for line in dependencies:
        requirement = Requirement(line)
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if lower:
            floors[canonicalize_name(requirement.name)] = lower[0]
    return floors


def lowest_pins() -> dict[str, str]:
    """package -> its `==` in .ci/lowest.txt."""
    pins = {}
    for line in (REPO / ".ci" / "lowest.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line).groups()
            pins[canonicalize_name(name)] = version
    return pins


def test_every_lowest_pin_is_the_declared_floor():
    floors, pins = declared_floors(), lowest_pins()
    assert {"torch", "transformers", "accelerate", "datasets", "tokenizers"} <= set(pins)
    for name, version in pins.items():
        assert name in floors, f"{name}=={version} in .ci/lowest.txt has no `>=` in pyproject.toml"
        assert Version(floors[name]) == Version(version), (
            f"{name}: pyproject.toml says >={floors[name]}, .ci/lowest.txt tests {version}"
        )
