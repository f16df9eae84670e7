"""The query run: check, charge, retrieve, answer or stream, fall back, in one place.

Every entry point answers through one :class:`QueryRun`: the core's
:class:`PrivateRAG`, LangChain's ``DPRAGChain`` and LlamaIndex's
``DPQueryEngine`` build one when they are built (every build-time check is
its: the mechanism's type, the source it needs, the budget it charges, the
question limit, the public fallback) and only translate around it, framework
objects in and out. The order of the steps is the privacy invariant, so it is
written here once:

1. :meth:`QueryRun.start`, public: check the question
   (:func:`~dprag_core.admission.check_query`), the query id
   (:mod:`dprag_core.query_ids`) and the rng, then write the query's record
   under its id, *before* retrieval: the mechanism's fixed cost charged to the
   corpus budget (a query that would overspend is refused before any work, and
   nothing is released uncharged) and, for a mechanism with a per-unit ledger
   (MuRAG, MuRAG-Ada), the ledger's claim of the id
   (:meth:`~dprag_core.accounting.ledger.Ledger.claim`). Whatever is raised here
   (a bad input, ``PrivacyBudgetExhausted``, ``QueryIdReused``, a budget
   store's ``LedgerUnavailable``) depends on public inputs and the stores
   only, and leaves as itself.
2. :meth:`QueryRun.answer` / :meth:`QueryRun.stream`: the **private section**,
   everything that reads the corpus: retrieve what the mechanism asks for
   (:func:`retrieve_for`; every document through the one placeholder policy,
   :func:`~dprag_core.retrieval.documents.clean_documents`), run the mechanism
   (MuRAG charges its per-unit ledger under the same query id before it
   releases anything), answer an empty DP answer with the public fallback when
   asked (:mod:`dprag_core.fallback`), and check the release against the
   mechanism contract (:func:`~dprag_core.algorithms.contract.check_answer`).

Exactly three things leave the private section: the DP release (the
``DPAnswer``'s text, streamed chunk by chunk or whole, and its guarantee), its
public ``details`` (keys of the contract's vocabulary only, each value of its
kind: checked on every release), and, on any failure inside, the one fixed
:class:`~dprag_core.errors.PrivateDataError`, whose class and message are the
same whatever failed (:func:`~dprag_core.errors.guarded`). A query that failed
before releasing anything may be retried with the same id on the same
:class:`QueryRun`: its record is not written again, and what it charged inside
stands (:mod:`dprag_core.query_ids`).

What each framework wraps around the steps is a :class:`RunHooks`: a check
before the charge (LangChain's side doors), the context retrieval runs in
(LlamaIndex's private section), the context every mechanism call runs in
(LangChain's sealed context, LlamaIndex's private section) and what it keeps
of the retrieved documents (LlamaIndex's opt-in ids); the seal is the run's
own. The framework's events and callbacks stay in the adapters: they are
translation of what left the section.

The DP selection steps without a generator (LangChain's ``DPRetriever``,
LlamaIndex's node postprocessors) are here too, one function each:
:func:`select_above_threshold` (charge ``DPThreshold.cost()``, then fetch and
select) and :func:`select_by_ledger` (claim the query's id, then fetch and run MuRAG's
ledger filter), each fetching only after its public step, in a private section of its own
(:func:`private_step`).

>>> from dprag_core.algorithms.baselines import NonRAG
>>> class Api:  # a text model
...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
>>> PrivateRAG(NonRAG(Api()), lambda q, k: []).answer("Capital of France?").text
'Paris'
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.accounting.stores.retries import PendingRetries
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
from dprag_core.algorithms.base import Mechanism, MechanismWrapper, check_question
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.contract import check_answer, check_mechanism
from dprag_core.answers import DPAnswer
from dprag_core.deadline import Deadline, as_deadline
from dprag_core.errors import guarded
from dprag_core.fallback import check_public_fallback, fallback_answer, fallback_stream
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.models.text_envelope import DPRAG_PACKAGES
from dprag_core.query_ids import Query, check_query_id, new_query_id
from dprag_core.quiet_logs import muted_logs
from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.capabilities import has_range_search, stored_count
from dprag_core.retrieval.documents import ScoredDocument, clean_documents
from dprag_core.retrieval.scores import ScoreScale
from dprag_core.retrieval.selection import ledger_filter
from dprag_core.retrieval.stores import refuse_empty
from dprag_core.retrieval.threshold import DPThreshold
from dprag_core.retrieval.units import top_units
from dprag_core.validation import positive_int, strict_init

__all__ = [
    "CHARGE_RETRY",
    "CORE_SOURCES",
    "DEFAULT_MAX_QUESTION_TOKENS",
    "HOW_TO_SET_A_BUDGET",
    "PrivateRAG",
    "QueryRun",
    "Released",
    "RunHooks",
    "StartedQuery",
    "as_answered",
    "charge_query",
    "check_accountant",
    "check_query",
    "check_question",
    "check_source",
    "clean_documents",
    "own_accountant",
    "private_step",
    "question_tokens",
    "require_accountant",
    "retrieve_for",
    "select_above_threshold",
    "select_by_ledger",
    "selection_query_id",
    "streams_own_text",
]

T = TypeVar("T")

_END = object()

CHARGE_RETRY = "retry"
"""``details["charge"]`` of an answer whose query id was accepted as a retry (a record left in
doubt by ``LedgerOutcomeUnknown``, or a query that failed before releasing): charged once."""

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

    def retrieving(self, fn: Callable[[], T]) -> T:
        """Run the retrieval (default: as it is)."""
        return fn()

    def retrieved(self, docs: Sequence[ScoredDocument]) -> None:
        """See the retrieved candidates, inside the private section (default: nothing kept)."""

    def generating(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run one call into the mechanism: an answer, a stream's step or its close."""
        return fn(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class StartedQuery:
    """A checked and charged query: what :meth:`QueryRun.answer` and ``stream`` run.

    ``query``: its public values (:class:`~dprag_core.query_ids.Query`), handed
    to the mechanism as they are. ``query.retry``: the query's id was accepted
    as a retry, before the private section: of its record left in doubt
    (``LedgerOutcomeUnknown``), or of this run's own query that failed before
    releasing anything (the answer then says ``details["charge"] == "retry"``).
    ``began``: when its checks began (``time.monotonic()``; a deadline counts from it).
    """

    query: Query
    began: float = dataclasses.field(default_factory=time.monotonic, repr=False)


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
    ``deadline`` (seconds) holds every answer until that long after the query
    started (:mod:`dprag_core.deadline`; off by default);
    ``rng`` (a seed: tests and benchmarks only) starts one generator that every
    query draws from, so queries never reuse noise (default: OS entropy per query).
    ``accountant`` is the checked budget; apps pass theirs again to
    :meth:`start`, which re-checks it (a budget replaced or removed after the
    app was built is refused before anything is charged). The run remembers
    (in memory, bounded) the ids of its queries that failed inside their
    private section before releasing anything: the only ids it accepts again.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
    >>> run = QueryRun(NonRAG(Api()), lambda q, k: [], qualifying="any")
    >>> started = run.start("Capital of France?", accountant=None, query_id="q-1")
    >>> started.query.id, run.answer(started, lambda q, k: [], RunHooks()).text
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
        deadline: Deadline | float | None = None,
    ) -> None:
        check_mechanism(mechanism)
        self.deadline = as_deadline(deadline)  # opt-in: results held (dprag_core.deadline)
        self.source_name = source_name or str(getattr(source, "__name__", type(source).__name__))
        check_source(mechanism, source, qualifying=qualifying, name=self.source_name, scale=scale)
        self.parameter = parameter
        self.accountant = require_accountant(mechanism, accountant, parameter=parameter)
        self.mechanism = mechanism
        self.max_question_tokens = positive_int("max_question_tokens", max_question_tokens)
        self.fallback = check_public_fallback(public_fallback, mechanism)
        self.rng = None if rng is None else make_rng(rng)
        self.ledger = mechanism.unit_ledger()
        self._live = streams_own_text(mechanism)  # else: a stream is checked whole first
        self._failed = PendingRetries()  # ids of queries that failed before releasing

    def start(
        self,
        question: object,
        *,
        accountant: CorpusAccountant | None,
        rng: RngLike = None,
        query_id: object = None,
        hooks: RunHooks | None = None,
    ) -> StartedQuery:
        """Check the question, the id, the rng and the budget, then record: the query to run.

        ``rng`` (a seed or generator) replaces the run's for this query.
        Raises before anything is charged for a bad question, id or rng, or a
        budget that is missing or not the mechanism's own; ``PrivacyBudgetExhausted``
        (nothing charged) when the cost does not fit; ``QueryIdReused`` for an
        id already recorded; ``LedgerOutcomeUnknown`` when the store may or may
        not have recorded it: retry with the same ``query_id``. Without one the
        query gets a fresh id (:func:`~dprag_core.query_ids.new_query_id`).
        Everything here is public: it depends on the inputs and the budget
        stores, never on the corpus (module docstring).
        """
        began = time.monotonic()  # a deadline counts from here
        text = check_query(self.mechanism, question, max_question_tokens=self.max_question_tokens)
        qid = new_query_id() if query_id is None else check_query_id(query_id)
        generator = make_rng(self.rng if rng is None else rng)
        if accountant is None:  # still required by a DP mechanism (unless it has its own)
            require_accountant(self.mechanism, None, parameter=self.parameter)
        else:
            check_accountant(accountant, parameter=self.parameter)
        (hooks or RunHooks()).before_charge()
        retry = self._record(qid, accountant)
        return StartedQuery(Query(text, id=qid, retry=retry, rng=generator), began)

    def _record(self, query_id: str, accountant: CorpusAccountant | None) -> bool:
        """Write the query's record before its private section; True for an accepted retry.

        The corpus charge (NaiveMulti: its own accountant only) and the
        ledger's claim of the id. An id of this run's own query that failed
        before releasing anything is recorded already: accepted once more.
        The claim is seen by every later claim and charge when this returns
        (a reuse is refused from then on) and made durable by the query's
        first ledger charge, or by :meth:`_settle` before anything is released
        (``Ledger.claim(durable=False)``): a query costs one durable ledger
        commit, not two.
        """
        if self._failed.take(query_id) is not None:
            return True
        retry = charge_query(self.mechanism, accountant, query_id=query_id)
        if self.ledger is not None and not self.ledger.claim(query_id, durable=False):
            retry = True
        return retry

    def _settle(self) -> None:
        """Make the query's claim durable before anything of it leaves (``Ledger.settle``:
        free when the query's charge already did)."""
        if self.ledger is not None:
            self.ledger.settle()

    def answer(self, started: StartedQuery, retriever: Retriever, hooks: RunHooks) -> DPAnswer:
        """The private section, whole: the query's checked :class:`DPAnswer` (module docstring)."""
        query = started.query

        def private() -> DPAnswer:
            docs = self._retrieve(query, retriever, hooks)
            return self._release(query, hooks.generating(self._answer, query, docs))

        held = (
            private if self.deadline is None else self.deadline.held(private, started=started.began)
        )
        return self._sealed(query, held, released=False)

    def stream(self, started: StartedQuery, retriever: Retriever, hooks: RunHooks) -> Released:
        """Retrieve now, then :class:`Released`: the text chunks and the DPAnswer, step by step.

        With a deadline, the whole answer is held (:meth:`answer`), then released as one chunk.
        """
        query = started.query
        if self.deadline is not None:
            done = self.answer(started, retriever, hooks)
            return Released(self, query, iter([done.text, done] if done.text else [done]), hooks)

        def private() -> Iterator[str | DPAnswer]:
            docs = self._retrieve(query, retriever, hooks)
            return hooks.generating(self._open, query, docs)

        return Released(self, query, self._sealed(query, private, released=False), hooks)

    def _sealed(self, query: Query, fn: Callable[[], T], *, released: bool) -> T:
        """Run a step of the private section: its result, or the one fixed failure.

        A failure before anything was ``released`` leaves the query open to a
        retry with its id (:meth:`_record`). The step is quiet
        (:func:`private_step`): no log record, warning or Python-level
        stdout/stderr write made inside it is shown.
        """
        try:
            return private_step(fn)
        except Exception:
            del fn  # its closure holds the retriever and the hooks: not in a failure's frames
            if not released:
                self._failed.remember(query.id, True)
            raise

    # inside the private section: the only frames that hold documents

    def _retrieve(
        self, query: Query, retriever: Retriever, hooks: RunHooks
    ) -> list[ScoredDocument]:
        def retrieve() -> list[ScoredDocument]:
            return retrieve_for(self.mechanism, retriever, query.question)

        docs = hooks.retrieving(retrieve)
        hooks.retrieved(docs)
        return docs

    def _answer(self, query: Query, docs: list[ScoredDocument]) -> DPAnswer:
        result = self.mechanism.answer(query, docs)  # the Query itself: its id, retry and rng
        return fallback_answer(result, self.fallback, query.question)

    def _open(self, query: Query, docs: list[ScoredDocument]) -> Iterator[str | DPAnswer]:
        items = self.mechanism.stream(query, docs)
        joined = as_answered(items, live=self._live)
        return fallback_stream(joined, self.fallback, query.question)

    def _step(self, query: Query, items: Iterator[str | DPAnswer]) -> object:
        """The stream's next release (a text chunk, or the checked DPAnswer), ``_END`` after."""
        item: object = next(items, _END)
        if item is _END:
            return item
        if isinstance(item, str):
            self._settle()
            return item
        return self._release(query, item)

    def _release(self, query: Query, answer: object) -> DPAnswer:
        """The DPAnswer as it may leave: the receipt added, checked against the contract,
        the query's claim durable."""
        self._settle()
        if query.retry and isinstance(answer, DPAnswer):
            answer = dataclasses.replace(answer, details={**answer.details, "charge": CHARGE_RETRY})
        return check_answer(self.mechanism, answer)

    def __repr__(self) -> str:
        return f"QueryRun(mechanism={self.mechanism!r}, accountant={self.accountant!r})"


