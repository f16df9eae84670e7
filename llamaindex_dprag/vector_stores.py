"""A FAISS vector store whose scores are cosine similarities in [-1, 1].

``FaissVectorStore`` returns the raw FAISS scores: L2 *distances* for the
``IndexFlatL2`` of its documentation, inner products for ``IndexFlatIP``. DP
mechanisms need similarities on a public range, so :func:`cosine_faiss_store`
builds an inner-product index behind a FAISS L2-normalisation transform: every
added vector and every query is normalised inside FAISS, whatever the embedding
model returns, so scores are cosine similarities in ``[-1, 1]``
(:data:`COSINE_RANGE`). The index persists with ``store.persist()`` as usual.

``faiss`` and ``llama-index-vector-stores-faiss`` are imported only when a store
is built (extra ``dprag[llamaindex,faiss]``).

>>> store = cosine_faiss_store(dim=4)
>>> store.client.d
4
"""

from __future__ import annotations

from typing import Any

from dprag_core.validation import missing_extra, positive_int

__all__ = ["COSINE_RANGE", "cosine_faiss_store"]

COSINE_RANGE: tuple[float, float] = (-1.0, 1.0)


def cosine_faiss_store(*, dim: int) -> Any:
    """A ``FaissVectorStore`` over ``IndexPreTransform(L2-normalise, IndexFlatIP(dim))``.

    Use it with ``score_direction="similarity"`` and ``score_range=COSINE_RANGE``.

    >>> from llama_index.core import StorageContext
    >>> ctx = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=8))
    """
    dim = positive_int("dim", dim)
    try:
        import faiss
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError as exc:
        raise missing_extra("cosine_faiss_store", exc, extra="llamaindex,faiss") from exc
    index = faiss.IndexPreTransform(faiss.NormalizationTransform(dim, 2.0), faiss.IndexFlatIP(dim))
    return FaissVectorStore(faiss_index=index)
