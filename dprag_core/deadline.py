"""Deadline mode: a query's result leaves at a public time, whatever its work took.

How long a query takes is a channel of its own: a caller with a stopwatch sees
it, and the work behind it (which documents were retrieved, how long their
prompts are, how many tokens each voter wrote) is private. The public envelope
bounds that work by public numbers (a prompt's bytes, the request schedule,
``max_new_tokens``), but within those bounds the time still varies with the
documents. The opt-in deadline mode, after the *predictable transactions* of
Haeberlen, Pierce and Narayan ("Differential Privacy Under Fire", USENIX
Security 2011), takes the time off the table:

- A :class:`Deadline` of ``seconds`` (public, set when the app is built) is
  measured from the query's start (before its public checks and its charge).
- The private section runs in a worker thread. Its result (the released
  answer, or the one fixed failure) is **held** until ``started + seconds``
  and leaves then, not before.
- If the work is not done by ``started + seconds``, the query raises the one
  fixed failure (:func:`~dprag_core.errors.private_failure`) *at*
  ``started + seconds``: an overrun does not lengthen the query, and the late
  result, answer or error, is dropped when it comes, never released. So when
  a query ends reveals nothing but the public deadline.

What remains, and how to choose ``seconds``: *whether* a query overruns is
decided by its work, hence by the documents; the fixed failure then stands
for the answer. Set ``seconds`` above the slowest query the envelope allows
(``benchmarks/timing.py`` prints the slowest it measured and the cost of the
hold), so that an overrun comes from the host's load, not from the corpus.
An overrun's work still runs to its end in its worker thread (Python cannot
stop a thread), drawing on the same CPU as the next queries. The public
part's own errors (a bad question, an exhausted budget) do not wait: they
depend on public inputs only.

>>> import time
>>> deadline = Deadline(0.05)
>>> began = time.monotonic()
>>> deadline.held(lambda: "answer", started=began)(), time.monotonic() - began >= 0.05
('answer', True)
>>> deadline.held(lambda: time.sleep(1), started=time.monotonic())()
Traceback (most recent call last):
...
dprag_core.errors.PrivateDataError: ...
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from dprag_core.errors import guarded, private_failure
from dprag_core.validation import positive_finite

__all__ = ["Deadline", "as_deadline"]

T = TypeVar("T")


class Deadline:
    """A public deadline of ``seconds`` per query (module docstring).

    >>> Deadline(2.5)
    Deadline(seconds=2.5)
    >>> Deadline(0)
    Traceback (most recent call last):
    ...
    ValueError: deadline must be a finite number > 0 (seconds), got 0
    """

    def __init__(self, seconds: float) -> None:
        try:
            self.seconds = positive_finite("deadline", seconds)
        except (TypeError, ValueError):
            raise ValueError(
                f"deadline must be a finite number > 0 (seconds), got {seconds!r}"
            ) from None

    def held(self, fn: Callable[[], T], *, started: float) -> Callable[[], T]:
        """``fn`` run in a worker thread, its result held until ``started + seconds``.

        ``started`` is a :func:`time.monotonic` reading (the query's start).
        The returned callable returns ``fn()``'s result, or raises its error as
        :func:`~dprag_core.errors.guarded` makes it (the one fixed failure), at
        ``started + seconds``; a ``fn`` not done by then: the fixed failure, then.
        """
        end = started + self.seconds

        def run() -> T:
            context = contextvars.copy_context()  # the query's scope, seals and muted logs
            done = threading.Event()
            box: list[tuple[bool, object]] = []

            def work() -> None:
                try:
                    box.append((True, guarded(fn)))
                except Exception as error:  # the fixed failure (or, revealing, the error)
                    box.append((False, error))
                except BaseException:  # an exit of the thread: the fixed failure
                    box.append((False, private_failure()))
                finally:
                    done.set()

            threading.Thread(target=context.run, args=(work,), daemon=True).start()
            in_time = done.wait(max(0.0, end - time.monotonic()))
            _sleep_until(end)
            if not in_time or not box:
                raise private_failure()  # the late result is never read
            ok, value = box[0]
            if not ok:
                assert isinstance(value, BaseException)
                raise value
            return value  # type: ignore[return-value]

        return run

    def __repr__(self) -> str:
        return f"Deadline(seconds={self.seconds:g})"


def as_deadline(value: Deadline | float | None) -> Deadline | None:
    """``value`` as a :class:`Deadline` (a number of seconds), or None (off).

    >>> as_deadline(None) is None, as_deadline(1.5)
    (True, Deadline(seconds=1.5))
    """
    if value is None or isinstance(value, Deadline):
        return value
    return Deadline(value)


def _sleep_until(end: float) -> None:
    """Return at :func:`time.monotonic` ``end`` (not before)."""
    while (left := end - time.monotonic()) > 0:
        time.sleep(left)
