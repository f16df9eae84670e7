"""Question -> charge -> retrieve -> mechanism: the framework-neutral DP RAG loop.

Adapters follow the same order: the fixed cost is charged *before* retrieval,
so a query that would overspend is refused before any work, and nothing is
released uncharged. Mechanisms with per-unit ledgers (MuRAG) charge their
ledger inside ``answer`` before they release anything.

>>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism, check_question
from dprag_core.budget import DPAnswer
from dprag_core.mechanisms._rng import RngLike
from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.capabilities import has_range_search, requirement
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.units import top_units

__all__ = ["PrivateRAG", "charge_query", "check_question", "check_source", "retrieve_for"]

CORE_SOURCES = (
    "FaissRetriever (FaissCorpus.as_retriever), CorpusIndex, any retriever with "
    "honours_k = True or a native above(question, tau), or HonoursK(fn) (your promise "
    "that fn(question, k) returns the store's first min(k, N) documents, best first)"
)


def check_source(
    mechanism: Mechanism, retriever: object, *, qualifying: str, name: str | None = None
) -> None:
    """Refuse, when an app is built, a retriever that cannot give ``mechanism`` its candidates.

    Never checked at query time: whether a store capped its answer depends on
    the data. ``qualifying`` names the sources that do qualify, and ``name`` the
    source (default: its type), for the error.

    >>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
    >>> check_source(NonRAG(model), lambda q, k: [], qualifying="...")  # doctest: +SKIP
    """
    lacking = requirement(mechanism.candidates_needed(), retriever)
    if lacking is not None:
        raise ValueError(
            f"{mechanism.name} needs {lacking}; {name or type(retriever).__name__} does not "
            f"declare it. Sources that qualify: {qualifying}"
        )


def charge_query(
    mechanism: Mechanism, accountant: CorpusAccountant | None, *, query_id: str | None = None
) -> None:
    """Charge the mechanism's fixed per-query cost; raises PrivacyBudgetExhausted first.

    ``query_id`` names this query's charge (a durable accountant records it
    once, so a retry with the same id after an unknown outcome is safe);
    ``None`` gives a fresh id.
    """
    cost = mechanism.query_cost()
    if accountant is not None and cost is not None:
        accountant.charge(cost, query_id=uuid.uuid4().hex if query_id is None else query_id)


def retrieve_for(mechanism: Mechanism, retriever: Retriever, question: str) -> list[ScoredDocument]:
    """Retrieve what ``mechanism`` asks for (the retriever was checked by :func:`check_source`).

    A count n means the first n *privacy units* of the store's ranking, each by
    its first chunk (:func:`~dprag_core.retrieval.units.top_units`): one added
    unit then substitutes at most one unit, as the voting proofs need. ``None``
    means every chunk above the mechanism's public ``min_score`` (MuRAG,
    DP-ICL): a threshold keeps each chunk on its own merit, so one added unit
    adds only its own chunks; a retriever with its own range search
    (``retriever.above(question, tau)``, e.g. FAISS ``range_search``) is used
    directly, otherwise its k-honouring query grows until it has returned
    everything above the threshold (:func:`~dprag_core.retrieval.above.retrieve_above`).
    Placeholders for unusable documents never reach the mechanism.
    """
    n = mechanism.candidates_needed()
    if n is not None:
        return top_units(retriever, question, n) if n > 0 else []
    tau = mechanism.min_score()
    if tau is None:
        raise ValueError(f"{mechanism.name} asks for neither a candidate count nor a min_score")
    if has_range_search(retriever):
        found = retriever.above(question, tau)  # type: ignore[attr-defined]
        return [d for d in found if not d.is_padding and d.score > tau]
    return retrieve_above(retriever, question, tau)


class PrivateRAG:
    """A DP RAG app in three parts: a retriever, a mechanism and a budget.

    ``retriever(question, k)`` returns scored candidates, best first, and
    declares what it promises (:mod:`~dprag_core.retrieval.capabilities`): a
    top-n mechanism needs ``honours_k``, a threshold mechanism a native range
    search or ``honours_k``; any other retriever is refused here, with a
    ``ValueError`` naming the sources that qualify. ``accountant`` (optional)
    holds the corpus-level budget that each query's fixed cost is charged
    against before retrieval.
    """

    def __init__(
        self,
        mechanism: Mechanism,
        retriever: Retriever,
        *,
        accountant: CorpusAccountant | None = None,
    ) -> None:
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be a dprag Mechanism, got {type(mechanism).__name__}")
        if not callable(retriever):
            raise TypeError("retriever must be callable as retriever(question, k)")
        check_source(mechanism, retriever, qualifying=CORE_SOURCES)
        self.mechanism = mechanism
        self.retriever = retriever
        self.accountant = accountant

    def _prepare(self, question: str) -> Sequence[ScoredDocument]:
        check_question(question)
        charge_query(self.mechanism, self.accountant)
        return retrieve_for(self.mechanism, self.retriever, question)

    def answer(self, question: str, *, rng: RngLike = None) -> DPAnswer:
        """Charge, retrieve and answer one question."""
        docs = self._prepare(question)
        return self.mechanism.answer(question, docs, rng=rng)

    def stream(self, question: str, *, rng: RngLike = None) -> Iterator[str | DPAnswer]:
        """Like :meth:`answer`, yielding released text chunks then the DPAnswer."""
        docs = self._prepare(question)
        yield from self.mechanism.stream(question, docs, rng=rng)

    def __repr__(self) -> str:
        return f"PrivateRAG(mechanism={self.mechanism!r}, accountant={self.accountant!r})"
