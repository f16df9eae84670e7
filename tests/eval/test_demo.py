"""``dprag demo`` runs offline end to end (MiniLM, FAISS, the reader, the mechanisms)."""

from __future__ import annotations

import pytest

from dprag_core.cli import main


def test_demo_runs_one_question(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--questions", "1", "--voters", "8"]) == 0
    out = capsys.readouterr().out
    assert "sha256 verified" in out
    for label in ("NonRAG", "RAG (k=3)", "DPSparseVote", "DP-KSA"):
        assert label in out
    assert "eps=inf" in out and "eps=0" in out
    assert "corpus budget" in out


def test_demo_rejects_bad_options() -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--epsilon", "-1"])
    with pytest.raises(SystemExit):
        main(["demo", "--questions", "0"])
