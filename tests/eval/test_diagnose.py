"""``dprag diagnose``: per question, the voters' agreement and the bar, labelled NOT private."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dprag_core.cli import main
from dprag_core.eval.synthetic import make_corpus


def test_diagnose_shows_agreement_and_bar(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    corpus = make_corpus(n_diseases=2, max_support=8, seed=0)
    records = tmp_path / "records.jsonl"
    records.write_text(
        "\n".join(json.dumps({"id": r.id, "text": r.text}) for r in corpus.records),
        encoding="utf-8",
    )
    question = max(corpus.questions_of("treatment"), key=lambda q: q.support).question
    argv = ["diagnose", "--records", str(records), "--question", question, "--voters", "8"]
    assert main([*argv, "--epsilon", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("NOT PRIVATE - data owner only") and out[-1] == out[0]
    assert out[1].endswith("beats the bar h⊥ = 6.0, plus noise")  # 2 + (2/5) ln(2/1e-4)
    assert out[2] == question
    assert re.fullmatch(
        r"    \d/8 voters agree on ('[a-z0-9 -]+'|-) \(runner-up \d, abstained \d\); "
        r"bar h⊥ = 6\.0 at epsilon 5: (clears the bar|below the bar: likely empty)",
        out[3],
    ), out[3]


def test_diagnose_rejects_bad_options(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["diagnose", "--records", "x", "--question", "q", "--epsilon", "-1"])
    with pytest.raises(SystemExit):
        main(["diagnose", "--records", "x", "--question", "q", "--delta", "1"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="holds no record"):
        main(["diagnose", "--records", str(empty), "--question", "q"])
