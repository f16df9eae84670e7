"""The corpus-level privacy accountant: the contract, and an in-memory backend.

Every query's fixed (epsilon, delta) is charged *before* the query runs; a
charge that would overspend raises :class:`PrivacyBudgetExhausted` and spends
nothing. Composition is basic (epsilons and deltas add), which is valid for any
sequence of adaptively chosen (epsilon_i, delta_i)-DP queries.

:class:`CorpusAccountant` is the contract every backend keeps. The corpus
budget must be as durable and as shared as the corpus itself (docs/design.md §7):
serving code uses a persistent backend kept in the same stores as the per-unit
ledger. :class:`InMemoryCorpusAccountant` lives and dies with one process: it
is for notebooks and tests only, and says so in its name.

>>> acc = InMemoryCorpusAccountant(Budget(1.0, 1e-6))
>>> acc.charge(Budget(0.4))
True
>>> round(acc.remaining.epsilon, 6)
0.6
>>> acc.charge(Budget(0.7))
Traceback (most recent call last):
...
dprag_core.budget.PrivacyBudgetExhausted: query needs epsilon=0.7, delta=0 but only ...
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

from dprag_core.accounting.stores.amounts import check_id
from dprag_core.accounting.stores.errors import reused_id
from dprag_core.budget import FIT_SLACK, Budget, PrivacyBudgetExhausted, positive_budget
from dprag_core.validation import StrictKeywords

__all__ = ["CorpusAccountant", "InMemoryCorpusAccountant"]


def check_cost(cost: object) -> Budget:
    """``cost`` as a :class:`Budget`, or a TypeError naming the parameter.

    >>> check_cost(Budget(0.5)).epsilon
    0.5
    """
    return positive_budget("cost", cost)


def exhausted(
    cost: Budget,
    left_epsilon: float,
    left_delta: float,
    *,
    store: str | None = None,
    status_command: str | None = None,
) -> PrivacyBudgetExhausted:
    """The refusal raised when ``cost`` does not fit in what is left (``store``: its label).

    A durable store's refusal says that the budget persists, the command that
    shows it (``status_command``) and how to start afresh (only for a new
    corpus: the spent budget is the corpus's loss).

    >>> str(exhausted(Budget(2.0), 1.0, 0.0))
    'query needs epsilon=2, delta=0 but only epsilon=1, delta=0 remains'
    >>> print(exhausted(Budget(2.0), 0.0, 0.0, store="corpus budget 'c' in '/b.db'",
    ...                 status_command="dprag ledger status --sqlite /b.db --table c"))
    ... # doctest: +ELLIPSIS
    query needs ... (the budget persists ...; see it: dprag ledger status --sqlite /b.db ...
    """
    shows = f"; see it: {status_command}" if status_command else ""
    where = (
        f" in the {store} (the budget persists across runs and restarts by design: this corpus "
        f"has spent it{shows}; a new corpus needs a budget of its own, under another name)"
        if store
        else ""
    )
    return PrivacyBudgetExhausted(
        f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} but only "
        f"epsilon={max(left_epsilon, 0.0):g}, delta={max(left_delta, 0.0):g} remains{where}"
    )


class CorpusAccountant(StrictKeywords, ABC):
    """A total corpus :class:`Budget` that refuses any charge that would exceed it.

    ``charge(cost, query_id=...)`` records ``cost`` atomically or raises
    :class:`PrivacyBudgetExhausted` and records nothing. It returns True for a
    new charge and False for an accepted retry. A query id buys at most one
    release: charging an id already recorded raises ``ValueError`` naming
    ``query_id``, except the retry of this object's own charge that raised
    :class:`~dprag_core.accounting.stores.errors.LedgerOutcomeUnknown` (it
    returns False when that charge was recorded, True when it is charged now).
    Without an id every call is a new query. Every backend's constructor
    refuses an unknown keyword, naming the nearest valid one.

    >>> acc = InMemoryCorpusAccountant(Budget(1.0))
    >>> acc.charge(Budget(0.6)), acc.can_afford(Budget(0.6)), acc.queries
    (True, False, 1)
    """

    def __init__(self, total: Budget) -> None:
        if not isinstance(total, Budget):
            raise TypeError(f"total must be a Budget, got {type(total).__name__}")
        self.total = total

    @property
    @abstractmethod
    def spent_epsilon(self) -> float:
        """Epsilon spent so far."""

    @property
    @abstractmethod
    def spent_delta(self) -> float:
        """Delta spent so far."""

    @property
    @abstractmethod
    def queries(self) -> int:
        """Number of charged queries."""

    @abstractmethod
    def charge(self, cost: Budget, *, query_id: str | None = None) -> bool:
        """Atomically record ``cost``, or raise PrivacyBudgetExhausted and record nothing.

        True: a new charge was recorded. False: an accepted retry (already recorded).
        """

    @property
    def remaining(self) -> Budget:
        """What is left, as a Budget (an exhausted budget: epsilon 0)."""
        eps = max(self.total.epsilon - self.spent_epsilon, 0.0)
        delta = max(self.total.delta - self.spent_delta, 0.0)
        return Budget(eps, delta)

    def can_afford(self, cost: Budget) -> bool:
        """True when ``cost`` fits in what remains now (a later charge may still be refused)."""
        return fits(check_cost(cost), self.total, self.spent_epsilon, self.spent_delta)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(total={self.total!r}, spent_epsilon={self.spent_epsilon:g}, "
            f"spent_delta={self.spent_delta:g}, queries={self.queries})"
        )


def fits(cost: Budget, total: Budget, spent_epsilon: float, spent_delta: float) -> bool:
    """True when ``cost`` on top of what was spent stays within ``total`` (relative slack).

    >>> fits(Budget(0.5), Budget(1.0), 0.5, 0.0), fits(Budget(0.6), Budget(1.0), 0.5, 0.0)
    (True, False)
    """
    eps_ok = spent_epsilon + cost.epsilon <= total.epsilon * (1 + FIT_SLACK)
    delta_ok = spent_delta + cost.delta <= total.delta * (1 + FIT_SLACK)
    return eps_ok and delta_ok


class InMemoryCorpusAccountant(CorpusAccountant):
    """A thread-safe corpus budget in this process's memory: **not durable, not shared**.

    It starts from zero in every process and after every restart, so it does
    not bound what a deployment spends: use it in notebooks and tests only.
    Query ids are remembered for its lifetime: one buys at most one charge.

    >>> acc = InMemoryCorpusAccountant(Budget(1.0))
    >>> acc.charge(Budget(0.25), query_id="q1"), acc.spent_epsilon
    (True, 0.25)
    """

    def __init__(self, total: Budget) -> None:
        super().__init__(total)
        self._epsilon_spent = 0.0
        self._delta_spent = 0.0
        self._queries = 0
        self._ids: set[str] = set()
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

    def charge(self, cost: Budget, *, query_id: str | None = None) -> bool:
        """Atomically record ``cost``, or raise PrivacyBudgetExhausted and record nothing.

        Returns True (an in-memory charge never has an unknown outcome).
        """
        cost = check_cost(cost)
        qid = None if query_id is None else check_id("query_id", query_id)
        with self._lock:
            if qid in self._ids:
                raise reused_id()
            if not fits(cost, self.total, self._epsilon_spent, self._delta_spent):
                raise exhausted(
                    cost,
                    self.total.epsilon - self._epsilon_spent,
                    self.total.delta - self._delta_spent,
                )
            self._epsilon_spent += cost.epsilon
            self._delta_spent += cost.delta
            self._queries += 1
            if qid is not None:
                self._ids.add(qid)
            return True
