"""What the durable corpus budgets share: exact integer arithmetic, the charge contract, views.

The corpus budget of :class:`~dprag_core.accounting.SQLiteCorpusAccountant`
and :class:`~dprag_core.accounting.PostgresCorpusAccountant` lives in the
store, not in the process: every process (and every restart) reads and charges
the same total. Epsilon is kept in pico-epsilon (1e-12) integers like the
per-unit ledger, delta in atto-delta (1e-18) integers, each amount rounded to
the nearest integer (so 100 charges of 0.1 fit exactly in 10). A charge is one
transaction that checks ``spent + cost <= total`` and records the query id (or
counts a refusal).

A query id buys at most one release: an id already recorded is refused
(``ValueError`` naming ``query_id``, never quoting it), except as the retry of
this object's own charge that raised
:class:`~dprag_core.accounting.stores.errors.LedgerOutcomeUnknown`: if that
charge was recorded, the retry records nothing and returns False.

>>> budget_units("total", Budget(0.1, 1e-6))
(100000000000, 1000000000000)
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Iterator

from dprag_core.accounting.accountant import CorpusAccountant, check_cost, exhausted
from dprag_core.accounting.status import BudgetStatus, ChargeRecord
from dprag_core.accounting.stores.amounts import DELTA_SCALE, SCALE, budget_units, check_id
from dprag_core.accounting.stores.errors import LedgerOutcomeUnknown, reused_id
from dprag_core.accounting.stores.retries import PendingRetries
from dprag_core.budget import Budget

__all__ = ["DurableCorpusAccountant"]


class DurableCorpusAccountant(CorpusAccountant):
    """A corpus budget kept in a store: subclasses read the state and charge atomically.

    Subclasses open their store, then call ``super().__init__`` with the
    recorded total (integers), after :meth:`check_total` compared it with the
    one the caller gave, if any.

    >>> issubclass(DurableCorpusAccountant, CorpusAccountant)
    True
    """

    name: str
    """The store's identity, recorded at its creation."""

    def __init__(self, total: tuple[int, int], *, label: str, status_command: str) -> None:
        super().__init__(Budget(total[0] / SCALE, total[1] / DELTA_SCALE))
        self._total_eps, self._total_delta = total
        self.label = label
        self.status_command = status_command
        """The ``dprag ledger status`` command that shows this budget (no DSN in it)."""
        self._pending = PendingRetries()

    @abstractmethod
    def _state(self) -> tuple[int, int, int]:
        """(spent epsilon units, spent delta units, queries) as recorded in the store."""

    @abstractmethod
    def _charge(self, query_id: str, epsilon: int, delta: int) -> str:
        """Charge atomically: "charged", "recorded" (this id, this cost: nothing new) or
        "exhausted" (nothing recorded but the refusal count); another cost: ValueError."""

    @abstractmethod
    def _status_row(self) -> tuple[int, int, int, int | None, float | None]:
        """(spent epsilon, spent delta, queries, refusals or None, last charge time or None)."""

    @abstractmethod
    def _history_rows(self, last: int | None = None) -> list[tuple[str, int, int, float]]:
        """Every charge (the last ``last`` only, if given): (query_id, epsilon units, delta
        units, time), oldest first."""

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
        """What is left, from one read of the store (an exhausted budget: epsilon 0)."""
        eps, delta, _ = self._state()
        left_eps = max(self._total_eps - eps, 0) / SCALE
        return Budget(left_eps, max(self._total_delta - delta, 0) / DELTA_SCALE)

    def can_afford(self, cost: Budget) -> bool:
        """True when ``cost`` fits in what remains now (a later charge may still be refused)."""
        e, d = budget_units("cost", check_cost(cost))
        eps, delta, _ = self._state()
        return eps + e <= self._total_eps and delta + d <= self._total_delta

    def charge(self, cost: Budget, *, query_id: str | None = None) -> bool:
        """Atomically record ``cost`` under ``query_id`` (fresh if None), else raise.

        Returns True for a new charge, False for an accepted retry. Raises
        PrivacyBudgetExhausted when it does not fit, ``ValueError`` for a bad
        or reused id, and ``LedgerUnavailable`` (or ``LedgerOutcomeUnknown``)
        when the store fails.
        """
        e, d = budget_units("cost", check_cost(cost))
        qid = uuid.uuid4().hex if query_id is None else check_id("query_id", query_id)
        try:
            outcome = self._charge(qid, e, d)
        except LedgerOutcomeUnknown:
            self._pending.remember(qid, (e, d))
            raise
        if outcome == "recorded":
            if self._pending.peek(qid) != (e, d):
                raise reused_id()
            self._pending.take(qid)
            return False
        self._pending.take(qid)  # its outcome is known now
        if outcome == "exhausted":
            eps, delta, _ = self._state()
            raise exhausted(
                cost,
                (self._total_eps - eps) / SCALE,
                (self._total_delta - delta) / DELTA_SCALE,
                store=self.label,
                status_command=self.status_command,
            )
        return True

    def status(self) -> BudgetStatus:
        """Total, spent, exactly what is left, queries, refusals and the last charge."""
        eps, delta, queries, refusals, last = self._status_row()
        return BudgetStatus(
            store=self.label,
            name=self.name,
            total=self.total,
            spent_epsilon=eps / SCALE,
            spent_delta=delta / DELTA_SCALE,
            remaining_epsilon=max(self._total_eps - eps, 0) / SCALE,
            remaining_delta=max(self._total_delta - delta, 0) / DELTA_SCALE,
            queries=queries,
            refusals=refusals,
            last_charge=last,
        )

    def history(self, *, last: int | None = None) -> Iterator[ChargeRecord]:
        """Every recorded charge, oldest first (a compliance review: ``dprag ledger export``);
        ``last``: only the last ``last`` charges (an indexed read, whatever the history's
        length)."""
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise ValueError(f"last must be an integer >= 0 or None, got {last!r}")
        for qid, e, d, at in self._history_rows(last):
            yield ChargeRecord(qid, e / SCALE, d / DELTA_SCALE, at)

    def close(self) -> None:
        """Release this thread's connection (the budget stays in the store)."""

    def __enter__(self) -> DurableCorpusAccountant:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def check_total(given: Budget | None, stored: tuple[int, int], label: str) -> None:
        """Refuse a ``total`` other than the recorded one (a ValueError naming the store)."""
        if given is not None and stored != budget_units("total", given):
            raise ValueError(
                f"total {given!r} differs from the total epsilon={stored[0] / SCALE!r}, "
                f"delta={stored[1] / DELTA_SCALE!r} the {label} was created with (a budget is "
                "never reset or enlarged; omit total= to open it as recorded)"
            )
