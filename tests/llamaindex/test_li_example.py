"""examples/llamaindex_quickstart.py runs offline and prints the answer with its guarantee."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamaindex_quickstart.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("llamaindex_quickstart", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mechanism", ["dpsparsevote", "dpksa", "murag"])
def test_quickstart_runs(
    mechanism: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if mechanism == "murag":
        pytest.importorskip("dprag_core.algorithms.murag")
    load_example().main(["--mechanism", mechanism, "--state", str(tmp_path / "state.db")])
    out = capsys.readouterr().out
    assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", out, re.M), out
    assert "source_nodes: []" in out
    assert "answer: " in out and "streamed:" in out
    for text, _ in load_example().RECORDS:  # no record is ever printed
        assert text not in out
