"""The dtype a load picks: bf16 only where the CPU computes it natively.

On a CPU without bf16 matrix instructions (AVX512_BF16, AMX, Arm bf16) torch
emulates bf16 products through float32, many times slower than float32 itself
(``benchmarks/cpu_answer.py`` prints the factor). ``from_pretrained(dtype=
"bfloat16")`` on such a CPU loads float32 with one warning at load; on a CPU
with them, or on another device, it loads what was asked. The capability is
forced both ways here, so the test does not depend on this machine's CPU.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build_model, build_tokenizer

import dprag_core.models.hf as hf
from dprag_core.models.hf import HFTextModel, HFTokenModel, cpu_has_native_bf16, load_dtype


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer()
    build_model("llama", tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _native(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    monkeypatch.setattr(hf, "cpu_has_native_bf16", lambda: native)


def test_bf16_without_native_support_loads_float32_with_one_warning(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _native(monkeypatch, False)
    with pytest.warns(UserWarning, match="loading float32 instead") as caught:
        model = HFTokenModel.from_pretrained(str(folder), dtype="bfloat16")
    assert len([w for w in caught if "bfloat16" in str(w.message)]) == 1
    assert model.model.dtype == torch.float32
    with warnings.catch_warnings():  # nothing more per query
        warnings.simplefilter("error")
        session = model.prefill(["Question: hi\nAnswer:"])
        session.step(int(session.greedy()[0]))


def test_bf16_with_native_support_loads_bf16(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _native(monkeypatch, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        text = HFTextModel.from_pretrained(str(folder), dtype="bfloat16")
    assert text.token_model.model.dtype == torch.bfloat16


@pytest.mark.parametrize("native", [False, True])
def test_float32_and_other_devices_load_what_was_asked(
    monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    _native(monkeypatch, native)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_dtype("float32", "cpu") is torch.float32
        assert load_dtype("bfloat16", "cuda") is torch.bfloat16
        assert load_dtype("bfloat16", "cuda:1") is torch.bfloat16


def test_a_bad_dtype_is_refused_before_loading() -> None:
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'bfloat16', got 'fp8'"):
        load_dtype("fp8", "cpu")


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ({}, False),
        ({"_is_avx512_bf16_supported": True}, True),
        ({"_is_amx_tile_supported": True}, True),
    ],
)
def test_an_x86_cpu_reads_torchs_probes(
    monkeypatch: pytest.MonkeyPatch, probes: dict[str, bool], expected: bool
) -> None:
    monkeypatch.setattr(hf.platform, "machine", lambda: "x86_64")
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        value = probes.get(name, False)
        monkeypatch.setattr(torch.cpu, name, lambda value=value: value, raising=False)
    assert cpu_has_native_bf16() is expected


@pytest.mark.parametrize(("flags", "expected"), [("fp asimd bf16 i8mm", True), ("fp asimd", False)])
def test_another_cpu_reads_its_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: str, expected: bool
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nFeatures\t: {flags}\n")
    monkeypatch.setattr(hf.platform, "machine", lambda: "aarch64")
    real = hf.Path

    def path(name: Any) -> Path:
        return cpuinfo if str(name) == "/proc/cpuinfo" else real(name)

    monkeypatch.setattr(hf, "Path", path)
    assert cpu_has_native_bf16() is expected
