"""What a retriever promises about its results, declared before any data is seen.

A ``retriever(question, k)`` may declare two capabilities:

- ``honours_k = True``: each call returns exactly the first ``min(k, N)``
  documents of the store's own rank order for ``question`` (N = the documents
  the store holds for it), best first, with scores that do not increase down the
  list. Then "fewer than k came back" means "the store is exhausted", and the
  first k of the ranking are a function of the corpus.
- ``above(question, tau)``: a native range search returning *every* document
  scoring above ``tau`` (e.g. FAISS ``range_search``).

Which mechanisms need which (checked by :func:`requirement` when a pipeline,
chain or engine is built, never at query time: whether a cap was hit depends on
the data):

- a top-n mechanism (``candidates_needed() = n > 0``: voting, DP-KSA, ...)
  needs ``honours_k``;
- a threshold mechanism (``candidates_needed() = None``: MuRAG, MuRAG-Ada,
  DP-ICL) needs a range search, or ``honours_k`` (the store query is then
  enlarged until the last score falls to the threshold or fewer come back);
- a mechanism that retrieves nothing (``candidates_needed() = 0``) needs neither.

:class:`HonoursK` wraps a plain function with the first declaration: it is the
caller's promise, not something dprag can check.

>>> requirement(4, lambda q, k: []) is not None
True
>>> requirement(4, HonoursK(lambda q, k: [])) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dprag_core.retrieval.documents import ScoredDocument

__all__ = ["HonoursK", "has_range_search", "honours_k", "requirement", "stored_count"]


def honours_k(retriever: object) -> bool:
    """True when ``retriever`` declares ``honours_k = True`` (see the module docstring).

    >>> honours_k(HonoursK(lambda q, k: [])), honours_k(lambda q, k: [])
    (True, False)
    """
    return getattr(retriever, "honours_k", False) is True


def has_range_search(retriever: object) -> bool:
    """True when ``retriever`` has a native ``above(question, tau)`` range search.

    >>> has_range_search(lambda q, k: [])
    False
    """
    return callable(getattr(retriever, "above", None))


def stored_count(retriever: object) -> int | None:
    """How many documents ``retriever`` searches, where it says (``len(retriever)``), else None.

    :class:`~dprag_core.pipeline.PrivateRAG` refuses a retriever that says 0 when
    it is built (:func:`~dprag_core.retrieval.stores.refuse_empty`).

    >>> stored_count([1, 2]), stored_count(lambda q, k: [])
    (2, None)
    """
    length = getattr(type(retriever), "__len__", None)
    return None if length is None else int(length(retriever))


def requirement(needed: int | None, retriever: object) -> str | None:
    """What ``retriever`` lacks for a mechanism asking for ``needed`` candidates, or None.

    ``needed``: the mechanism's ``candidates_needed()``. The answer completes the
    sentence "the mechanism needs ...".

    >>> "range search" in requirement(None, lambda q, k: [])
    True
    >>> requirement(0, lambda q, k: []) is None
    True
    """
    if needed == 0:
        return None
    if needed is not None:
        if honours_k(retriever):
            return None
        return "a source that honours k (its top-k in the store's own rank order)"
    if has_range_search(retriever) or honours_k(retriever):
        return None
    return (
        "a source that returns every document above its threshold "
        "(a native range search, or a store query that honours k)"
    )


class HonoursK:
    """Declares that ``fn(question, k)`` honours k (module docstring): the caller's promise.

    >>> r = HonoursK(lambda q, k: [ScoredDocument(id="a", text="", score=0.5)][:k])
    >>> [d.id for d in r("q", 3)], r.honours_k
    (['a'], True)
    """

    honours_k = True

    def __init__(self, fn: Callable[[str, int], Sequence[ScoredDocument]]) -> None:
        if not callable(fn):
            raise TypeError("fn must be callable as fn(question, k)")
        self.fn = fn

    def __call__(self, question: str, k: int) -> Sequence[ScoredDocument]:
        return self.fn(question, k)

    def __repr__(self) -> str:
        return f"HonoursK({getattr(self.fn, '__name__', type(self.fn).__name__)})"
