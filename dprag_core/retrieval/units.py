"""Top-n retrieval at the level of privacy units, in the store's own rank order.

Voting mechanisms (DPVote, DPSparseVote, DP-KSA, ...) are proven for a
retrieved set in which adding or removing one privacy unit *substitutes* one
unit (Koga et al.; docs/design.md §1). :func:`top_units` returns **the first n distinct
units of the store's ranking**, each by its first (best-ranked) chunk:

* The store ranks chunks by a function of (query, chunk) with its own tie rule,
  so adding a unit inserts its chunks into the ranking and leaves the relative
  order of every other chunk unchanged. The order of the *units* by their first
  chunk is then the old order with one unit inserted: the first n units change
  by at most one substitution (the new unit in, the n-th old one out).
* A unit with c chunks takes one place, not c: a chunk-level top-n would let it
  push c other chunks, held by up to c voters, out of the list.
* Nothing is re-sorted. Re-sorting a window by (score, id) would rank tied
  chunks (every chunk of a retriever without scores) by id inside a window whose
  width depends on how many chunks each unit owns: "the n smallest ids in a
  data-dependent window", not a top-n.

The retriever must honour k (:mod:`~dprag_core.retrieval.capabilities`): k
doubles until the first k chunks hold n distinct units or fewer than k come
back (the store is exhausted). There is no cap: a capped list would let one
added unit push others out. Placeholders (unusable documents, see
:func:`~dprag_core.retrieval.documents.admit`) keep their slot but are skipped.

>>> docs = [ScoredDocument(id=f"c{i}", text="", score=1 - i / 10, unit=f"u{i // 2}")
...         for i in range(10)]
>>> [d.id for d in top_units(lambda q, k: docs[:k], "q", 3)]
['c0', 'c2', 'c4']
"""

from __future__ import annotations

from collections.abc import Iterable

from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_int

__all__ = ["best_chunk_per_unit", "first_chunk_per_unit", "group_by_unit", "top_units"]


def group_by_unit(docs: Iterable[ScoredDocument]) -> dict[str, list[ScoredDocument]]:
    """Real (non-padding) documents grouped by privacy unit, in first-seen order.

    >>> d = [ScoredDocument(id="a", text="", score=0.1, unit="u"),
    ...      ScoredDocument(id="b", text="", score=0.2, unit="u")]
    >>> list(group_by_unit(d))
    ['u']
    """
    groups: dict[str, list[ScoredDocument]] = {}
    for doc in docs:
        if not doc.is_padding:
            groups.setdefault(doc.unit, []).append(doc)
    return groups


def first_chunk_per_unit(docs: Iterable[ScoredDocument]) -> list[ScoredDocument]:
    """Each privacy unit's first chunk, in the given (rank) order; placeholders skipped.

    >>> docs = [ScoredDocument(id="b", text="", score=0.5, unit="u"),
    ...         ScoredDocument(id="a", text="", score=0.5, unit="v"),
    ...         ScoredDocument(id="c", text="", score=0.5, unit="u")]
    >>> [d.id for d in first_chunk_per_unit(docs)]
    ['b', 'a']
    """
    first: dict[str, ScoredDocument] = {}
    for doc in docs:
        if not doc.is_padding:
            first.setdefault(doc.unit, doc)
    return list(first.values())


def best_chunk_per_unit(docs: Iterable[ScoredDocument]) -> list[ScoredDocument]:
    """Each privacy unit's best chunk, best first (ties broken by id).

    For a *complete* candidate set only (every unit above a public threshold):
    (score, id) is then a fixed order on documents, so the k best units change
    by one substitution between neighbours. Never use it on a top-k window.

    >>> docs = [ScoredDocument(id="a", text="", score=0.2, unit="u"),
    ...         ScoredDocument(id="b", text="", score=0.9, unit="u")]
    >>> [d.id for d in best_chunk_per_unit(docs)]
    ['b']
    """
    return first_chunk_per_unit(sorted(docs, key=lambda d: (-d.score, d.id)))


def top_units(retriever: Retriever, question: str, n: int) -> list[ScoredDocument]:
    """The first chunk of each of the first ``n`` privacy units in the retriever's ranking."""
    n = positive_int("n", n)
    k = n
    while True:
        docs = list(retriever(question, k))[:k]
        units = first_chunk_per_unit(docs)
        if len(units) >= n or len(docs) < k:
            return units[:n]
        k *= 2
