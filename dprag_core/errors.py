"""The one sanitiser for errors that leave a private section (core and both adapters).

Exceptions are a side door: a tokenizer, a vector store or a model client may
quote its input in a message, and every exception carries its traceback,
whose frames hold the locals of the code that failed (the retrieved documents,
the prompts built from them). Error trackers and debuggers show those locals
(``traceback.TracebackException(exc, capture_locals=True)``, Sentry, rich,
IPython), and a callback's ``on_chain_error`` can walk ``error.__traceback__``.

:func:`guarded` runs the private part of a query and, on failure, raises a
*fresh* :class:`PrivateDataError` naming only the stage, where it happened and
the original exception's type. The fresh error is raised from the guard's own
frame, outside the ``except`` block: it has no ``__cause__``, no
``__context__``, and its traceback starts at the guard, so no frame below it
(where the private data lived) is reachable from it. A
:class:`PrivacyBudgetExhausted` (its message holds budgets only) is re-raised
the same way, as a fresh copy, and so is any exception whose class declares
``public_message = True`` and is defined in ``dprag_core`` (the budget stores'
errors, which name the store and never an id: a caller must see
``LedgerOutcomeUnknown`` as itself to retry; another library's class setting the
same attribute is withheld).
Entry points put the guard above every frame that holds documents or prompts,
so the frames above it hold only the question.

The data owner debugging their own deployment can switch this off, in their
own process and context only, with :func:`reveal_private_errors`: inside it,
failures propagate unchanged, with their messages and tracebacks. It is off by
default, and must never be on where errors reach logs, traces or trackers.

>>> guarded("generation", "DPKSA", lambda: 1 / 0)
Traceback (most recent call last):
...
dprag_core.errors.PrivateDataError: generation failed in DPKSA with ZeroDivisionError ...
>>> with reveal_private_errors():
...     guarded("generation", "DPKSA", lambda: 1 / 0)
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from dprag_core.budget import PrivacyBudgetExhausted

__all__ = ["PrivateDataError", "aguarded", "guarded", "reveal_private_errors"]

T = TypeVar("T")

_REVEAL: ContextVar[bool] = ContextVar("dprag_reveal_private_errors", default=False)


class PrivateDataError(RuntimeError):
    """A failure while private documents were in use; message, traceback and cause withheld.

    ``stage``, ``where`` and ``kind`` (the original exception's type name) are
    all it keeps. No budget is refunded: what was charged stays charged.

    >>> err = PrivateDataError.withheld("retrieval", "store", "KeyError")
    >>> err.stage, err.kind
    ('retrieval', 'KeyError')
    """

    stage: str = ""
    where: str = ""
    kind: str = ""

    @classmethod
    def withheld(cls, stage: str, where: str, kind: str) -> PrivateDataError:
        """The error for a failure of type ``kind`` during ``stage`` in ``where``."""
        error = cls(
            f"{stage} failed in {where} with {kind} (message withheld: it may quote private "
            "documents; the data owner can see it with dprag_core.errors.reveal_private_errors())"
        )
        error.stage, error.where, error.kind = stage, where, kind
        return error


@contextmanager
def reveal_private_errors() -> Iterator[None]:
    """Debug switch (off by default): let failures of private sections propagate unchanged.

    For the data owner only, in their own process: inside this block (the
    current thread or task, and the tasks and worker threads it starts with
    a copied context), :func:`guarded` re-raises the original exception, whose
    message and traceback may contain private documents. Never enable it in a
    service whose errors reach logs, traces or error trackers.

    >>> with reveal_private_errors():
    ...     guarded("retrieval", "store", lambda: 3)
    3
    """
    token = _REVEAL.set(True)
    try:
        yield
    finally:
        _REVEAL.reset(token)


def _public(kind: type[Exception]) -> bool:
    """Whether ``kind`` is one of dprag's own errors declared public (``public_message``).

    Only classes defined in ``dprag_core`` count: a class of another library
    (a store client, a model SDK) or of the user's own code that happens to set
    the same attribute is withheld like any other.

    >>> _public(KeyError), _public(PrivacyBudgetExhausted)  # the latter: copied on its own rule
    (False, False)
    """
    own = kind.__module__ == "dprag_core" or kind.__module__.startswith("dprag_core.")
    return own and getattr(kind, "public_message", False) is True


def _replacement(exc: Exception, stage: str, where: str) -> Exception:
    if isinstance(exc, PrivacyBudgetExhausted):
        return PrivacyBudgetExhausted(*exc.args)
    if _public(type(exc)):
        try:
            return type(exc)(*exc.args)
        except Exception:  # a signature that cannot be copied: withheld like any other
            pass
    if isinstance(exc, PrivateDataError):  # sanitised deeper down: keep its facts only
        return PrivateDataError.withheld(exc.stage, exc.where, exc.kind)
    return PrivateDataError.withheld(stage, where, type(exc).__name__)


def guarded(stage: str, where: str, fn: Callable[[], T]) -> T:
    """Return ``fn()``; on failure raise a fresh, data-free error (see the module docstring).

    >>> guarded("retrieval", "store", lambda: 3)
    3
    """
    if _REVEAL.get():
        return fn()
    try:
        return fn()
    except Exception as exc:
        error = _replacement(exc, stage, where)
    del fn  # the closure may hold private data; this frame stays in the traceback
    raise error


async def aguarded(stage: str, where: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Async :func:`guarded`: await ``fn()``.

    >>> import asyncio
    >>> async def three() -> int:
    ...     return 3
    >>> asyncio.run(aguarded("generation", "llm", three))
    3
    """
    if _REVEAL.get():
        return await fn()
    try:
        return await fn()
    except Exception as exc:
        error = _replacement(exc, stage, where)
    del fn
    raise error
