"""Retrieve every candidate above a public score threshold from a store that honours k.

MuRAG must charge *every* relevant active unit, and DP-ICL's threshold must see
every unit above its lower bound, so they need all documents with score > tau,
not a top-k. Stores with a native range search (FAISS ``range_search``) answer
directly; for a store whose query honours k (:mod:`~dprag_core.retrieval.capabilities`:
the first k of its ranking, scores not increasing) this doubles k until the last
real score falls to tau or below, or fewer than k come back (the store is
exhausted). Then every document above tau has been seen: the result is a
function of the corpus, and one added unit adds only its own documents.

There is no cap on k: a capped list read as "exhausted" lets one added unit
push others out (whether a cap was hit depends on the data). A retriever that
does not honour k is refused when the pipeline is built.

>>> docs = [ScoredDocument(id=str(i), text="", score=1 - i / 10) for i in range(10)]
>>> len(retrieve_above(lambda q, k: docs[:k], "q", 0.55))
5
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import finite, positive_int

__all__ = ["Retriever", "retrieve_above"]

Retriever = Callable[[str, int], Sequence[ScoredDocument]]


def retrieve_above(
    retriever: Retriever, question: str, tau: float, *, initial_k: int = 32
) -> list[ScoredDocument]:
    """All documents with ``score > tau``, by growing k (doubling) on ``retriever``.

    Placeholders (:func:`~dprag_core.retrieval.documents.admit`) keep their slot
    in the ranking and are dropped from the result.
    """
    tau = finite("tau", tau)
    k = positive_int("initial_k", initial_k)
    while True:
        docs = list(retriever(question, k))[:k]
        real = [d for d in docs if not d.is_padding]
        if len(docs) < k or (real and real[-1].score <= tau):
            return [d for d in real if d.score > tau]
        k *= 2
