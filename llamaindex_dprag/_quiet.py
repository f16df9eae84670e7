"""Keep private text out of LlamaIndex instrumentation, callbacks and exceptions.

LlamaIndex reports every retrieval and every LLM call twice: to the
instrumentation dispatcher (``RetrievalEndEvent`` carries the nodes,
``LLMCompletionStartEvent`` the prompt, and every span handler receives the
arguments and the return value of the decorated methods) and to the callback
manager (``RETRIEVE`` / ``LLM`` events with nodes, prompts and completions).
Inside a DP query those payloads are the private documents and the voters'
outputs, so they must not reach any handler.

The retriever also logs the start of every retrieved node at DEBUG
(``llama_index.core.indices.utils``), provider clients log their requests
(``openai._base_client`` the request JSON with the prompt) and numpy warns about
a zero embedding in a ``SimpleVectorStore``, so a private section is quiet
(:func:`dprag_core.quiet_logs.muted_logs`): no log record of any logger, no
warning and no Python-level stdout/stderr write made inside it is shown.

The dispatcher has no per-call switch (``propagate`` is a per-dispatcher flag,
global to the process), so :func:`private_section` sets a context variable and
the first call installs a small guard on ``Dispatcher.event`` / ``aevent`` /
``span_enter`` / ``span_exit`` / ``span_drop`` and on the callback manager's
``on_event_start`` / ``on_event_end`` / ``start_trace`` / ``end_trace``: while
the variable is set in the current context (thread or asyncio task), these
return without calling any handler; everywhere else they behave exactly as
before. The trade-off: the operator's traces show the DP query engine's own span
(the question and the DP answer) but nothing of the private retrieval and
generation inside it, including its LLM token usage.

Exceptions raised by private code can quote it (an API error echoing the
prompt) and their tracebacks hold it: the entry points run private code under
the core sanitiser :func:`dprag_core.errors.guarded`, which raises the one
fixed :class:`~dprag_core.errors.PrivateDataError` (``PrivateStageError`` is
the same class, under the name this package used first).

>>> from llama_index.core.instrumentation import get_dispatcher
>>> with private_section():  # nothing inside is reported, logged, warned or printed
...     event = get_dispatcher().event
>>> event  # doctest: +ELLIPSIS
<bound method ...>
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from dprag_core.errors import PrivateDataError
from dprag_core.quiet_logs import muted_logs

__all__ = ["PrivateStageError", "is_private", "private_section"]

_PRIVATE: ContextVar[bool] = ContextVar("llamaindex_dprag_private", default=False)
_GUARD_ATTR = "__llamaindex_dprag_guard__"
_install_lock = threading.Lock()


PrivateStageError = PrivateDataError
"""The old name of :class:`dprag_core.errors.PrivateDataError` (the same class)."""


def is_private() -> bool:
    """True inside :func:`private_section` in the current thread or task.

    >>> is_private()
    False
    """
    return _PRIVATE.get()


def _guard(original: Callable[..., Any], muted: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(original, _GUARD_ATTR, False):
        return original

    @functools.wraps(original)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _PRIVATE.get():
            return muted(*args, **kwargs)
        return original(self, *args, **kwargs)

    setattr(guarded, _GUARD_ATTR, True)
    return guarded


def _guard_async(original: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(original, _GUARD_ATTR, False):
        return original

    @functools.wraps(original)
    async def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _PRIVATE.get():
            return None
        return await original(self, *args, **kwargs)

    setattr(guarded, _GUARD_ATTR, True)
    return guarded


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _event_id(*args: Any, event_id: str | None = None, **kwargs: Any) -> str:
    return event_id or str(uuid.uuid4())


def _install() -> None:
    from llama_index.core.callbacks.base import CallbackManager
    from llama_index_instrumentation.dispatcher import Dispatcher

    with _install_lock:
        for name in ("event", "span_enter", "span_exit", "span_drop"):
            setattr(Dispatcher, name, _guard(getattr(Dispatcher, name), _nothing))
        Dispatcher.aevent = _guard_async(Dispatcher.aevent)  # type: ignore[method-assign]
        CallbackManager.on_event_start = _guard(  # type: ignore[method-assign]
            CallbackManager.on_event_start, _event_id
        )
        for name in ("on_event_end", "start_trace", "end_trace"):
            setattr(CallbackManager, name, _guard(getattr(CallbackManager, name), _nothing))


@contextmanager
def private_section() -> Iterator[None]:
    """Run a block without reporting anything to LlamaIndex handlers.

    Applies to the current thread or asyncio task and to tasks it starts
    (context variables are copied into them); ``asyncio.to_thread`` copies it too.

    >>> with private_section():
    ...     inside = is_private()
    >>> inside, is_private()
    (True, False)
    """
    _install()
    token = _PRIVATE.set(True)
    try:
        with muted_logs():
            yield
    finally:
        _PRIVATE.reset(token)
