"""The one public failure of a private section (core and both adapters).

A query's private section (:class:`~dprag_core.pipeline.QueryRun`) reads the
corpus: retrieval, the mechanism, the per-unit ledger's charges, the public
fallback's decision. Whatever fails in it can depend on the documents: *which*
step fails (a store rejecting one document, a model endpoint one prompt), the
class of the exception (a store client may raise anything, dprag's own error
classes included) and its message (a tokenizer, a vector store or a model
client may quote its input). Every exception also carries its traceback, whose
frames hold the locals of the code that failed (the retrieved documents, the
prompts built from them); error trackers and debuggers show those locals
(``traceback.TracebackException(exc, capture_locals=True)``, Sentry, rich,
IPython), and a callback's ``on_chain_error`` can walk ``error.__traceback__``.

So nothing raised inside a private section leaves it as itself. :func:`guarded`
runs the private part and, on *any* failure, raises one fixed
:class:`PrivateDataError` (:func:`private_failure`): the same class and the
same message whatever failed, where and why. It is raised from the guard's own
frame, outside the ``except`` block: it has no ``__cause__``, no
``__context__``, and its traceback starts at the guard, so no frame below it
(where the private data lived) is reachable from it. Errors are public by
*where* they are raised (dprag's own checks and charges before the section
opens), never by their class: a ``LedgerOutcomeUnknown`` or a
``PrivacyBudgetExhausted`` raised inside leaves as the fixed failure too.
Entry points put the guard above every frame that holds documents or prompts,
so the frames above it hold only the question.

The data owner debugging their own deployment can switch this off, in their
own process and context only, with :func:`reveal_private_errors`: inside it,
failures propagate unchanged, with their messages and tracebacks. It is off by
default, and must never be on where errors reach logs, traces or trackers.

>>> guarded(lambda: 1 / 0)
Traceback (most recent call last):
...
dprag_core.errors.PrivateDataError: a private step failed (the reason is withheld: ...
>>> with reveal_private_errors():
...     guarded(lambda: 1 / 0)
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = [
    "PRIVATE_FAILURE",
    "PrivateDataError",
    "aguarded",
    "guarded",
    "private_failure",
    "reveal_private_errors",
]

T = TypeVar("T")

_REVEAL: ContextVar[bool] = ContextVar("dprag_reveal_private_errors", default=False)

PRIVATE_FAILURE = (
    "a private step failed (the reason is withheld: it may depend on the private documents; "
    "the data owner can see it with dprag_core.errors.reveal_private_errors()). Nothing was "
    "released and what was charged stays charged; a retry with the same query id on the same "
    "app is never charged twice"
)
"""The message of every :class:`PrivateDataError`: the same whatever failed."""


class PrivateDataError(RuntimeError):
    """The one failure a private section releases: the same class and message whatever failed.

    It keeps nothing of the original exception (not its type, its message,
    its stage or its traceback). No budget is refunded: what was charged
    stays charged; a retry with the same query id on the same app is accepted
    and charged at most once (:mod:`dprag_core.query_ids`).

    >>> str(private_failure()) == PRIVATE_FAILURE
    True
    """


def private_failure() -> PrivateDataError:
    """A fresh instance of the one public failure (:data:`PRIVATE_FAILURE`).

    >>> type(private_failure()).__name__
    'PrivateDataError'
    """
    return PrivateDataError(PRIVATE_FAILURE)


@contextmanager
def reveal_private_errors() -> Iterator[None]:
    """Debug switch (off by default): let failures of private sections propagate unchanged.

    For the data owner only, in their own process: inside this block (the
    current thread or task, and the tasks and worker threads it starts with
    a copied context), :func:`guarded` re-raises the original exception, whose
    message and traceback may contain private documents. Never enable it in a
    service whose errors reach logs, traces or error trackers.

    >>> with reveal_private_errors():
    ...     guarded(lambda: 3)
    3
    """
    token = _REVEAL.set(True)
    try:
        yield
    finally:
        _REVEAL.reset(token)


def guarded(fn: Callable[[], T]) -> T:
    """Return ``fn()``; on any failure raise :func:`private_failure` (module docstring).

    >>> guarded(lambda: 3)
    3
    """
    if _REVEAL.get():
        return fn()
    try:
        return fn()
    except Exception:
        error = private_failure()
    del fn  # the closure may hold private data; this frame stays in the traceback
    raise error


async def aguarded(fn: Callable[[], Awaitable[T]]) -> T:
    """Async :func:`guarded`: await ``fn()``.

    >>> import asyncio
    >>> async def three() -> int:
    ...     return 3
    >>> asyncio.run(aguarded(three))
    3
    """
    if _REVEAL.get():
        return await fn()
    try:
        return await fn()
    except Exception:
        error = private_failure()
    del fn
    raise error
