"""A generator stepped in worker threads, closed by whichever side sees it idle.

``DPRAGChain.astream`` steps the mechanism's generator (whose frame holds the
retrieved documents) with ``next`` in a worker thread, one step at a time. A
consumer that stops early, or an event loop that cancels the step's own task
(``asyncio.run`` cancels leftover tasks when it shuts down), must close that
generator, but closing it while ``next`` runs in the thread fails with
"generator already executing" and leaves it open, its frame alive until
collected. :class:`WorkerSteps` closes it exactly once, and never under a
running step: :meth:`~WorkerSteps.close` closes it at once when no step runs,
else it marks it and the running step closes it, in its thread, once ``next``
has returned. A lock guards only the two flags, so the event loop never waits
for a step.

>>> steps = WorkerSteps(iter("ab"))
>>> steps.next(), steps.next(), steps.next()
('a', 'b', None)
>>> def words():
...     try:
...         yield "a"
...     finally:
...         print("closed")
>>> steps = WorkerSteps(words())
>>> steps.next()
'a'
>>> steps.close()
closed
>>> steps.next() is None  # nothing runs once closed
True
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any, Generic, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor

__all__ = ["WorkerSteps", "relay", "stepped_in_worker"]

_T = TypeVar("_T")


class WorkerSteps(Generic[_T]):
    """``next`` for a worker thread and ``close`` for the event loop (module docstring)."""

    def __init__(self, items: Iterator[_T]) -> None:
        self._items = items
        self._lock = threading.Lock()
        self._running = False
        self._closing = False

    def next(self) -> _T | None:
        """The next item, or None at the end or once closing; closes if asked meanwhile."""
        with self._lock:
            if self._closing:
                return None
            self._running = True
        try:
            return next(self._items, None)
        finally:
            with self._lock:
                self._running = False
                close_now = self._closing
            if close_now:
                self._close()

    def close(self) -> None:
        """Close the generator now if no step runs, else when the running step returns."""
        with self._lock:
            self._closing = True
            close_now = not self._running
        if close_now:
            self._close()

    def _close(self) -> None:
        if isinstance(self._items, Generator):
            self._items.close()


def _retrieved(step: asyncio.Future[Any]) -> None:
    """Mark the outcome of a step nobody awaits any more as seen (asyncio need not log it)."""
    if not step.cancelled():
        step.exception()


async def stepped_in_worker(
    items: Iterator[_T], config: RunnableConfig
) -> AsyncGenerator[_T, None]:
    """``items`` (None ends them), each stepped in a worker thread (:class:`WorkerSteps`).

    The mechanism is CPU/GPU-bound, so each ``next`` runs in the executor of
    ``config``; a cancelled wait lets the step finish. Stopped early, it closes
    ``items`` now, or in the worker thread once a running step (cancelled or
    not) returns.
    """
    steps = WorkerSteps(items)
    step: asyncio.Future[_T | None] | None = None
    try:
        while True:
            step = asyncio.ensure_future(run_in_executor(config, steps.next))
            item = await asyncio.shield(step)
            if item is None:
                return
            yield item
    finally:
        steps.close()
        if step is not None:
            step.add_done_callback(_retrieved)


async def relay(stream: AsyncIterator[_T]) -> AsyncGenerator[_T, None]:
    """``stream``'s items; closed early, it closes ``stream`` at once, not when collected."""
    try:
        async for item in stream:
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
