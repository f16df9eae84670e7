"""benchmarks/ledger.py runs end to end (``--quick``), printing its targets and the load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ledger_support import POSTGRES_DSN, needs_postgres

ROOT = Path(__file__).resolve().parents[2]


def test_the_ledger_benchmark_prints_its_targets_and_the_machines_load() -> None:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ledger.py"), "--quick",
         *(() if POSTGRES_DSN else ("--no-postgres",))],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.count("load average") >= 3  # uptime: at the start, with the targets, at the end
    assert "targets at 3 processes, 10 units per charge, claim + charge: sqlite p99 <= 50 ms" in out
    assert "claim ms" in out and "charge ms" in out
    assert ("postgres median <= 5 ms" in out) == bool(POSTGRES_DSN)
    assert out.count(" 0 without a recorded charge") == (4 if POSTGRES_DSN else 2)
    assert "overspend 0\n" in out


@needs_postgres
def test_the_compare_benchmark_times_both_checkouts_side_by_side() -> None:
    """benchmarks/ledger_compare.py, this checkout against itself (the ratios near 1)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ledger_compare.py"), "--quick",
         "--before", str(ROOT), "--no-flush"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.count("load average") == 2 and "synchronous_commit=off" in out
    assert out.count("round 0 ") == 2 * 2  # processes (1, 2) x checkouts
    for procs in (1, 2):
        assert f"units  10, procs {procs}: median" in out


def test_the_cpu_benchmark_prints_each_backends_cpu_per_query() -> None:
    """``--cpu``: the client's CPU per query on each backend, and PostgreSQL's server
    process's where this host shows it."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ledger.py"), "--cpu", "20", "--units", "3",
         *(() if POSTGRES_DSN else ("--no-postgres",))],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.count("load average") == 2 and "20 queries" in out and "3 units" in out
    assert "sqlite    median " in out and "client CPU" in out
    assert ("postgres  median " in out) == bool(POSTGRES_DSN)
