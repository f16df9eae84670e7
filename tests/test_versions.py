"""The framework floors pyproject.toml declares are the versions scripts/test_lowest.sh tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    lines = (ROOT / "scripts" / "lowest-versions.txt").read_text().splitlines()
    exact = [line.split("#")[0].strip() for line in lines]
    return dict(line.split("==") for line in exact if "==" in line)


def _floors() -> dict[str, str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in (r for group in extras["optional-dependencies"].values() for r in group):
        req = Requirement(requirement)
        for spec in req.specifier:
            if spec.operator == ">=":
                floors[req.name] = spec.version
    return floors


def test_every_pinned_floor_is_the_declared_floor() -> None:
    pins, floors = _pins(), _floors()
    assert {"langchain-core", "llama-index-core"} <= set(pins)
    assert {name: floors.get(name) for name in pins} == pins


def test_framework_ranges_have_an_upper_bound() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in (r for group in extras["optional-dependencies"].values() for r in group):
        req = Requirement(requirement)
        if req.name in _pins():
            assert any(s.operator == "<" for s in req.specifier), requirement
