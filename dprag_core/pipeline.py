"""The query run: check, charge, retrieve, answer or stream, fall back, in one place.

Every entry point answers through one :class:`QueryRun`: the core's
:class:`PrivateRAG`, LangChain's ``DPRAGChain`` and LlamaIndex's
``DPQueryEngine`` build one when they are built (every build-time check is
its: the mechanism's type, the source it needs, the budget it charges, the
question limit, the public fallback) and only translate around it, framework
objects in and out. The order of the steps is the privacy invariant, so it is
written here once:

1. :meth:`QueryRun.start`: check the question (:func:`~dprag_core.admission.check_query`),
   the query id (:mod:`dprag_core.query_ids`) and the rng, then charge the
   mechanism's fixed cost under the query id, *before* retrieval: a query that
   would overspend is refused before any work, and nothing is released uncharged.
2. :meth:`QueryRun.answer` / :meth:`QueryRun.stream`: retrieve what the
   mechanism asks for (:func:`retrieve_for`; every document through the one
   placeholder policy, :func:`~dprag_core.retrieval.documents.clean_documents`),
   run the mechanism (MuRAG charges its per-unit ledger under the same query
   id before it releases anything), and answer an empty DP answer with the
   public fallback when asked (:mod:`dprag_core.fallback`).

What each framework wraps around the steps is a :class:`RunHooks`: a check
before the charge (LangChain's side doors), the error guard
(:func:`dprag_core.errors.guarded`), the context retrieval runs in
(LlamaIndex's private section), the context every mechanism call runs in
(LangChain's sealed context, LlamaIndex's private section) and what it keeps
of the retrieved documents (LlamaIndex's opt-in ids). The framework's events
and callbacks stay in the adapters: they are translation.

The DP selection steps without a generator (LangChain's ``DPRetriever``,
LlamaIndex's node postprocessors) are here too, one function each:
:func:`select_above_threshold` (charge ``DPThreshold.cost()``, then fetch and
select) and :func:`select_by_ledger` (MuRAG's ledger filter under the query's id).

>>> from dprag_core.algorithms.baselines import NonRAG
>>> class Api:  # a text model
...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
>>> PrivateRAG(NonRAG(Api()), lambda q, k: []).answer("Capital of France?").text
'Paris'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.admission import (
    DEFAULT_MAX_QUESTION_TOKENS,
    HOW_TO_SET_A_BUDGET,
    charge,
    charge_query,
    check_accountant,
    check_query,
    check_source,
    own_accountant,
    question_tokens,
    require_accountant,
)
from dprag_core.algorithms.base import Mechanism, check_question
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.contract import check_mechanism
from dprag_core.answers import DPAnswer
from dprag_core.errors import guarded
from dprag_core.fallback import check_public_fallback, fallback_answer, fallback_stream
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.query_ids import check_query_id, current_query_id, new_query_id, query_scope
from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.capabilities import has_range_search
from dprag_core.retrieval.documents import ScoredDocument, clean_documents
from dprag_core.retrieval.scores import ScoreScale
from dprag_core.retrieval.selection import ledger_filter
from dprag_core.retrieval.threshold import DPThreshold
from dprag_core.retrieval.units import top_units
from dprag_core.validation import positive_int, strict_init

__all__ = [
    "CHARGE_RETRY",
    "CORE_SOURCES",
    "DEFAULT_MAX_QUESTION_TOKENS",
    "HOW_TO_SET_A_BUDGET",
    "PrivateRAG",
    "Query",
    "QueryRun",
    "Released",
    "RunHooks",
    "charge_query",
    "check_accountant",
    "check_query",
    "check_question",
    "check_source",
    "clean_documents",
    "own_accountant",
    "question_tokens",
    "require_accountant",
    "retrieve_for",
    "select_above_threshold",
    "select_by_ledger",
    "selection_query_id",
]

T = TypeVar("T")

CHARGE_RETRY = "retry"
"""``details["charge"]`` of an answer whose corpus charge was the accepted retry of a charge
left in doubt (``LedgerOutcomeUnknown``) under the same query id: charged once, for both."""

_END = object()

CORE_SOURCES = (
    "FaissRetriever (FaissCorpus.as_retriever), CorpusIndex, any retriever with "
    "honours_k = True or a native above(question, tau), or HonoursK(fn) (your promise "
    "that fn(question, k) returns the store's first min(k, N) documents, best first)"
)


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
    What comes back goes through :func:`clean_documents` first; placeholders
    for unusable documents never reach the mechanism.
    """
    n = mechanism.candidates_needed()

    def cleaned(q: str, k: int) -> list[ScoredDocument]:
        return clean_documents(retriever(q, k))

    if n is not None:
        return top_units(cleaned, question, n) if n > 0 else []
    tau = mechanism.min_score()
    assert tau is not None  # refused when the app was built (check_source)
    if has_range_search(retriever):
        found = clean_documents(retriever.above(question, tau))  # type: ignore[attr-defined]
        return [d for d in found if not d.is_padding and d.score > tau]
    return retrieve_above(cleaned, question, tau)


