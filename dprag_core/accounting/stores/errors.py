"""What a failing budget store raises, and the messages that name the store.

Every durable store (a corpus budget or a per-unit ledger, on SQLite or
PostgreSQL) has a *label* that says what it is and where: "corpus budget
'corpus' in '/srv/dprag/budget.db'", "PostgreSQL per-unit ledger
'dprag_ledger'". Its errors carry that label and never a DSN, a password, a
unit id or a query id.

>>> str(incomplete("corpus budget 'c' in '/b.db'", ["c_charges"]))[:70]
"the corpus budget 'c' in '/b.db' is incomplete (missing: c_charges): r"
"""

from __future__ import annotations

__all__ = [
    "LedgerOutcomeUnknown",
    "LedgerUnavailable",
    "QueryIdReused",
    "incomplete",
    "reused_id",
]


class LedgerUnavailable(RuntimeError):
    """A budget store cannot be reached, opened or used; nothing was charged or released.

    Raised by corpus budgets and per-unit ledgers alike (the name is kept for
    compatibility). The message names the store and never contains a DSN, a
    password or an id. An app raises it as itself only where it is raised
    before a query's private section opens (the corpus charge, the ledger's
    claim of the query id); raised inside (a per-unit charge that depends on
    the retrieved documents), it leaves as the one fixed failure
    (:func:`dprag_core.errors.guarded`), which a caller retries the same way
    (:class:`LedgerOutcomeUnknown`: with the same query id).

    >>> issubclass(LedgerUnavailable, RuntimeError)
    True
    """


class LedgerOutcomeUnknown(LedgerUnavailable):
    """The connection was lost while a charge was in flight: it may or may not be recorded.

    Release nothing. Retry with the **same** query id on the **same** budget
    object: a charge whose id that object saw end in this error is accepted
    once more, and reports whether it was recorded now (a new charge) or
    already (a retry, charged once). Any other reuse of a recorded id is
    refused (a query id buys at most one release).

    >>> issubclass(LedgerOutcomeUnknown, LedgerUnavailable)
    True
    """


def incomplete(label: str, absent: list[str]) -> LedgerUnavailable:
    """The error for a partly missing store (never repaired: that would reset budgets).

    >>> "restore it from a backup" in str(incomplete("per-unit ledger in '/l.db'", ["units"]))
    True
    """
    return LedgerUnavailable(
        f"the {label} is incomplete (missing: {', '.join(absent)}): restore it "
        "from a backup; recreating it would reset budgets"
    )


class QueryIdReused(ValueError):
    """A query id that was already recorded, refused (it never quotes the id).

    A ``ValueError``: the caller's input, not the store, is at fault. An app
    decides reuse before a query's private section, from the record every
    query writes there (:meth:`~dprag_core.accounting.ledger.Ledger.claim`,
    the corpus charge), never from what the query then charged.

    >>> issubclass(QueryIdReused, ValueError)
    True
    """


def reused_id() -> QueryIdReused:
    """The refusal of a query id that was already recorded (never quoting the id).

    A query id buys at most one release: reusing one is accepted only as the
    retry of the same budget object's own charge whose outcome was unknown.

    >>> str(reused_id()).startswith("query_id")
    True
    """
    return QueryIdReused(
        "query_id was already recorded (by another process, an earlier query or before a "
        "restart): a query id buys at most one release; use a fresh id per query (a retry "
        "after a failure must use the same app or budget object)"
    )
