"""scripts/convert_to_gguf.py names a pre-tokenizer GPT-2's only when it tokenizes as GPT-2's."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dprag_core.eval.workbench import reader_path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "convert_to_gguf.py"


@pytest.fixture(scope="module")
def convert() -> ModuleType:
    spec = importlib.util.spec_from_file_location("convert_to_gguf", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_tokenizer(tmp_path: Path, change: Any) -> Path:
    spec = json.loads((reader_path() / "tokenizer.json").read_text(encoding="utf-8"))
    change(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return tmp_path


def test_the_reader_is_byte_level_bpe(convert: ModuleType, tmp_path: Path) -> None:
    assert convert.is_gpt2_pre_tokenizer(reader_path())
    shutil.copy(reader_path() / "tokenizer.json", tmp_path / "tokenizer.json")
    assert convert.is_gpt2_pre_tokenizer(tmp_path)
    assert not convert.is_gpt2_pre_tokenizer(tmp_path / "missing")


def test_other_pre_tokenizers_are_not(convert: ModuleType, tmp_path: Path) -> None:
    def digit_merge(spec: dict[str, Any]) -> None:
        spec["model"]["merges"] = [*spec["model"]["merges"], ["1", "2"]]

    def prefix_space(spec: dict[str, Any]) -> None:
        spec["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True

    def metaspace(spec: dict[str, Any]) -> None:
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁"}

    for i, change in enumerate((digit_merge, prefix_space, metaspace)):
        folder = tmp_path / str(i)
        folder.mkdir()
        assert not convert.is_gpt2_pre_tokenizer(_with_tokenizer(folder, change)), change
