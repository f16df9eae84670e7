"""Unit-norm embeddings: inner product on them is a cosine similarity.

The store table (:mod:`langchain_dprag.stores`) reads a store whose embeddings
are wrapped in :class:`NormalizedEmbeddings` as holding unit vectors, so its
inner-product or L2 scores convert to a cosine on [-1, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from langchain_core.embeddings import Embeddings

__all__ = ["NormalizedEmbeddings"]


class NormalizedEmbeddings(Embeddings):
    """Wraps any ``Embeddings`` so every vector has unit L2 norm (inner product = cosine).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> v = NormalizedEmbeddings(DeterministicFakeEmbedding(size=8)).embed_query("x")
    >>> round(sum(a * a for a in v), 6)
    1.0
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner

    @staticmethod
    def _unit(vector: Sequence[float]) -> list[float]:
        norm = math.sqrt(sum(float(a) * float(a) for a in vector))
        return [float(a) / norm for a in vector] if norm > 0 else [float(a) for a in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Unit-norm embeddings of ``texts``."""
        return [self._unit(v) for v in self.inner.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Unit-norm embedding of ``text``."""
        return self._unit(self.inner.embed_query(text))

    def __repr__(self) -> str:
        return f"NormalizedEmbeddings({type(self.inner).__name__})"
