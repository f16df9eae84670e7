"""The offline MiniLM loader: the pinned sha256 is checked before anything loads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dprag_core.eval.embeddings import MINILM_SHA256, MiniLMEmbedder, file_sha256, minilm_path


def test_pinned_hash_matches_the_installed_wheel() -> None:
    weights = minilm_path() / "model.safetensors"
    assert MINILM_SHA256.startswith("53aa5117") and MINILM_SHA256.endswith("d9db")
    assert file_sha256(weights) == MINILM_SHA256


def test_wrong_hash_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import sentence_transformers

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model must not be loaded when the hash differs")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", boom)
    with pytest.raises(ValueError, match="sha256 mismatch"):
        MiniLMEmbedder(expected_sha256="0" * 64)


def test_tampered_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"not the real weights")
    with pytest.raises(ValueError, match="refusing to load"):
        MiniLMEmbedder(path=tmp_path)
    assert (
        file_sha256(tmp_path / "model.safetensors")
        == hashlib.sha256(b"not the real weights").hexdigest()
    )


def test_missing_weights_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        MiniLMEmbedder(path=tmp_path)


def test_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        MiniLMEmbedder(batch_size=0)
