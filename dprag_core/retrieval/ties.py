"""A store's top-k made into one fixed ranking: complete tie groups, ties broken by id.

A vector store returns its k best by score, but documents with *equal* scores
(duplicated chunks, clipped or rounded scores) come back in an order, and are
cut at k in a way, that may depend on the whole store (``argsort`` is not
stable, FAISS keeps a heap). One added document could then reorder two other
documents tied at the cut, and the top-k would differ by more than the one
document. :func:`tie_complete` asks for one more than k and, while the
document after the cut ties with the last one kept, for more (doubling), then
orders the documents by the store's score order with ties broken by id. The
result is the first ``min(k, N)`` of a ranking that is a function of the
(query, document) pairs alone, so it honours k (:mod:`~dprag_core.retrieval.capabilities`).

>>> rows = [("b", 0.9), ("c", 0.5), ("a", 0.5), ("d", 0.1)]
>>> tie_complete(lambda k: rows[:k], 2, score=lambda r: r[1], ident=lambda r: r[0])
[('b', 0.9), ('a', 0.5)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from dprag_core.validation import positive_int

__all__ = ["tie_complete"]

T = TypeVar("T")


def tie_complete(
    search: Callable[[int], Sequence[T]],
    k: int,
    *,
    score: Callable[[T], float],
    ident: Callable[[T], str],
) -> list[T]:
    """The first ``k`` of ``search``'s ranking with tie groups completed and ordered by id.

    ``search(n)`` must return the store's n best, in its score order (either
    direction); ``score`` reads an item's raw store score, ``ident`` its id.
    """
    k = positive_int("k", k)
    n = k + 1
    while True:
        items = list(search(n))[:n]
        if len(items) < n or score(items[-1]) != score(items[k - 1]):
            break
        n *= 2
    first: dict[float, int] = {}  # a tie group ranks where its first member came back
    group = [first.setdefault(s, i) if s == s else i for i, s in enumerate(map(score, items))]
    order = sorted(range(len(items)), key=lambda i: (group[i], ident(items[i])))
    return [items[i] for i in order[:k]]
