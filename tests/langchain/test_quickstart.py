"""The LangChain quickstart runs offline and prints the answer with its epsilon, delta."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_quickstart.py"
MECHANISMS = [
    "dpsparsevote",
    "dpksa",
    pytest.param(
        "murag",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("dprag_core.algorithms.murag") is None,
            reason="dprag_core.algorithms.murag not in the tree yet",
        ),
    ),
]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_quickstart_runs(
    mechanism: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "state.db")
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--mechanism", mechanism, "--state", state])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "answer:" in out and "epsilon=" in out and "delta=" in out
