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
attach a printer). A sealed context is quiet too (:mod:`dprag_core.quiet_logs`):
no log record of any logger, no warning and no Python-level stdout/stderr write
made inside it is shown.

Two routes still reach a run started with ``invoke`` even there: a configure
hook switched on by its *environment variable* (``register_configure_hook(...,
env_var=...)``), and an instrumentor that patches the callback manager itself
(OpenInference's LangChain instrumentor, MLflow autolog). The model calls
avoid the machinery altogether (:mod:`langchain_dprag.models`); a user's
``BaseRetriever`` cannot, so :func:`refuse_side_doors` detects both and the
chain refuses to run, naming them, before anything is charged.

>>> run_sealed(lambda x: x + 1, 1)
2
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackManager, CallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers.stdout import ConsoleCallbackHandler
from langchain_core.utils.env import env_var_is_set
from langsmith.run_helpers import tracing_context

from dprag_core.quiet_logs import mute_this_context

__all__ = [
    "MutedConsoleHandler",
    "Sealed",
    "SideDoorError",
    "refuse_side_doors",
    "run_sealed",
    "sealed_config",
    "side_doors",
    "unsealable_config",
]

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
    mute_this_context()


_DROPPED = frozenset(
    {"callbacks", "tags", "metadata", "run_name", "run_id", "max_concurrency", "recursion_limit"}
)


def unsealable_config(config: Mapping[str, Any] | None) -> list[str]:
    """The keys of a wrapper's config that a sealed call cannot honour by dropping them.

    Observers (callbacks, tags, metadata, run names) and scheduling hints are
    dropped: a sealed call has no observers. A non-empty ``configurable`` (or
    any other key) would change what runs, so it is reported.

    >>> unsealable_config({"callbacks": [], "tags": ["t"], "configurable": {"temperature": 0}})
    ['configurable']
    """
    config = dict(config or {})
    if not config.get("configurable"):
        config.pop("configurable", None)
    return sorted(set(config) - _DROPPED)


class SideDoorError(RuntimeError):
    """A LangChain run over private data would reach a handler dprag cannot switch off."""


def _patched(cls: type) -> list[str]:
    found = []
    for name, attr in vars(cls).items():
        func = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
        if isinstance(attr, (property, type)) or not callable(func):
            continue
        own = isinstance(func, types.FunctionType) and func.__module__.startswith("langchain_core.")
        if not own:
            found.append(f"{cls.__name__}.{name} is patched (an instrumentor)")
    return found


def side_doors() -> list[str]:
    """What would see a LangChain run over private data despite sealing: empty when safe.

    Configure hooks switched on by their environment variable, and callback
    manager methods replaced by an instrumentor (OpenInference, MLflow autolog).

    >>> side_doors()
    []
    """
    from langchain_core.tracers.context import _configure_hooks

    found = [
        f"{handler.__name__} (a configure hook switched on by ${env_var})"
        for _, _, handler, env_var in _configure_hooks
        if env_var is not None and handler is not None and env_var_is_set(env_var)
    ]
    for cls in (BaseCallbackManager, CallbackManager, AsyncCallbackManager):
        found += _patched(cls)
    return found


def refuse_side_doors(where: str) -> None:
    """Raise :class:`SideDoorError` naming every :func:`side_doors` entry, if any.

    >>> refuse_side_doors("the retriever")
    """
    found = side_doors()
    if found:
        raise SideDoorError(
            f"{where} would run over private documents where these would see them: "
            f"{'; '.join(found)}. Unset the variable or remove the instrumentation, or pass "
            "vectorstore= (searched directly, outside LangChain's callback machinery)"
        )


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
