"""examples/llamaindex_quickstart.py runs offline; every mechanism's answer names the right drug."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from dprag_core.eval.metrics import match

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llamaindex_quickstart.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("llamaindex_quickstart", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mechanism", ["dpvote", "dpsparsevote", "dpksa", "dpicl", "murag"])
def test_quickstart_answers_right(mechanism: str, capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example()  # its budget: this test's own budget directory (conftest.py)
    example.main(["--mechanism", mechanism, "--seed", "0"])
    out = capsys.readouterr().out
    assert example.FACT.support == 16
    answer = re.search(r"^answer: (.*)$", out, re.M)
    streamed = re.search(r"^streamed: (.*)$", out, re.M)
    assert answer and streamed, out
    assert match(answer.group(1), example.FACT.answer), out
    assert match(streamed.group(1), example.FACT.answer), out
    assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", out, re.M), out
    assert "source_nodes: []" in out
    for text, _ in example.RECORDS:  # no record is ever printed
        assert text not in out
