"""The evaluation benchmarks run end to end (``--quick``) and write their tables.

They are scripts (``python benchmarks/<name>.py``), so they run as subprocesses
exactly as a user runs them: real reader, MiniLM, FAISS, every mechanism.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("matplotlib")


def run_benchmark(name: str, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return (out / "table.md").read_text()


def test_privacy_utility_quick(tmp_path: Path) -> None:
    table = run_benchmark("privacy_utility.py", tmp_path)
    for row in (
        "| NonRAG |",
        "| RAG (k=3) |",
        "DPVote (LD) eps=10",
        "DPSparseVote (EM, pure) eps=2",
    ):
        assert row in table
    for row in ("DP-KSA eps=10", "DP-RAG (Grislain) eps=2", "| MuRAG | 10 |", "| NaiveMulti |"):
        assert row in table
    assert "Match accuracy vs number of supporting records" in table
    for png in ("accuracy_vs_epsilon.png", "accuracy_vs_support.png", "multi_query.png"):
        assert (tmp_path / png).stat().st_size > 0


def test_attacks_quick(tmp_path: Path) -> None:
    table = run_benchmark("attacks.py", tmp_path)
    for row in ("| NonRAG | 0 |", "| RAG (k=1) | inf |", "| DP-RAG (Grislain) | 10 |"):
        assert row in table
    assert (tmp_path / "attacks.png").stat().st_size > 0
    assert (tmp_path / "config.json").is_file()
