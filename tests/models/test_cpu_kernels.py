"""The bit-identity tests again, on AVX2 kernels (issue 36 case 8).

Every claim that a row's logits are bit-identical whatever the other rows hold
was measured on one CPU's kernels (AVX-512 and AMX here); on an AVX2-only AMD
EPYC one of them failed. torch, MKL and oneDNN pick their kernels when they are
loaded, so each file runs in a fresh interpreter with AVX2 forced
(:data:`AVX2`; a probe in the same environment checks that torch takes it). On a
CPU without AVX2 the
forced setting would fall back to something else, so the test skips there.

To run one file by hand::

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python -m pytest -p no:cacheprovider tests/models/test_lookahead.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLAIMS = [
    "test_batch_invariance.py",
    "test_prefill_rows.py",
    "test_lookahead.py",
    "test_engine_table.py",
]


def _cpu_has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags


def _forced() -> dict[str, str]:
    """This process's environment (pytest's own variables left out), AVX2 forced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, **AVX2}


@pytest.mark.skipif(not _cpu_has_avx2(), reason="the CPU has no AVX2 kernels to force")
def test_the_child_runs_on_avx2_kernels() -> None:
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_forced(), capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "AVX2"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not _cpu_has_avx2(), reason="the CPU has no AVX2 kernels to force")
@pytest.mark.parametrize("name", CLAIMS)
def test_bit_identity_holds_on_avx2_kernels(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--timeout=3000", str(HERE / name)],
        env=_forced(),
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
