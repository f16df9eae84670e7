"""The in-process engines' cells again, on AVX2 kernels.

Which kernels compute a row is a property of the CPU: AVX-512 machines run
other kernels than AVX2-only ones. The cells below run in a process of their
own (tests/differential/run_cells.py) with the AVX2 kernels forced before torch
is imported, and must show no difference there either: the harness compares
each row within ``observations.ROW_TOLERANCE`` and each prefill's layout
exactly, so nothing here expects one CPU's rounding (on an AVX2-only CPU this
is the native run again). Run the whole harness that way with the same
variables set::

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python -m pytest tests/differential -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matrix import Cell, cell_of

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2"}  # fmt: skip

ROWS = [  # (entry point, mechanism, store, x, engine)
    ("PrivateRAG.answer", "DPVote", "core-list", "short", "static"),
    ("PrivateRAG.answer", "DPVote", "core-list", "short", "eager"),
    ("PrivateRAG.answer", "DPVote", "core-list", "short", "reader"),
    ("PrivateRAG.answer", "DPSparseVote-word", "core-list", "nearest", "static"),
    ("DPRAGChain.invoke", "DPICL", "lc-inmemory", "longest", "reader"),
]
CELLS = [pytest.param(cell_of(*row), id=cell_of(*row).id) for row in ROWS]


@pytest.fixture(scope="module")
def on_avx2() -> dict[str, list[str]]:
    """Every cell of CELLS run once, in one process with AVX2 kernels: differences by id."""
    ids = [cell_of(*row).id for row in ROWS]
    script = Path(__file__).with_name("run_cells.py")
    done = subprocess.run(
        [sys.executable, str(script), *ids],
        env={**os.environ, **AVX2},
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("cell", CELLS)
def test_neighbouring_corpora_look_alike_on_avx2(cell: Cell, on_avx2: dict[str, list[str]]) -> None:
    assert not on_avx2[cell.id], f"{cell.id} on AVX2: D and D+x differ\n" + "\n".join(
        on_avx2[cell.id]
    )
