"""benchmarks/ledger.py runs end to end (``--quick``), printing its targets and the load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ledger_support import POSTGRES_DSN

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
    assert "targets at 3 processes, 10 units per charge: sqlite p99 <= 50 ms" in out
    assert ("postgres median <= 5 ms" in out) == bool(POSTGRES_DSN)
    assert out.count(" 0 without a recorded charge") == (4 if POSTGRES_DSN else 2)
    assert "overspend 0\n" in out
