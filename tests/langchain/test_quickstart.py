"""The LangChain quickstart runs offline and every mechanism's answer names the right drug."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from dprag_core.eval.metrics import match

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_quickstart.py"


@pytest.mark.parametrize("mechanism", ["dpvote", "dpsparsevote", "dpksa", "murag"])
def test_quickstart_answers_right(
    mechanism: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [str(EXAMPLE), "--mechanism", mechanism, "--seed", "0"]  # its budget: conftest.py's
    monkeypatch.setattr(sys, "argv", argv)
    example = runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    gold = example["FACT"].answer
    assert example["FACT"].support == 16
    answer = re.search(r"^answer: (.*)$", out, re.M)
    lcel = re.search(r"^as an LCEL app: (.*)$", out, re.M)
    assert answer and lcel, out
    assert match(answer.group(1), gold) and match(lcel.group(1), gold), out
    assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", out, re.M), out
    for text, _ in example["RECORDS"]:  # no record is ever printed
        assert text not in out
