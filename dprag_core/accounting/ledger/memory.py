"""An in-process ledger (thread-safe; forgets everything when the process ends).

For tests and single-process experiments only: a ledger that forgets on
restart lets a restarted server spend every unit's budget again. Deployments
use :class:`~dprag_core.accounting.ledger.SQLiteLedger` or
:class:`~dprag_core.accounting.ledger.PostgresLedger`.

>>> led = InMemoryLedger(budget_per_unit=1.0)
>>> led.charge("q", ["a"], 1.0).granted, led.charge("q2", ["a"], 0.1).granted
(True, False)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from dprag_core.accounting.ledger.base import (
    Ledger,
    histogram_bin,
    require_distinct,
    same_charge,
)
from dprag_core.accounting.status import HISTOGRAM_BINS, LedgerStatus
from dprag_core.accounting.stores.amounts import from_units
from dprag_core.accounting.stores.errors import reused_id

__all__ = ["InMemoryLedger"]


class InMemoryLedger(Ledger):
    """Per-unit budgets in a dict, guarded by one lock.

    >>> InMemoryLedger(budget_per_unit=0.5).remaining(["x"])
    {'x': 0.5}
    """

    def __init__(self, *, budget_per_unit: float) -> None:
        super().__init__(budget_per_unit=budget_per_unit)
        self._left: dict[str, int] = {}
        self._log: list[tuple[str, str, int, float]] = []
        self._spent = 0
        self._refusals = 0
        self._charged: dict[str, list[tuple[str, int]]] = {}
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def _settle(self) -> None:
        """Nothing to flush: the ledger lives and dies with the process."""

    def _claim(self, query_id: str, *, durable: bool) -> bool:
        with self._lock:
            if query_id in self._claimed or query_id in self._charged:
                return False
            self._claimed.add(query_id)
            return True

    def _recorded(self, query_id: str) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._charged.get(query_id, ()))

    def _charge(self, query_id: str, units: list[str], cost: int) -> tuple[str, list[str]]:
        require_distinct(units)
        with self._lock:
            if query_id in self._charged:
                if same_charge(self._charged[query_id], units, cost):
                    return "recorded", []
                raise reused_id()
            lacking = [u for u in units if self._left.get(u, self._budget) < cost]
            if lacking:
                self._refusals += 1
                return "refused", lacking
            now = time.time()
            for u in units:
                self._left[u] = self._left.get(u, self._budget) - cost
                self._log.append((query_id, u, cost, now))
            self._spent += cost * len(units)
            self._charged[query_id] = [(u, cost) for u in units]
            return "charged", []

    def _remaining(self, units: list[str]) -> dict[str, int]:
        with self._lock:
            return {u: self._left.get(u, self._budget) for u in units}

    def _audit_rows(self, last: int | None = None) -> Iterator[tuple[str, str, int, float]]:
        with self._lock:
            rows = list(self._log) if last is None else list(self._log)[len(self._log) - last :]
        return iter(rows)

    def _total_spent(self) -> int:
        with self._lock:
            return self._spent

    def _status(self, min_cost: int) -> LedgerStatus:
        with self._lock:
            bins = [0] * HISTOGRAM_BINS
            for left in self._left.values():
                bins[histogram_bin(self._budget - left, self._budget)] += 1
            return LedgerStatus(
                store=self.label,
                name="in-memory",
                budget_per_unit=self.budget_per_unit,
                units=len(self._left),
                exhausted=sum(left < min_cost for left in self._left.values()),
                total_spent=from_units(self._spent),
                queries=len(self._charged),
                refusals=self._refusals,
                last_charge=self._log[-1][3] if self._log else None,
                histogram=tuple(bins),
            )
