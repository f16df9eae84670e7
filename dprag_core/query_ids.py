"""A query's public values (:class:`Query`) and its id, the name its charges are recorded under.

One :class:`Query` carries what is public about one query: its ``question``,
its ``id``, whether it is an accepted ``retry`` and its ``rng``. The apps
build one per query (:meth:`~dprag_core.pipeline.QueryRun.start`) and pass it
explicitly: to :meth:`Mechanism.answer <dprag_core.algorithms.base.Mechanism.answer>`
and ``stream`` (which take a plain question too: :func:`as_query` turns it into
a fresh Query), and its id and retry flag to the per-unit ledger's filter
(:func:`~dprag_core.retrieval.selection.ledger_filter`). Nothing about a query
travels in a context variable: a mechanism run in another thread, task or
framework callback reads the same values, because it is handed them.

A query's id is what the corpus budget (``CorpusAccountant.charge(cost,
query_id=...)``) and the per-unit ledger (MuRAG's
:func:`~dprag_core.retrieval.selection.ledger_filter`, MuRAG-Ada's bin
charges) record its charges under. The caller may supply it (each entry point
in its own idiom: ``PrivateRAG.answer(..., query_id=...)``, a LangChain
``run_id``, a LlamaIndex query argument); otherwise it is a fresh
:func:`new_query_id`.

**An id buys at most one release**, and whether a reused id is refused is
decided before the query's private section opens, from a record every query
writes there: its corpus charge, and for a mechanism with a per-unit ledger
the ledger's claim of the id
(:meth:`~dprag_core.accounting.ledger.Ledger.claim`), never from what the
query then charged (a charge of no unit records nothing, so a decision taken
from the charges would tell whether some document scored above τ). Two
retries are accepted, each charged once: after
:class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown` from that record
(on the same budget object), and after the one fixed failure of a private
section (:class:`~dprag_core.errors.PrivateDataError`, on the same app
object) if it released nothing: the retry's :class:`Query` says
``retry=True``, and what the failed attempt charged stands
(``Ledger.charge(..., retry=True)``).

An id is public: the caller's own input or random, never derived from the
data. It follows the stores' one id policy
(:func:`~dprag_core.accounting.stores.amounts.check_id`), checked before anything
is charged, and leaves :data:`RESERVED_ID_BYTES` of the stores' id length for
the steps of one query (:func:`step_id`: MuRAG-Ada's ``<id>/bin3``), so a
derived id never fails mid-query.

>>> check_query_id("request-42")
'request-42'
>>> query = Query("Who treats Ann?", id="request-42")
>>> query.id, query.retry, as_query(query) is query
('request-42', False, True)
>>> as_query("Who treats Ann?", rng=7).retry
False
"""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np

from dprag_core.accounting.stores.amounts import MAX_ID_BYTES, check_id
from dprag_core.mechanisms.rng import RngLike, make_rng

__all__ = [
    "RESERVED_ID_BYTES",
    "Query",
    "as_query",
    "check_query_id",
    "check_question",
    "new_query_id",
    "step_id",
]

RESERVED_ID_BYTES = 64


def new_query_id() -> str:
    """A fresh id (a random UUID4): the default when the caller supplies none.

    >>> len(new_query_id())
    36
    """
    return str(uuid.uuid4())


def check_query_id(value: object) -> str:
    """``value`` if it is a valid query id (the stores' id policy), else a ValueError/TypeError.

    >>> check_query_id(" ")
    Traceback (most recent call last):
    ...
    ValueError: query_id must be a non-empty string (not only whitespace)
    >>> check_query_id("q" * 1000)
    Traceback (most recent call last):
    ...
    ValueError: query_id must be at most 960 UTF-8 bytes, got 1000
    """
    query_id = check_id("query_id", value)
    size, most = len(query_id.encode("utf-8")), MAX_ID_BYTES - RESERVED_ID_BYTES
    if size > most:
        raise ValueError(f"query_id must be at most {most} UTF-8 bytes, got {size}")
    return query_id