class RunHooks:
    """What a framework wraps around a query run's steps; these defaults are the core's.

    Subclasses override what their framework needs; a new instance per query
    may hold that query's state (a sealed context, the retrieved ids).
    """

    def before_charge(self) -> None:
        """Refuse the query, after its checks and before its charge (default: nothing)."""

    def guard(self, stage: str, where: str, fn: Callable[[], T]) -> T:
        """Run a private step; a failure leaves as a data-free error (:func:`guarded`)."""
        return guarded(stage, where, fn)

    def retrieving(self, fn: Callable[[], T]) -> T:
        """Run the retrieval (default: as it is)."""
        return fn()

    def retrieved(self, docs: Sequence[ScoredDocument]) -> None:
        """See the retrieved candidates, inside the guard (default: nothing is kept)."""

    def generating(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run one call into the mechanism: an answer, a stream's step or its close."""
        return fn(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class Query:
    """A checked and charged query: what :meth:`QueryRun.answer` and ``stream`` run.

    ``retry``: the corpus budget took the charge as the retry of this id's
    charge left in doubt (the answer then says ``details["charge"] == "retry"``).
    """

    question: str
    query_id: str
    rng: np.random.Generator = dataclasses.field(repr=False)
    retry: bool = False


class QueryRun:
    """One DP query's whole sequence, for ``mechanism`` over ``source`` (module docstring).

    Built once per app; every check that can be done then is done here:
    ``mechanism`` must be a :class:`Mechanism`; ``source`` must give it its
    candidates (:func:`check_source`, with ``qualifying`` naming the sources
    that do, ``source_name`` the source in errors, ``scale`` its public score
    range when the source does not carry one); a DP mechanism needs a
    :class:`CorpusAccountant` (:func:`require_accountant`, ``parameter``
    naming the app's keyword for it); ``max_question_tokens`` is a positive
    integer; ``public_fallback`` is checked (:func:`check_public_fallback`);
    ``rng`` (a seed: tests and benchmarks only) starts one generator that every
    query draws from, so queries never reuse noise (default: OS entropy per query).
    ``accountant`` is the checked budget; apps pass theirs again to
    :meth:`start`, which re-checks it (a budget replaced or removed after the
    app was built is refused before anything is charged).

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
    >>> run = QueryRun(NonRAG(Api()), lambda q, k: [], qualifying="any")
    >>> query = run.start("Capital of France?", accountant=None, query_id="q-1")
    >>> query.query_id, run.answer(query, lambda q, k: [], RunHooks()).text
    ('q-1', 'Paris')
    """

    def __init__(
        self,
        mechanism: Mechanism,
        source: object,
        *,
        qualifying: str,
        accountant: CorpusAccountant | None = None,
        max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
        public_fallback: bool | NonRAG = False,
        source_name: str | None = None,
        scale: ScoreScale | None = None,
        parameter: str = "accountant",
        rng: RngLike = None,
    ) -> None:
        check_mechanism(mechanism)
        self.source_name = source_name or str(getattr(source, "__name__", type(source).__name__))
        check_source(mechanism, source, qualifying=qualifying, name=self.source_name, scale=scale)
        self.parameter = parameter
        self.accountant = require_accountant(mechanism, accountant, parameter=parameter)
        self.mechanism = mechanism
        self.max_question_tokens = positive_int("max_question_tokens", max_question_tokens)
        self.fallback = check_public_fallback(public_fallback, mechanism)
        self.rng = None if rng is None else make_rng(rng)

    def start(
        self,
        question: object,
        *,
        accountant: CorpusAccountant | None,
        rng: RngLike = None,
        query_id: object = None,
        hooks: RunHooks | None = None,
    ) -> Query:
        """Check the question, the id, the rng and the budget, then charge: the query to run.

        ``rng`` (a seed or generator) replaces the run's for this query.
        Raises before anything is charged for a bad question, id or rng, or a
        budget that is missing or not the mechanism's own; ``PrivacyBudgetExhausted``
        (nothing charged) when the cost does not fit; ``LedgerOutcomeUnknown``
        when the store may or may not have recorded it: retry with the same
        ``query_id``. Without one the query gets a fresh id
        (:func:`~dprag_core.query_ids.new_query_id`).
        """
        text = check_query(self.mechanism, question, max_question_tokens=self.max_question_tokens)
        qid = new_query_id() if query_id is None else check_query_id(query_id)
        generator = make_rng(self.rng if rng is None else rng)
        if accountant is None:  # still required by a DP mechanism (unless it has its own)
            require_accountant(self.mechanism, None, parameter=self.parameter)
        else:
            check_accountant(accountant, parameter=self.parameter)
        (hooks or RunHooks()).before_charge()
        retry = charge_query(self.mechanism, accountant, query_id=qid)  # NaiveMulti: its own only
        return Query(text, qid, generator, retry)

    def answer(self, query: Query, retriever: Retriever, hooks: RunHooks) -> DPAnswer:
        """Retrieve, answer and fall back: the query's :class:`DPAnswer` (module docstring)."""

        def private() -> DPAnswer:
            docs = self._retrieve(query, retriever, hooks)
            return hooks.generating(self._answer, query, docs)

        return self._receipt(hooks.guard("generation", self.mechanism.name, private), query)

    def stream(self, query: Query, retriever: Retriever, hooks: RunHooks) -> Released:
        """Retrieve now, then :class:`Released`: the text chunks and the DPAnswer, step by step."""

        def private() -> Iterator[str | DPAnswer]:
            docs = self._retrieve(query, retriever, hooks)
            return hooks.generating(self._open, query, docs)

        return Released(self, query, hooks.guard("generation", self.mechanism.name, private), hooks)

    def _retrieve(
        self, query: Query, retriever: Retriever, hooks: RunHooks
    ) -> list[ScoredDocument]:
        def retrieve() -> list[ScoredDocument]:
            return retrieve_for(self.mechanism, retriever, query.question)

        docs = hooks.guard("retrieval", self.source_name, lambda: hooks.retrieving(retrieve))
        hooks.retrieved(docs)
        return docs

    # below the guards: the only frames that hold documents

    def _answer(self, query: Query, docs: list[ScoredDocument]) -> DPAnswer:
        with query_scope(query.query_id):
            result = self.mechanism.answer(query.question, docs, rng=query.rng)
            return fallback_answer(result, self.fallback, query.question)

    def _open(self, query: Query, docs: list[ScoredDocument]) -> Iterator[str | DPAnswer]:
        with query_scope(query.query_id):
            items = self.mechanism.stream(query.question, docs, rng=query.rng)
        return fallback_stream(items, self.fallback, query.question)

    @staticmethod
    def _step(query: Query, items: Iterator[str | DPAnswer]) -> object:
        with query_scope(query.query_id):
            return next(items, _END)

    @staticmethod
    def _receipt(answer: DPAnswer, query: Query) -> DPAnswer:
        if not query.retry:
            return answer
        details = {**answer.details, "charge": CHARGE_RETRY}
        return dataclasses.replace(answer, details=details)

    def __repr__(self) -> str:
        return f"QueryRun(mechanism={self.mechanism!r}, accountant={self.accountant!r})"


class Released(Iterator["str | DPAnswer"]):
    """What a streamed query releases: text chunks, then its DPAnswer, one guarded step each.

    Each step runs through the hooks (guard, then the mechanism's context);
    :meth:`close` closes the mechanism's stream the same way (its frame holds
    the documents), at once and exactly once: call it when a consumer stops early.
    """

    def __init__(
        self,
        run: QueryRun,
        query: Query,
        items: Iterator[str | DPAnswer],
        hooks: RunHooks,
    ) -> None:
        self._run, self._query, self._hooks = run, query, hooks
        self._items: Iterator[str | DPAnswer] | None = items

    def __next__(self) -> str | DPAnswer:
        items = self._items
        if items is None:
            raise StopIteration
        step = lambda: self._hooks.generating(QueryRun._step, self._query, items)  # noqa: E731
        item = self._hooks.guard("generation", self._run.mechanism.name, step)
        if item is _END:
            self._items = None
            raise StopIteration
        if isinstance(item, DPAnswer):
            return QueryRun._receipt(item, self._query)
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Close the mechanism's stream (a paused generator drops its frame) once."""
        items, self._items = self._items, None
        close = getattr(items, "close", None)
        if close is not None:
            self._hooks.guard(
                "generation", self._run.mechanism.name, lambda: self._hooks.generating(close)
            )


class PrivateRAG:
    """A DP RAG app in three parts: a retriever, a mechanism and a corpus budget.

    ``retriever(question, k)`` returns scored candidates, best first, and
    declares what it promises (:mod:`~dprag_core.retrieval.capabilities`): a
    top-n mechanism needs ``honours_k``, a threshold mechanism a native range
    search or ``honours_k``; any other retriever is refused here, with a
    ``ValueError`` naming the sources that qualify. Build each document with
    :func:`~dprag_core.retrieval.documents.admit` when the store's data may be
    malformed: a retriever's own exception after the charge would depend on
    the data. ``accountant`` holds the corpus-level budget that each query's
    fixed cost is charged against before retrieval; it is required for every
    mechanism with a per-query cost (:func:`require_accountant`).
    ``max_question_tokens`` bounds the question's length (:func:`check_query`).
    The question, the ``rng``, the ``query_id`` and the budget are checked
    before anything is charged; a failure after that (retrieval, generation)
    raises a data-free :class:`~dprag_core.errors.PrivateDataError`.
    ``public_fallback=True`` (off by default) answers a query whose DP answer
    released nothing with the mechanism's model on the question alone, marked
    ``details["public_fallback"]`` (no extra privacy cost:
    :mod:`dprag_core.fallback`); a :class:`NonRAG` picks another model or prompt.

    ``query_id`` (each call) names the query's charges
    (:mod:`dprag_core.query_ids`): after ``LedgerOutcomeUnknown``, call again
    with the same id; the answer is then charged once and says
    ``details["charge"] == "retry"``. Without one, each call is a new query.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> rag = PrivateRAG(NonRAG(Api()), lambda q, k: [])
    >>> rag.answer("Who?", rng="seed")
    Traceback (most recent call last):
    ...
    TypeError: rng must be a numpy Generator, an int seed or None, got str
    """

    @strict_init
    def __init__(
        self,
        mechanism: Mechanism,
        retriever: Retriever,
        *,
        accountant: CorpusAccountant | None = None,
        max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
        public_fallback: bool | NonRAG = False,
    ) -> None:
        if not callable(retriever):
            raise TypeError("retriever must be callable as retriever(question, k)")
        self.run = QueryRun(
            mechanism,
            retriever,
            qualifying=CORE_SOURCES,
            accountant=accountant,
            max_question_tokens=max_question_tokens,
            public_fallback=public_fallback,
        )
        self.retriever = retriever
        self.accountant = self.run.accountant

    @property
    def mechanism(self) -> Mechanism:
        """The mechanism every query runs."""
        return self.run.mechanism

    @property
    def max_question_tokens(self) -> int:
        """The longest question accepted, in tokens of the mechanism's model."""
        return self.run.max_question_tokens

    @property
    def public_fallback(self) -> NonRAG | None:
        """The public answerer of empty DP answers, or None (off)."""
        return self.run.fallback

    def _start(self, question: object, rng: RngLike, query_id: str | None) -> Query:
        return self.run.start(question, accountant=self.accountant, rng=rng, query_id=query_id)

    def answer(
        self, question: str, *, rng: RngLike = None, query_id: str | None = None
    ) -> DPAnswer:
        """Check, charge (under ``query_id``), retrieve and answer one question."""
        query = self._start(question, rng, query_id)
        return self.run.answer(query, self.retriever, RunHooks())

    def stream(
        self, question: str, *, rng: RngLike = None, query_id: str | None = None
    ) -> Iterator[str | DPAnswer]:
        """Like :meth:`answer`, yielding released text chunks then the DPAnswer."""
        query = self._start(question, rng, query_id)
        released = self.run.stream(query, self.retriever, RunHooks())
        try:
            yield from released
        finally:
            released.close()

    def __repr__(self) -> str:
        return f"PrivateRAG(mechanism={self.mechanism!r}, accountant={self.accountant!r})"


def select_above_threshold(
    selector: DPThreshold,
    accountant: CorpusAccountant,
    candidates: Callable[[], Sequence[ScoredDocument]],
    *,
    query_id: str | None = None,
    rng: RngLike = None,
) -> list[ScoredDocument]:
    """Grislain's DP threshold as a step of its own: charge, then fetch and select.

    ``selector.cost()`` is charged to ``accountant`` under the query's id
    (:func:`selection_query_id`) *before* ``candidates()`` runs, so a query that
    would overspend is refused before the store is searched. ``candidates``
    must return every unit scoring above the selector's lower bound (the
    completeness :class:`~dprag_core.retrieval.threshold.DPThreshold`'s claim
    needs); the units above the DP threshold come back. Used by LangChain's
    ``DPRetriever`` and LlamaIndex's ``DPThresholdPostprocessor``.

    >>> from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    >>> from dprag_core.budget import Budget
    >>> acc = InMemoryCorpusAccountant(Budget(1.0))
    >>> docs = [ScoredDocument("a", "", 0.9), ScoredDocument("b", "", 0.1)]
    >>> sel = DPThreshold(epsilon=1.0, bounds=(0.0, 1.0), k=1)
    >>> len(select_above_threshold(sel, acc, lambda: docs, rng=0)) >= 0, acc.spent_epsilon
    (True, 1.0)
    """
    charge(accountant, selector.cost(), query_id=selection_query_id(query_id))
    return list(selector.select(candidates(), rng=rng))


def select_by_ledger(
    docs: Sequence[ScoredDocument],
    *,
    ledger: Ledger,
    tau: float,
    cost: float,
    k: int,
    query_id: str | None = None,
) -> list[ScoredDocument]:
    """MuRAG's ledger filter under the query's id (:func:`selection_query_id`).

    :func:`~dprag_core.retrieval.selection.ledger_filter` records every charge
    under that id, so a retry after ``LedgerOutcomeUnknown`` with the same id
    is charged once. Used by LangChain's ``DPRetriever`` and LlamaIndex's
    ``PrivacyBudgetPostprocessor``.
    """
    qid = selection_query_id(query_id)
    return ledger_filter(docs, ledger=ledger, tau=tau, cost=cost, k=k, query_id=qid)


def selection_query_id(query_id: object = None) -> str:
    """A selection step's query id: ``query_id`` (checked), else the current run's, else fresh.

    The current run's id is set by :func:`~dprag_core.query_ids.query_scope`
    (``DPRetriever`` sets its retriever run's ``run_id``).

    >>> selection_query_id("q-7"), len(selection_query_id())
    ('q-7', 36)
    """
    if query_id is not None:
        return check_query_id(query_id)
    return current_query_id() or new_query_id()
