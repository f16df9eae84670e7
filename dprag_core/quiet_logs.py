"""Mute the loggers of model clients and frameworks while private data is in use.

Provider clients log their requests at DEBUG: ``openai._base_client`` logs the
request JSON (the prompts, which contain the private documents), ``httpx`` /
``httpcore`` / ``urllib3`` the traffic, LlamaIndex the start of every
retrieved node. Inside :func:`muted_logs`, every record of the loggers named
in :data:`MUTED_LOGGERS` (and of their children) is dropped, whatever the
level and wherever the handlers are; outside, they behave exactly as before.

How: a filter on each of those loggers that drops records only while a
context variable is set, so the muting applies to the current thread or
asyncio task and to the tasks and worker threads it starts with a copied
context, never to other requests served by the same process. (A logger's
filter does not see its children's records, so each existing child logger
gets the filter too; the list is re-scanned whenever new loggers appeared.)

>>> import io, logging
>>> stream = io.StringIO()
>>> log = logging.getLogger("openai._base_client")
>>> log.addHandler(logging.StreamHandler(stream)); log.setLevel(logging.DEBUG)
>>> with muted_logs():
...     log.debug("Request options: {'messages': [...]}")
>>> log.debug("outside"); log.handlers.clear(); log.setLevel(logging.NOTSET)
>>> stream.getvalue()
'outside\\n'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["MUTED_LOGGERS", "logs_muted", "mute_this_context", "muted_logs"]

MUTED_LOGGERS: tuple[str, ...] = (
    "aiohttp",
    "anthropic",
    "botocore",
    "cohere",
    "google",
    "groq",
    "httpcore",
    "httpx",
    "huggingface_hub",
    "langchain",
    "langchain_core",
    "langsmith",
    "llama_index",
    "mistralai",
    "ollama",
    "openai",
    "requests",
    "urllib3",
)
"""Logger names (with their children) muted inside a private section."""

_MUTED: ContextVar[bool] = ContextVar("dprag_muted_logs", default=False)
_lock = threading.Lock()
_scanned = -1


class _MutedRecordFilter(logging.Filter):
    """Drops the records emitted inside :func:`muted_logs`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _MUTED.get()


_FILTER = _MutedRecordFilter()


def _is_muted_name(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in MUTED_LOGGERS)


def _install() -> None:
    global _scanned
    loggers = logging.root.manager.loggerDict
    if len(loggers) == _scanned:
        return
    with _lock:
        for name in MUTED_LOGGERS:  # the roots exist from now on, children or not
            logging.getLogger(name)
        for name, logger in list(loggers.items()):
            if not isinstance(logger, logging.Logger) or not _is_muted_name(name):
                continue
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        _scanned = len(loggers)


def logs_muted() -> bool:
    """True inside :func:`muted_logs` in the current thread or task.

    >>> logs_muted()
    False
    """
    return _MUTED.get()


def mute_this_context() -> None:
    """Mute :data:`MUTED_LOGGERS` for the rest of the current context (a copied one).

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


@contextmanager
def muted_logs() -> Iterator[None]:
    """Drop every record of :data:`MUTED_LOGGERS` emitted in this block (this context only).

    >>> with muted_logs():
    ...     logs_muted()
    True
    """
    _install()
    token = _MUTED.set(True)
    try:
        yield
    finally:
        _MUTED.reset(token)
