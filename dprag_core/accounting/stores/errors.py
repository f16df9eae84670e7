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
    password or an id: it is public (``public_message``), so a private section
    (:func:`dprag_core.errors.guarded`) passes it on as a fresh copy of the same
    type, and a caller can retry (:class:`LedgerOutcomeUnknown`: with the same
    query id).

    >>> issubclass(LedgerUnavailable, RuntimeError)
    True
    """

    public_message = True


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
    """A query id that was already charged, refused (public: it never quotes the id).

    A ``ValueError``: the caller's input, not the store, is at fault.

    >>> issubclass(QueryIdReused, ValueError), QueryIdReused.public_message
    (True, True)
    """

    public_message = True


def reused_id() -> QueryIdReused:
    """The refusal of a query id that was already charged (never quoting the id).

    A query id buys at most one release: reusing one is accepted only as the
    retry of the same budget object's own charge whose outcome was unknown.

    >>> str(reused_id()).startswith("query_id")
    True
    """
    return QueryIdReused(
        "query_id was already charged (by another process, an earlier granted charge or "
        "before a restart): a query id buys at most one release; use a fresh id per query "
        "(a retry after LedgerOutcomeUnknown must use the same budget object)"
    )