def step_id(query_id: str, step: str) -> str:
    """The id of one charge step of a query (its ledger records it once per step).

    ``step`` is a short public name (at most :data:`RESERVED_ID_BYTES` − 1 bytes).

    >>> step_id("request-42", "bin3")
    'request-42/bin3'
    """
    if len(step.encode("utf-8")) >= RESERVED_ID_BYTES:
        raise ValueError(f"step must be under {RESERVED_ID_BYTES} UTF-8 bytes, got {step!r}")
    return f"{query_id}/{step}"


def check_question(question: object) -> str:
    """A question must be a non-empty string of valid Unicode (its text is never echoed).

    A lone surrogate (``chr(0xD800)``) cannot be encoded for a tokenizer or a
    model API: it is refused here, before anything is charged.

    >>> check_question("Who treats headache?")
    'Who treats headache?'
    >>> check_question("Who" + chr(0xD800))
    Traceback (most recent call last):
    ...
    ValueError: question must be valid Unicode text: it contains a lone surrogate
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "question must be valid Unicode text: it contains a lone surrogate"
        ) from None
    return question


@dataclasses.dataclass(frozen=True)
class Query:
    """One query's public values, handed explicitly to the mechanism and the ledger.

    ``question``: the question (:func:`check_question`). ``id``: the name the
    query's charges are recorded under (:func:`check_query_id`; default: a
    fresh :func:`new_query_id`). ``retry``: True only for an app's accepted
    retry of a query that released nothing, whose recorded charges stand
    (module docstring); the apps set it, leave it False. ``rng``: the numpy
    ``Generator`` every random draw of the query comes from (default: one
    seeded from OS entropy; ``numpy.random.default_rng(seed)`` for tests and
    benchmarks). Each field is checked when the Query is built (a
    ``TypeError`` or ``ValueError`` naming it), so a bad one is refused before
    anything is charged. Every field is public: the repr shows the question,
    the id and the retry flag, never the generator's state.

    >>> Query("Who treats Ann?", id="req-42")
    Query(question='Who treats Ann?', id='req-42', retry=False)
    >>> Query("Who?", rng=7)
    Traceback (most recent call last):
    ...
    TypeError: rng must be a numpy Generator (numpy.random.default_rng(seed)), got int
    """

    question: str
    id: str = dataclasses.field(default_factory=new_query_id)
    retry: bool = False
    rng: np.random.Generator = dataclasses.field(
        default_factory=np.random.default_rng, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_question(self.question)
        check_query_id(self.id)
        if not isinstance(self.retry, bool):
            raise TypeError(f"retry must be a bool, got {type(self.retry).__name__}")
        if not isinstance(self.rng, np.random.Generator):
            kind = type(self.rng).__name__
            raise TypeError(
                f"rng must be a numpy Generator (numpy.random.default_rng(seed)), got {kind}"
            )


def as_query(query: Query | str, *, rng: RngLike = None) -> Query:
    """The :class:`Query` a mechanism runs: ``query`` itself, or a fresh one for a question.

    A plain question (``mechanism.answer("Who?", docs, rng=0)``) becomes a
    Query with a fresh id, ``retry=False`` and ``make_rng(rng)`` (a seed or a
    generator; default: OS entropy). A Query carries its own generator, so
    ``rng`` must then be None. Every mechanism's ``answer`` and ``stream``
    start with it.

    >>> as_query(Query("Who?", id="q-1")).id
    'q-1'
    >>> bool(as_query("Who?", rng=0).rng.integers(9) == as_query("Who?", rng=0).rng.integers(9))
    True
    >>> as_query(Query("Who?"), rng=0)
    Traceback (most recent call last):
    ...
    TypeError: rng must be None when query is a Query (the Query carries its own rng)
    """
    if isinstance(query, Query):
        if rng is not None:
            raise TypeError(
                "rng must be None when query is a Query (the Query carries its own rng)"
            )
        return query
    return Query(check_question(query), rng=make_rng(rng))