def streams_own_text(mechanism: Mechanism) -> bool:
    """True when every ``stream`` of ``mechanism`` (and of the mechanisms it wraps) is dprag's.

    Read from the types: the class of each mechanism's MRO that defines
    ``stream`` must come from a dprag package. dprag's own streams are held to
    the contract by its conformance tests (their chunks join to the answer's
    text); a mechanism of the user's own is not trusted to be.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> streams_own_text(NonRAG(Api()))
    True
    """
    node: object = mechanism
    while isinstance(node, Mechanism):
        owner = next(cls for cls in type(node).__mro__ if "stream" in vars(cls))
        if str(owner.__module__).split(".")[0] not in DPRAG_PACKAGES:
            return False
        node = node.inner if isinstance(node, MechanismWrapper) else None
    return True


def as_answered(items: Iterator[str | DPAnswer], *, live: bool) -> Iterator[str | DPAnswer]:
    """A mechanism's stream, held to its answer: the chunks joined are the answer's text.

    ``live`` (dprag's own mechanisms: :func:`streams_own_text`): each chunk
    leaves as it comes, and a stream whose chunks turn out not to join to the
    answer's text fails at its end (inside the private section: the one fixed
    failure, and the answer is not released). Otherwise (a mechanism of the
    user's own) the whole stream is run first and checked before its first
    chunk leaves: a stream of other chunks is refused before anything is
    released, and what is released is exactly the answer's text, chunk by chunk.

    >>> list(as_answered(iter(["Par", "is", DPAnswer("Paris", None, "M")]), live=False))[:2]
    ['Par', 'is']
    >>> list(as_answered(iter(["Rome", DPAnswer("Paris", None, "M")]), live=False))
    Traceback (most recent call last):
    ...
    ValueError: a mechanism's stream must yield text chunks that join to its DPAnswer's text, ...
    """
    if not live:
        whole = list(items)  # the whole stream, before any chunk leaves
        _check_joined(whole)
        yield from whole
        return
    chunks: list[str | DPAnswer] = []
    for item in items:
        chunks.append(item)
        if isinstance(item, DPAnswer):
            _check_joined(chunks)
        yield item


