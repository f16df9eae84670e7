"""Run code that touches private documents where no LangChain callback can see it.

Inside a LangChain run, a nested ``invoke`` inherits the parent's callbacks
through a context variable, and ``CallbackManager.configure`` adds tracers from
the environment (LangSmith), from ``tracing_v2_enabled()`` / ``collect_runs()``
and, under ``set_debug(True)``, a console printer. Any of them would record the
prompts and documents of a retrieval or a model call over the private corpus.

:func:`run_sealed` (or :class:`Sealed`, for several calls) runs a function in a
*copy* of the current context where the inherited config, the tracer context
variables and the configure hooks are cleared and LangSmith tracing is
disabled; :func:`sealed_config` is the config to pass to the private calls
(no callbacks; a muted console handler, so that ``set_debug(True)`` does not
attach a printer).

>>> run_sealed(lambda x: x + 1, 1)
2
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers.stdout import ConsoleCallbackHandler
from langsmith.run_helpers import tracing_context

__all__ = ["MutedConsoleHandler", "Sealed", "run_sealed", "sealed_config"]

T = TypeVar("T")


class MutedConsoleHandler(ConsoleCallbackHandler):
    """A console handler that ignores every event.

    Its presence stops ``set_debug(True)`` from attaching a real console printer
    to calls over private data (LangChain adds one only when none is present).
    """

    name: str = "dprag_muted_console"

    @property
    def ignore_llm(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_chain(self) -> bool:
        return True

    @property
    def ignore_agent(self) -> bool:
        return True

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_chat_model(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True

    def _persist_run(self, run: Any) -> None:
        return None


def sealed_config(**extra: Any) -> RunnableConfig:
    """A config with no callbacks (only a muted console handler), for private calls.

    >>> [type(h).__name__ for h in sealed_config()["callbacks"]]
    ['MutedConsoleHandler']
    """
    config = RunnableConfig(callbacks=[MutedConsoleHandler()], tags=[], metadata={})
    config.update(extra)  # type: ignore[typeddict-item]
    return config


def _clear_tracing_context() -> None:
    from langchain_core.tracers.context import tracing_v2_callback_var

    var_child_runnable_config.set(None)
    tracing_v2_callback_var.set(None)
    try:  # the registered configure hooks (collect_runs, usage callbacks, ...)
        from langchain_core.tracers.context import _configure_hooks
    except ImportError:  # pragma: no cover - older langchain-core
        hooks: list[Any] = []
    else:
        hooks = list(_configure_hooks)
    for var, *_ in hooks:
        var.set(None)


def _call_untraced(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    with tracing_context(enabled=False, parent=False):
        return fn(*args, **kwargs)


class Sealed:
    """A copy of the current context with LangChain/LangSmith tracing switched off.

    Use one instance for several calls that belong together (the steps of a
    generator): each :meth:`call` runs in the same sealed context.

    >>> Sealed().call(len, "abc")
    3
    """

    def __init__(self) -> None:
        self._ctx = contextvars.copy_context()
        self._ctx.run(_clear_tracing_context)

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` inside the sealed context."""
        return self._ctx.run(_call_untraced, fn, args, kwargs)


def run_sealed(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` in a fresh :class:`Sealed` context."""
    return Sealed().call(fn, *args, **kwargs)
