"""Retrieve every candidate above a public score threshold with any top-k retriever.

MuRAG must charge *every* relevant active unit, so it needs all documents with
score > tau, not a top-k. Stores with a native range search (FAISS
``range_search``) answer directly; for any other store this fallback doubles k
until the last score falls to tau or below, or the store runs out.

>>> docs = [ScoredDocument(id=str(i), text="", score=1 - i / 10) for i in range(10)]
>>> len(retrieve_above(lambda q, k: docs[:k], "q", 0.55))
5
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dprag_core._validation import finite, positive_int
from dprag_core.retrieval.documents import ScoredDocument

__all__ = ["Retriever", "retrieve_above"]

Retriever = Callable[[str, int], Sequence[ScoredDocument]]


def retrieve_above(
    retriever: Retriever,
    question: str,
    tau: float,
    *,
    initial_k: int = 32,
    max_k: int = 1_000_000,
) -> list[ScoredDocument]:
    """All documents with ``score > tau``, by growing k (doubling) on ``retriever``."""
    tau = finite("tau", tau)
    k = positive_int("initial_k", initial_k)
    max_k = positive_int("max_k", max_k)
    while True:
        docs = list(retriever(question, k))
        exhausted = len(docs) < k or k >= max_k
        if exhausted or not docs or docs[-1].score <= tau:
            return [d for d in docs if d.score > tau]
        k = min(2 * k, max_k)
