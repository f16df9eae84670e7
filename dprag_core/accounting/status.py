"""What an operator reads from a budget store: its status and its charge history.

:class:`BudgetStatus` (a corpus budget) and :class:`LedgerStatus` (a per-unit
ledger) are read in one pass from the store, by any process that can read
it, without restating the total (``SQLiteCorpusAccountant(path).status()``,
``dprag ledger status``). Amounts are exact: what is left is ``total - spent``
in the store's integers, so an exhausted budget shows 0, never a tiny
positive number. :class:`ChargeRecord` is one row of a corpus budget's
history (per-unit ledgers have :class:`~dprag_core.accounting.ledger.AuditEntry`).

>>> s = BudgetStatus("corpus budget 'c' in '/b.db'", "c", Budget(2.0), 2.0, 0.0, 0.0, 0.0, 4, 1,
...                  1.7e9)
>>> s.remaining_epsilon, s.exhausted
(0.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dprag_core.budget import Budget

__all__ = ["HISTOGRAM_BINS", "BudgetStatus", "ChargeRecord", "LedgerStatus"]

HISTOGRAM_BINS = 10
"""A per-unit ledger's spend histogram: units by the share of their budget spent, in tenths."""


@dataclass(frozen=True)
class BudgetStatus:
    """A corpus budget as recorded: total, spent, what is left, queries, refusals, last charge.

    ``refusals`` is None for a store written before refusals were counted and
    opened read-only; ``last_charge`` (UNIX seconds) is None before the first.
    """

    store: str
    name: str
    total: Budget
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    remaining_delta: float
    queries: int
    refusals: int | None
    last_charge: float | None

    @property
    def exhausted(self) -> bool:
        """True when no epsilon is left."""
        return self.remaining_epsilon <= 0.0


@dataclass(frozen=True)
class LedgerStatus:
    """A per-unit ledger as recorded: units charged, exhausted, spend distribution.

    ``units``: units charged at least once (the others have their whole
    budget); ``exhausted``: units with less than ``min_cost`` left (0 by
    default: nothing left); ``histogram``: units by the share of the budget
    they spent, ``[0, 10%)``, ..., ``[90%, 100%]``; ``queries``: distinct
    query ids charged; ``refusals``: charges refused because a unit lacked
    budget (None: not counted by the version that wrote the store).

    >>> LedgerStatus("per-unit ledger", "ledger", 1.0, 2, 1, 1.5, 2, 0, None,
    ...              (0,) * 5 + (1,) + (0,) * 3 + (1,)).histogram[-1]
    1
    """

    store: str
    name: str
    budget_per_unit: float
    units: int
    exhausted: int
    total_spent: float
    queries: int
    refusals: int | None
    last_charge: float | None
    histogram: tuple[int, ...]


@dataclass(frozen=True)
class ChargeRecord:
    """One recorded corpus-budget charge: query id, epsilon, delta, time (UNIX seconds).

    >>> ChargeRecord("q1", 0.5, 0.0, 1.7e9).epsilon
    0.5
    """

    query_id: str = field(repr=False)  # ids stay out of reprs
    epsilon: float
    delta: float
    time: float
