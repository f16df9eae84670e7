"""The query ids whose charge ended in an unknown outcome: the only retries a budget accepts.

A query id buys at most one release. After :class:`LedgerOutcomeUnknown` the
caller may not release anything and must find out whether the charge was
recorded: it retries with the same id on the same budget object, which
remembers (in memory, bounded) the ids and charges it saw end that way.
Only such a retry may find its id already recorded and be accepted (as
charged once); any other reuse of a recorded id is refused.

>>> pending = PendingRetries()
>>> pending.remember("q1", (5,))
>>> pending.take("q1"), pending.take("q1")
((5,), None)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["MAX_PENDING", "PendingRetries"]

MAX_PENDING = 10_000
"""How many unknown-outcome ids one budget object remembers (the oldest are forgotten)."""


class PendingRetries:
    """Thread-safe, bounded map of query id -> the charge whose outcome was unknown.

    >>> p = PendingRetries(limit=1)
    >>> p.remember("a", 1); p.remember("b", 2)
    >>> p.peek("a"), p.peek("b")
    (None, 2)
    """

    def __init__(self, *, limit: int = MAX_PENDING) -> None:
        self._ids: OrderedDict[str, Any] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def remember(self, query_id: str, charge: Any) -> None:
        """Record that ``charge`` under ``query_id`` ended with an unknown outcome."""
        with self._lock:
            self._ids[query_id] = charge
            self._ids.move_to_end(query_id)
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)

    def peek(self, query_id: str) -> Any:
        """The pending charge of ``query_id``, or None (kept)."""
        with self._lock:
            return self._ids.get(query_id)

    def take(self, query_id: str) -> Any:
        """The pending charge of ``query_id``, or None (forgotten: its outcome is now known)."""
        with self._lock:
            return self._ids.pop(query_id, None)
