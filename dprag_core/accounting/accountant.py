"""A thread-safe corpus-level privacy accountant (basic sequential composition).

Every query's fixed (epsilon, delta) is charged *before* the query runs; a
charge that would overspend raises :class:`PrivacyBudgetExhausted` and spends
nothing. Composition is basic (epsilons and deltas add), which is valid for any
sequence of adaptively chosen (epsilon_i, delta_i)-DP queries.

>>> acc = CorpusAccountant(Budget(1.0, 1e-6))
>>> acc.charge(Budget(0.4))
>>> round(acc.remaining.epsilon, 6)
0.6
>>> acc.charge(Budget(0.7))
Traceback (most recent call last):
...
dprag_core.budget.PrivacyBudgetExhausted: query needs epsilon=0.7, delta=0 but only ...
"""

from __future__ import annotations

import threading

from dprag_core.budget import FIT_SLACK, Budget, PrivacyBudgetExhausted

__all__ = ["CorpusAccountant"]


class CorpusAccountant:
    """Holds a total :class:`Budget` and refuses any charge that would exceed it.

    >>> acc = CorpusAccountant(Budget(1.0))
    >>> acc.charge(Budget(0.6)); acc.can_afford(Budget(0.6)), acc.queries
    (False, 1)
    """

    def __init__(self, total: Budget) -> None:
        if not isinstance(total, Budget):
            raise TypeError(f"total must be a Budget, got {type(total).__name__}")
        self.total = total
        self._epsilon_spent = 0.0
        self._delta_spent = 0.0
        self._queries = 0
        self._lock = threading.Lock()

    @property
    def spent_epsilon(self) -> float:
        """Epsilon spent so far."""
        return self._epsilon_spent

    @property
    def spent_delta(self) -> float:
        """Delta spent so far."""
        return self._delta_spent

    @property
    def queries(self) -> int:
        """Number of charged queries."""
        return self._queries

    @property
    def remaining(self) -> Budget:
        """What is left (epsilon is reported as at least a tiny positive number)."""
        with self._lock:
            eps = max(self.total.epsilon - self._epsilon_spent, 1e-300)
            delta = max(self.total.delta - self._delta_spent, 0.0)
        return Budget(eps, delta)

    def can_afford(self, cost: Budget) -> bool:
        """True when ``cost`` fits in what remains."""
        with self._lock:
            return self._fits(cost)

    def _fits(self, cost: Budget) -> bool:
        eps_ok = self._epsilon_spent + cost.epsilon <= self.total.epsilon * (1 + FIT_SLACK)
        delta_ok = self._delta_spent + cost.delta <= self.total.delta * (1 + FIT_SLACK)
        return eps_ok and delta_ok

    def charge(self, cost: Budget) -> None:
        """Atomically record ``cost``, or raise PrivacyBudgetExhausted and record nothing."""
        if not isinstance(cost, Budget):
            raise TypeError(f"cost must be a Budget, got {type(cost).__name__}")
        with self._lock:
            if not self._fits(cost):
                left_eps = max(self.total.epsilon - self._epsilon_spent, 0.0)
                left_delta = max(self.total.delta - self._delta_spent, 0.0)
                raise PrivacyBudgetExhausted(
                    f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} but only "
                    f"epsilon={left_eps:g}, delta={left_delta:g} remains"
                )
            self._epsilon_spent += cost.epsilon
            self._delta_spent += cost.delta
            self._queries += 1

    def __repr__(self) -> str:
        return (
            f"CorpusAccountant(total={self.total!r}, spent_epsilon={self._epsilon_spent:g}, "
            f"spent_delta={self._delta_spent:g}, queries={self._queries})"
        )
