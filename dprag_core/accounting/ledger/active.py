"""Charge the units that can afford a cost: MuRAG's "active units" step on any ledger.

>>> from dprag_core.accounting.ledger import InMemoryLedger
>>> ledger = InMemoryLedger(budget_per_unit=1.0)
>>> charge_active(ledger, "q1", ["a"], 1.0), charge_active(ledger, "q2", ["a", "b"], 1.0)
(['a'], ['b'])
"""

from __future__ import annotations

from collections.abc import Iterable

from dprag_core.accounting.ledger.base import Ledger

__all__ = ["charge_active"]


def charge_active(
    ledger: Ledger, query_id: str, units: Iterable[str], cost: float, *, retry: bool = False
) -> list[str]:
    """Charge ``cost`` to every unit that can afford it; return those charged.

    One atomic charge; if some units lack budget (possibly spent by a concurrent
    query) they are dropped and the rest is charged again. Budgets only go down,
    so the result is exactly the units with >= cost left at the commit. Which
    units lacked budget is never signalled (that would leak their exhaustion):
    they are only absent from the result.

    A retry after :class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown`
    (the same ``query_id`` on the same ledger object) starts from the units of
    the attempt whose outcome was unknown: the units dropped before it lacked
    budget then, and still do. ``retry=True`` (an app's accepted retry of a
    query that released nothing): the units a recorded charge under
    ``query_id`` debited are kept without a new debit, the others dropped
    (:meth:`Ledger.charge`).

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> charge_active(InMemoryLedger(budget_per_unit=1.0), "q", ["a", "a"], 0.5)
    ['a']
    """
    todo = list(dict.fromkeys(units))
    unknown = ledger.unknown_charge(query_id)
    if unknown is not None:
        todo = [u for u in todo if u in set(unknown)]
    while todo:
        result = ledger.charge(query_id, todo, cost, retry=retry)
        if result.granted:
            return todo
        lacking = set(result.lacking)
        if not lacking & set(todo):
            raise RuntimeError("the ledger refused a charge without naming a lacking unit")
        todo = [u for u in todo if u not in lacking]
    return []
