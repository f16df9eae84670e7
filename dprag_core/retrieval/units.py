"""Top-n retrieval at the level of privacy units.

Voting mechanisms (DPVote, DPSparseVote, DP-KSA, ...) are proven for a
retrieved set in which adding or removing one privacy unit *substitutes* one
unit (Koga et al.; DESIGN §1). That holds for a top-n list of units, each
represented by its best-matching chunk:

* the top-n units ranked by their best chunk's score change by at most one
  substitution when one unit is added or removed, and
* a unit's best chunk depends on that unit alone.

A top-n list of *chunks* does not: a unit with c chunks can push c other
chunks, held by up to c voters, out of the list. So each unit contributes its
best chunk only, and k grows until n distinct units are found or the store is
exhausted.

>>> docs = [ScoredDocument(id=f"c{i}", text="", score=1 - i / 10, unit=f"u{i // 2}")
...         for i in range(10)]
>>> [d.id for d in top_units(lambda q, k: docs[:k], "q", 3)]
['c0', 'c2', 'c4']
"""

from __future__ import annotations

from collections.abc import Iterable

from dprag_core._validation import positive_int
from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.documents import ScoredDocument

__all__ = ["best_chunk_per_unit", "top_units"]


def best_chunk_per_unit(docs: Iterable[ScoredDocument]) -> list[ScoredDocument]:
    """Each privacy unit's best chunk, best first (ties broken by id).

    >>> docs = [ScoredDocument(id="a", text="", score=0.2, unit="u"),
    ...         ScoredDocument(id="b", text="", score=0.9, unit="u")]
    >>> [d.id for d in best_chunk_per_unit(docs)]
    ['b']
    """
    best: dict[str, ScoredDocument] = {}
    for doc in sorted(docs, key=lambda d: (-d.score, d.id)):
        best.setdefault(doc.unit, doc)
    return list(best.values())


def top_units(
    retriever: Retriever, question: str, n: int, *, max_k: int = 1_000_000
) -> list[ScoredDocument]:
    """The best chunk of each of the top ``n`` privacy units, best first."""
    n = positive_int("n", n)
    k = n
    while True:
        docs = list(retriever(question, k))
        units = best_chunk_per_unit(docs)
        if len(units) >= n or len(docs) < k or k >= max_k:
            return units[:n]
        k = min(2 * k, max_k)
