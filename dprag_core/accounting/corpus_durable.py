"""What the durable corpus budgets share: exact integer arithmetic and the charge contract.

The corpus budget of :class:`~dprag_core.accounting.SQLiteCorpusAccountant`
and :class:`~dprag_core.accounting.PostgresCorpusAccountant` lives in the
store, not in the process: every process (and every restart) reads and charges
the same total. Epsilon is kept in pico-epsilon (1e-12) integers like the
per-unit ledger, delta in atto-delta (1e-18) integers, each amount rounded to
the nearest integer (so 100 charges of 0.1 fit exactly in 10). A charge is one
transaction that checks ``spent + cost <= total`` and records the query id;
a query id already recorded with the same cost records nothing new and counts
as charged (a retry after
:class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown`), with another
cost it raises ``ValueError``.

>>> budget_units("total", Budget(0.1, 1e-6))
(100000000000, 1000000000000)
"""

from __future__ import annotations

import uuid
from abc import abstractmethod

from dprag_core.accounting.accountant import CorpusAccountant, check_cost, exhausted
from dprag_core.accounting.ledger.base import MAX_EPSILON, SCALE, check_id
from dprag_core.budget import Budget

__all__ = ["DELTA_SCALE", "DurableCorpusAccountant", "budget_units"]

DELTA_SCALE = 10**18
"""Integer units per delta (atto-delta)."""


def budget_units(name: str, budget: Budget) -> tuple[int, int]:
    """(epsilon, delta) of ``budget`` as integers; a ValueError names ``name`` when out of range.

    >>> budget_units("cost", Budget(1e-20))
    Traceback (most recent call last):
    ...
    ValueError: cost.epsilon must be 0 or at least 1e-12, got 1e-20
    """
    if budget.epsilon > MAX_EPSILON:
        raise ValueError(f"{name}.epsilon must be at most {MAX_EPSILON:g}, got {budget.epsilon!r}")
    eps, delta = round(budget.epsilon * SCALE), round(budget.delta * DELTA_SCALE)
    if eps == 0:
        raise ValueError(f"{name}.epsilon must be 0 or at least 1e-12, got {budget.epsilon!r}")
    if delta == 0 and budget.delta > 0:
        raise ValueError(f"{name}.delta must be 0 or at least 1e-18, got {budget.delta!r}")
    return eps, delta


class DurableCorpusAccountant(CorpusAccountant):
    """A corpus budget kept in a store: subclasses read the state and charge atomically.

    >>> issubclass(DurableCorpusAccountant, CorpusAccountant)
    True
    """

    def __init__(self, total: Budget) -> None:
        super().__init__(total)
        self._total_eps, self._total_delta = budget_units("total", total)

    @abstractmethod
    def _state(self) -> tuple[int, int, int]:
        """(spent epsilon units, spent delta units, queries) as recorded in the store."""

    @abstractmethod
    def _charge(self, query_id: str, epsilon: int, delta: int) -> bool:
        """Charge atomically; False (recording nothing) when it does not fit.

        An id already recorded with the same cost: True, recording nothing;
        with another cost: ValueError.
        """

    @property
    def spent_epsilon(self) -> float:
        """Epsilon spent so far, by every process that shares the store."""
        return self._state()[0] / SCALE

    @property
    def spent_delta(self) -> float:
        """Delta spent so far, by every process that shares the store."""
        return self._state()[1] / DELTA_SCALE

    @property
    def queries(self) -> int:
        """Number of charged queries, by every process that shares the store."""
        return self._state()[2]

    @property
    def remaining(self) -> Budget:
        """What is left, from one read of the store (epsilon at least a tiny positive number)."""
        eps, delta, _ = self._state()
        left_eps = (self._total_eps - eps) / SCALE
        return Budget(max(left_eps, 1e-300), max((self._total_delta - delta) / DELTA_SCALE, 0.0))

    def can_afford(self, cost: Budget) -> bool:
        """True when ``cost`` fits in what remains now (a later charge may still be refused)."""
        e, d = budget_units("cost", check_cost(cost))
        eps, delta, _ = self._state()
        return eps + e <= self._total_eps and delta + d <= self._total_delta

    def charge(self, cost: Budget, *, query_id: str | None = None) -> None:
        """Atomically record ``cost`` under ``query_id`` (fresh if None), else raise.

        Raises PrivacyBudgetExhausted when it does not fit, ``ValueError`` for
        a bad id or an id already charged with another cost, and
        ``LedgerUnavailable`` (or ``LedgerOutcomeUnknown``) when the store fails.
        """
        e, d = budget_units("cost", check_cost(cost))
        qid = uuid.uuid4().hex if query_id is None else check_id("query_id", query_id)
        if not self._charge(qid, e, d):
            eps, delta, _ = self._state()
            raise exhausted(
                cost,
                (self._total_eps - eps) / SCALE,
                (self._total_delta - delta) / DELTA_SCALE,
            )

    def close(self) -> None:
        """Release this thread's connection (the budget stays in the store)."""

    def __enter__(self) -> DurableCorpusAccountant:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_total(self, stored: tuple[int, int]) -> None:
        """Refuse a store created with another total (a ValueError naming ``total``)."""
        if stored != (self._total_eps, self._total_delta):
            raise ValueError(
                f"total {self.total!r} differs from the total epsilon={stored[0] / SCALE!r}, "
                f"delta={stored[1] / DELTA_SCALE!r} this corpus budget was created with"
            )
