"""One id per query: the name its charges are recorded under, on every entry point.

A query's id is what the corpus budget (``CorpusAccountant.charge(cost,
query_id=...)``) and the per-unit ledger (MuRAG's
:func:`~dprag_core.retrieval.selection.ledger_filter`, MuRAG-Ada's bin
charges) record its charges under. The caller may supply it (each entry point
in its own idiom: ``PrivateRAG.answer(..., query_id=...)``, a LangChain
``run_id``, a LlamaIndex query argument); otherwise it is a fresh
:func:`new_query_id`. A retry after
:class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown` with the same id is
charged once. **An id buys at most one release**: the stores refuse any other
reuse of a recorded id, so a caller cannot get a second answer for one charge.

An id is public: the caller's own input or random, never derived from the
data. It follows the stores' one id policy
(:func:`~dprag_core.accounting.stores.amounts.check_id`), checked before anything
is charged, and leaves :data:`RESERVED_ID_BYTES` of the stores' id length for
the steps of one query (:func:`step_id`: MuRAG-Ada's ``<id>/bin3``), so a
derived id never fails mid-query.

A mechanism that charges a ledger inside ``answer`` reads the id of the query
it runs in with :func:`current_query_id`; the query run sets it around every
call into the mechanism (:func:`query_scope`), so it holds in whatever thread
or context a framework steps the mechanism in.

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
    "new_query_id",
    "query_scope",
    "step_id",
]

RESERVED_ID_BYTES = 64

_CURRENT: ContextVar[str | None] = ContextVar("dprag_query_id", default=None)


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
def query_scope(query_id: str) -> Iterator[None]:
    """Within this block (this thread or task), :func:`current_query_id` is ``query_id``."""
    token = _CURRENT.set(query_id)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_query_id() -> str | None:
    """The id of the query whose mechanism runs now, or None outside a query run."""
    return _CURRENT.get()