def _check_joined(items: Sequence[str | DPAnswer]) -> None:
    *chunks, last = items or [""]
    if (
        not isinstance(last, DPAnswer)
        or not all(isinstance(c, str) for c in chunks)
        or "".join(c for c in chunks if isinstance(c, str)) != last.text
    ):
        raise ValueError(
            "a mechanism's stream must yield text chunks that join to its DPAnswer's text, "
            "then that DPAnswer (docs/new-mechanism.md)"
        )


class Released(Iterator["str | DPAnswer"]):
    """What a streamed query releases: text chunks, then its DPAnswer, one sealed step each.

    Each step runs in the query's private section (the run's seal, then the
    hooks' context for the mechanism): a text chunk or the checked DPAnswer
    leaves it, or the one fixed failure. The chunks joined are the answer's
    text (:func:`as_answered`): a mechanism of the user's own is run whole and
    checked before its first chunk leaves. :meth:`close` closes the mechanism's
    stream the same way (its frame holds the documents), at once and exactly
    once: call it when a consumer stops early.
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
        self._released = False  # a text chunk or the answer has left: no retry

    def __next__(self) -> str | DPAnswer:
        items = self._items
        if items is None:
            raise StopIteration
        step = lambda: self._hooks.generating(self._run._step, self._query, items)  # noqa: E731
        item = self._run._sealed(self._query, step, released=self._released)
        if item is _END:
            self._items = None
            raise StopIteration
        assert isinstance(item, (str, DPAnswer))  # _step released nothing else
        self._released = self._released or isinstance(item, DPAnswer) or bool(item)
        return item

    def close(self) -> None:
        """Close the mechanism's stream (a paused generator drops its frame) once."""
        items, self._items = self._items, None
        close = getattr(items, "close", None)
        if close is not None:
            step = lambda: self._hooks.generating(close)  # noqa: E731
            self._run._sealed(self._query, step, released=self._released)


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
    ``deadline`` (seconds, off by default): every answer, or its failure, leaves
    that long after the query started, never sooner; work not done by then is the
    one fixed failure, at the deadline (:mod:`dprag_core.deadline`).
    A retriever that says how many documents it searches (``len(retriever)``:
    :class:`~dprag_core.retrieval.faiss_corpus.FaissRetriever`) and says 0 is
    refused here, once, before any charge
    (:func:`~dprag_core.retrieval.stores.refuse_empty` says why that is public).
    The question, the ``rng``, the ``query_id`` and the budget are checked
    before anything is charged; a failure after the charge (retrieval,
    generation, a per-unit ledger) raises the one fixed
    :class:`~dprag_core.errors.PrivateDataError`, the same whatever failed.
    ``public_fallback=True`` (off by default) answers a query whose DP answer
    released nothing with the mechanism's model on the question alone, marked
    ``details["public_fallback"]`` (no extra privacy cost:
    :mod:`dprag_core.fallback`); a :class:`NonRAG` picks another model or prompt.

    ``query_id`` (each call) names the query's charges
    (:mod:`dprag_core.query_ids`): after ``LedgerOutcomeUnknown`` or a
    ``PrivateDataError``, call again with the same id; the answer is then
    charged once and says ``details["charge"] == "retry"``. Without one, each
    call is a new query.

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
        deadline: Deadline | float | None = None,
    ) -> None:
        if not callable(retriever):
            raise TypeError("retriever must be callable as retriever(question, k)")
        # an empty corpus, where the retriever says (len): refused once, now, before any charge
        refuse_empty(type(retriever).__name__, stored_count(retriever))
        self.run = QueryRun(
            mechanism,
            retriever,
            qualifying=CORE_SOURCES,
            accountant=accountant,
            max_question_tokens=max_question_tokens,
            public_fallback=public_fallback,
            deadline=deadline,
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

    def _start(self, question: object, rng: RngLike, query_id: str | None) -> StartedQuery:
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
    needs); the units above the DP threshold come back. The fetch and the
    selection are a private section (:func:`private_step`): whatever fails there
    leaves as the one fixed ``PrivateDataError``, and the errors of the charge
    (``PrivacyBudgetExhausted``, a store's) are raised before anything was
    fetched, from frames that hold no document. Used by LangChain's
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
    return private_step(lambda: list(selector.select(candidates(), rng=rng)))


def select_by_ledger(
    candidates: Callable[[], Sequence[ScoredDocument]],
    *,
    ledger: Ledger,
    tau: float,
    cost: float,
    k: int,
    query_id: str | None = None,
) -> list[ScoredDocument]:
    """MuRAG's ledger filter under the query's id (:func:`selection_query_id`), claimed first.

    The id is claimed in ``ledger`` (:meth:`~dprag_core.accounting.ledger.Ledger.claim`,
    seen at once, made durable by the filter's charge or its settle before the
    documents leave) before anything is charged, so a reused id is refused whatever the filter
    would have charged (a charge of no unit records nothing: a refusal decided
    from the charges would tell whether some unit scored above ``tau``).
    The claim is the public part: its errors leave as themselves, raised
    before ``candidates()`` fetched anything (so from frames that hold no
    document). The fetch and the filter read which units score above ``tau``
    and what each has left, so they are a private section (:func:`private_step`):
    whatever fails in it leaves as the one fixed ``PrivateDataError``, never as
    its own class or message. :func:`~dprag_core.retrieval.selection.ledger_filter` records every
    charge under that id, so a retry after a failure (of the claim, or of the
    charge: the fixed failure) with the same id on the same ledger object is
    charged once. Used by LangChain's ``DPRetriever`` and LlamaIndex's
    ``PrivacyBudgetPostprocessor``.

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> led = InMemoryLedger(budget_per_unit=1.0)
    >>> far = [ScoredDocument("a", "", 0.1)]  # below tau: nothing is charged
    >>> select_by_ledger(lambda: far, ledger=led, tau=0.5, cost=1.0, k=1, query_id="q")
    []
    >>> select_by_ledger(lambda: far, ledger=led, tau=0.5, cost=1.0, k=1, query_id="q")
    Traceback (most recent call last):
    ...
    dprag_core.accounting.stores.errors.QueryIdReused: query_id was already recorded ...
    """
    qid = selection_query_id(query_id)
    ledger.claim(qid, durable=False)

    def select() -> list[ScoredDocument]:
        chosen = ledger_filter(candidates(), ledger=ledger, tau=tau, cost=cost, k=k, query_id=qid)
        ledger.settle()  # the claim durable before the documents leave (free after a charge)
        return chosen

    return private_step(select)


def private_step(fn: Callable[[], T]) -> T:
    """Run ``fn`` as a private section: quiet (:func:`~dprag_core.quiet_logs.muted_logs`:
    no log record, warning or Python-level stdout/stderr write leaves it) and guarded (any
    failure is the one fixed :class:`~dprag_core.errors.PrivateDataError`).

    >>> private_step(lambda: 2 + 1)
    3
    """
    with muted_logs():
        return guarded(fn)


def selection_query_id(query_id: object = None) -> str:
    """A selection step's query id: ``query_id`` (checked), else a fresh one.

    The caller hands it over explicitly: ``DPRetriever`` its retriever run's
    ``run_id``, the LlamaIndex postprocessors their ``DPQueryBundle``'s id.

    >>> selection_query_id("q-7"), len(selection_query_id())
    ('q-7', 36)
    """
    return new_query_id() if query_id is None else check_query_id(query_id)
