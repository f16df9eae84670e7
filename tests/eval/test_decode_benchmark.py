"""benchmarks/decode.py runs end to end on the tiny preset (CPU; CUDA when present)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


QUICK = ["--preset", "tiny", "--tokens", "3", "--m", "4", "--repeats", "1", "--doc-chars", "40"]


def _run(*extra: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "decode.py"), *QUICK, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _check(out: str) -> None:
    for row in (
        "weight-read floor",
        "bare cached greedy loop",
        "model.generate",
        "DPVote (LD)",
        "DPSparseVote (LD)",
        "DPSparseVote (EM)",
        "HFTextModel.generate (5 rows)",
    ):
        assert row in out, out


def test_decode_benchmark_cpu() -> None:
    _check(_run("--threads", "1"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_decode_benchmark_cuda_bfloat16() -> None:
    _check(_run("--device", "cuda", "--dtype", "bfloat16"))
