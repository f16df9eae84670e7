"""One id per query: the name its charges are recorded under, on every entry point.

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
object) if it released nothing: the retry runs under :func:`query_scope` with
``retry=True``, and what the failed attempt charged stands
(``Ledger.charge(..., retry=True)``).

An id is public: the caller's own input or random, never derived from the
data. It follows the stores' one id policy
(:func:`~dprag_core.accounting.stores.amounts.check_id`), checked before anything
is charged, and leaves :data:`RESERVED_ID_BYTES` of the stores' id length for
the steps of one query (:func:`step_id`: MuRAG-Ada's ``<id>/bin3``), so a
derived id never fails mid-query.

A mechanism that charges a ledger inside ``answer`` reads the id of the query
it runs in with :func:`current_query_id` (and :func:`current_query_is_retry`);
the query run sets both around every call into the mechanism
(:func:`query_scope`), so they hold in whatever thread or context a framework
steps the mechanism in.

>>> check_query_id("request-42")
'request-42'
>>> with query_scope("request-42"):
...     current_query_id()
'request-42'
>>> current_query_id() is None
True
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from dprag_core.accounting.stores.amounts import MAX_ID_BYTES, check_id

__all__ = [
    "RESERVED_ID_BYTES",
    "check_query_id",
    "current_query_id",
    "current_query_is_retry",
    "new_query_id",
    "query_scope",
    "step_id",
]

RESERVED_ID_BYTES = 64

_CURRENT: ContextVar[str | None] = ContextVar("dprag_query_id", default=None)
_RETRY: ContextVar[bool] = ContextVar("dprag_query_retry", default=False)


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


@contextmanager
def query_scope(query_id: str, *, retry: bool = False) -> Iterator[None]:
    """Within this block (this thread or task), :func:`current_query_id` is ``query_id``.

    ``retry``: the query is an accepted retry of one that released nothing
    (:func:`current_query_is_retry`; module docstring).

    >>> with query_scope("q-1", retry=True):
    ...     current_query_is_retry()
    True
    """
    token, again = _CURRENT.set(query_id), _RETRY.set(retry)
    try:
        yield
    finally:
        _RETRY.reset(again)
        _CURRENT.reset(token)


def current_query_id() -> str | None:
    """The id of the query whose mechanism runs now, or None outside a query run."""
    return _CURRENT.get()


def current_query_is_retry() -> bool:
    """Whether the query that runs now is an accepted retry (its charges stand: see the module)."""
    return _RETRY.get()
