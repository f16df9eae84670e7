"""``dprag demo`` runs offline end to end (MiniLM, FAISS, the reader, the mechanisms)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from dprag_core.cli import main


def test_demo_runs_one_question(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary folder goes
    # at epsilon 0.05 per query no word can beat LimitedDomain's threshold (about 1 +
    # ln(8/delta)/0.0125 votes of 8): the word-level answer is empty, and says why
    demo = ["demo", "--questions", "1", "--voters", "8", "--epsilon", "0.05"]
    assert main([*demo, "--noise-seed", "0"]) == 0
    out = capsys.readouterr().out
    assert f"a temporary file, removed at the end: {tmp_path}" in out
    # nothing left behind (but torch's compile cache, one per user, reused by every run)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("torchinductor_")] == []
    assert "\ufffd" not in out  # no invalid byte in any answer
    assert "sha256 verified" in out
    for label in ("NonRAG", "RAG (k=3)", "DPSparseVote", "DPSV (words)", "DP-KSA", "DPAnswerVote"):
        assert label in out
    # the model's answer to the question alone says so (it has not read the records)
    (public,) = [line for line in out.splitlines() if "NonRAG" in line and "eps=" in line]
    assert public.endswith("(from the model alone, not the records)"), out
    assert "eps=inf" in out and "eps=0" in out
    assert "corpus budget" in out
    (words,) = [line for line in out.splitlines() if "DPSV (words)" in line and "eps=" in line]
    assert words.endswith("(no answer released: null_token)"), out


def test_demo_rejects_bad_options() -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--epsilon", "-1"])
    with pytest.raises(SystemExit):
        main(["demo", "--questions", "0"])


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--token-share", "2", "(0, 1]"),
        ("--token-share", "0", "(0, 1]"),
        ("--word-share", "1.5", "(0, 1]"),
        ("--tau", "nan", "[-1, 1]"),
        ("--tau", "1.5", "[-1, 1]"),
    ],
)
def test_demo_names_the_bad_option_before_any_work(
    option: str, value: str, allowed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["demo", option, value])
    captured = capsys.readouterr()
    assert option in captured.err and allowed in captured.err
    assert "indexed" not in captured.out  # rejected while parsing, before the corpus


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    """The module docstring is the --help text: no reStructuredText roles or literals."""
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "dprag demo runs offline" in " ".join(out.split())
    assert ":class:" not in out and "``" not in out and "~dprag" not in out
