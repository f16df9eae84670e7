"""Keep a private section quiet: nothing it logs, warns or prints is shown.

Code that runs over private documents (a store's search, a tokenizer, a model
client, numpy) reports on what it sees: ``openai._base_client`` logs the
request JSON (the prompts), transformers logs "Token indices sequence length is
longer than the specified maximum sequence length (13526 > 1024)" for a long
document only, numpy warns ``RuntimeWarning: invalid value encountered`` for a
zero or NaN embedding only, a library may ``print``. Any of these would tell a
host that a document was retrieved. Inside :func:`muted_logs` (and a context
muted with :func:`mute_this_context`), in the current thread or asyncio task
and in the tasks and worker threads it starts with a copied context:

- **every log record of every logger** is dropped (``Logger.isEnabledFor`` is
  False and ``Logger.handle`` delivers nothing), whatever its level and
  wherever its handlers are, ``logging.lastResort`` included;
- **every warning** (``warnings.warn``, and the C-level warnings of numpy and
  other extensions) is ignored by a filter at the front of ``warnings.filters``
  that matches only inside a quiet context. "ignore" is decided before the
  warnings registry is written, so a warning dropped inside does not change
  whether a later public warning from the same place is shown; numpy's error
  state is "ignore" inside too (so its ``"print"``, ``"log"`` or ``"call"``
  modes stay silent);
- **Python-level writes to ``sys.stdout`` and ``sys.stderr``** (``print``,
  ``sys.stderr.write``) are dropped: both are wrapped once in a stream that
  forwards everything outside a quiet context.

Outside a quiet context everything behaves exactly as before: the hooks are
installed on first use, once per process, and consult a context variable.
What it does not reach: writes to file descriptors 1 and 2 below Python (C or
Rust code calling ``write(2)``, ``fprintf(stderr, ...)``, a subprocess), a
stream's ``.buffer`` written directly, a thread started without a copied
context (``threading.Thread``, ``loop.run_in_executor``), and state a library
keeps of its own (transformers' once-only warnings remember that they fired
even when their record was dropped).

>>> import io, logging, sys, warnings
>>> stream = io.StringIO()
>>> log = logging.getLogger("openai._base_client")
>>> log.addHandler(logging.StreamHandler(stream)); log.setLevel(logging.DEBUG)
>>> with muted_logs():
...     log.debug("Request options: {'messages': [...]}")
...     warnings.warn("private")
...     print("private")
>>> log.debug("outside"); log.handlers.clear(); log.setLevel(logging.NOTSET)
>>> stream.getvalue()
'outside\\n'
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

import numpy as np

__all__ = ["logs_muted", "mute_this_context", "muted_logs"]

_MUTED: ContextVar[bool] = ContextVar("dprag_muted_logs", default=False)
_lock = threading.Lock()
_PATCHED = "__dprag_quiet__"


def logs_muted() -> bool:
    """True inside :func:`muted_logs` in the current thread or task.

    >>> logs_muted()
    False
    """
    return _MUTED.get()


# -- logging -------------------------------------------------------------------------


def _quiet_method(original: Callable[..., Any], muted: object) -> Callable[..., Any]:
    def method(self: logging.Logger, *args: Any) -> Any:
        if _MUTED.get():
            return muted
        return original(self, *args)

    method.__name__ = original.__name__
    method.__doc__ = original.__doc__
    setattr(method, _PATCHED, True)
    return method


def _install_logging() -> None:
    for name, muted in (("isEnabledFor", False), ("handle", None)):
        original = getattr(logging.Logger, name)
        if not getattr(original, _PATCHED, False):
            setattr(logging.Logger, name, _quiet_method(original, muted))


# -- warnings ------------------------------------------------------------------------


class _InQuietContext:
    """A warnings filter's message pattern that matches every message inside a quiet context."""

    pattern = "<any message, inside a dprag private section>"

    def match(self, text: object) -> bool:
        return _MUTED.get()

    def __repr__(self) -> str:
        return "dprag_core.quiet_logs: inside a private section"


_FILTER = ("ignore", _InQuietContext(), Warning, None, 0)


def _install_warnings() -> None:
    filters = cast(list[Any], warnings.filters)  # a list (typeshed: a Sequence)
    if filters and filters[0] is _FILTER:
        return
    if _FILTER in filters:
        filters.remove(_FILTER)
    filters.insert(0, _FILTER)  # first: no user filter ("always", "error") precedes it
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(
        warnings, "_filters_mutated_lock_held", None
    )
    if mutated is not None:
        mutated()


# -- stdout / stderr -----------------------------------------------------------------


class _QuietStream:
    """``sys.stdout`` / ``sys.stderr`` as they were, except that writes inside a quiet
    context are dropped (every other attribute is the wrapped stream's)."""

    def __init__(self, inner: Any) -> None:
        self._dprag_inner = inner

    def write(self, text: str) -> int:
        if _MUTED.get():
            return len(text)
        written: int = self._dprag_inner.write(text)
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        if not _MUTED.get():
            self._dprag_inner.writelines(lines)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dprag_inner, name)

    def __repr__(self) -> str:
        return repr(self._dprag_inner)


def _install_streams() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _QuietStream):
            setattr(sys, name, _QuietStream(stream))


def _install() -> None:
    with _lock:
        _install_logging()
        _install_warnings()
        _install_streams()


def mute_this_context() -> None:
    """Quiet the rest of the current context (a copied one): logs, warnings, stdout/stderr.

    For code that runs in a context made for private work
    (``contextvars.copy_context().run(...)``); elsewhere use :func:`muted_logs`.

    >>> import contextvars
    >>> contextvars.copy_context().run(lambda: (mute_this_context(), logs_muted())[1])
    True
    >>> logs_muted()
    False
    """
    _install()
    _MUTED.set(True)
    np.seterr(all="ignore")  # numpy's error state is a context variable too


@contextmanager
def muted_logs() -> Iterator[None]:
    """Drop every log record, warning and Python-level stdout/stderr write of this block
    (this context only: module docstring).

    >>> with muted_logs():
    ...     inside = logs_muted()  # (a value echoed here would be a write to stdout: dropped)
    >>> inside, logs_muted()
    (True, False)
    """
    _install()
    token = _MUTED.set(True)
    try:
        with np.errstate(all="ignore"):
            yield
    finally:
        _MUTED.reset(token)
