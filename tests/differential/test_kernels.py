"""The in-process engines' cells again, on AVX2 kernels (issue 36 case 8).

Bit identity of a row whatever the other rows hold is a claim about the CPU
kernels that compute it; this machine's (AVX-512, AMX) are not the only ones
users have. The cells below run in a process of their own
(tests/differential/run_cells.py) with the AVX2 kernels forced before torch is
imported. Run the whole harness that way with the same variables set::

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

CASE_8 = pytest.mark.xfail(
    strict=True,
    reason="issue 36 case 8: on AVX2 kernels the rows of unchanged voters move once x's "
    "voter is the one short row among rows at the full width (static engine, tiny Llama: "
    "from the prefill; eager engine, tiny Llama and the reader: from the first decode step)",
)
ROWS = [  # (entry point, mechanism, store, x, engine), and whether case 8 shows there
    (("PrivateRAG.answer", "DPVote", "core-list", "short", "static"), True),
    (("PrivateRAG.answer", "DPVote", "core-list", "short", "eager"), True),
    (("PrivateRAG.answer", "DPVote", "core-list", "short", "reader"), True),
    (("PrivateRAG.answer", "DPSparseVote-word", "core-list", "nearest", "static"), False),
    (("DPRAGChain.invoke", "DPICL", "lc-inmemory", "longest", "reader"), False),
]
CELLS = [
    pytest.param(cell_of(*rows), id=cell_of(*rows).id, marks=[CASE_8] if known else [])
    for rows, known in ROWS
]


@pytest.fixture(scope="module")
def on_avx2() -> dict[str, list[str]]:
    """Every cell of CELLS run once, in one process with AVX2 kernels: differences by id."""
    ids = [cell_of(*rows).id for rows, _ in ROWS]
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
