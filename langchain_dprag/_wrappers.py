"""Unwrap a Runnable around a LangChain model into a plan the sealed path can run.

Apps configure their model with Runnable wrappers: ``llm.bind(stop=[...])``,
``.with_retry()``, ``.with_fallbacks([...])``, ``.with_config(...)``. Calling
such a wrapper with ``invoke`` would run the private prompts through
LangChain's callback machinery (every handler, tracer and cache on the route,
:mod:`langchain_dprag.models`). So :func:`unwrap` takes the wrapper apart once,
when the :class:`~langchain_dprag.models.LangChainTextModel` is built, into a
:data:`Plan` of the models inside and what the wrappers do, and
:func:`complete` / :func:`acomplete` do it themselves on the sealed path:

- ``bind(**kwargs)`` (``stop``, ``temperature``, tools, ...): the keywords go to
  the model's own generation method (``stop`` as its ``stop`` argument);
- ``with_retry``: the same tenacity policy LangChain builds from the wrapper's
  fields (exception types, attempts, exponential jitter), without callbacks;
- ``with_fallbacks``: the models in order, moving on on the handled
  exceptions; the first error is raised when all fail, as LangChain does;
- ``with_config`` / ``with_listeners``: callbacks, tags, metadata, run names
  and listeners are observers, and they are dropped: nothing observes a
  private prompt. A ``configurable`` value cannot be applied and is refused.

Anything else around the model (a prompt or a parser in a sequence,
``with_structured_output``, ``configurable_alternatives``, a lambda) cannot be
sealed: :func:`unwrap` refuses it, naming what it found.

>>> from langchain_core.language_models import FakeListLLM
>>> plan = unwrap(FakeListLLM(responses=["a"]).bind(stop=["\\n"]).with_retry())
>>> type(plan).__name__, type(plan.inner).__name__, dict(plan.inner.kwargs)
('Retry', 'Leaf', {'stop': ['\\n']})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from langchain_core.language_models import BaseChatModel, BaseLanguageModel, BaseLLM
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.runnables.retry import RunnableRetry

from dprag_core.models.cut import marked
from langchain_dprag._compat import message_text
from langchain_dprag._sealed import unsealable_config

__all__ = ["Fallbacks", "Leaf", "Plan", "Retry", "acomplete", "complete", "sealed", "unwrap"]

_BARE = {"callbacks": None, "cache": False, "verbose": False, "tags": None, "metadata": None}

HOW = (
    "pass a LangChain chat model or LLM, optionally wrapped in .bind(...), .with_retry(...), "
    ".with_fallbacks([...]) or .with_config(...)"
)


@dataclass(frozen=True)
class Leaf:
    """A model and the keywords bound to it."""

    model: BaseLanguageModel[Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Retry:
    """Retry ``inner`` with the policy of ``wrapper`` (a ``RunnableRetry``)."""

    inner: Plan
    wrapper: RunnableRetry[Any, Any]


@dataclass(frozen=True)
class Fallbacks:
    """Try ``options`` in order, moving on on ``exceptions``."""

    options: tuple[Plan, ...]
    exceptions: tuple[type[BaseException], ...]


Plan = Union[Leaf, Retry, Fallbacks]  # noqa: UP007 (a runtime alias)


def _config(binding: RunnableBindingBase[Any, Any]) -> None:
    unsealable = unsealable_config(binding.config)
    if unsealable:
        raise TypeError(
            f"model's config sets {unsealable}, which dprag cannot apply on its sealed path "
            f"(set such values on the model itself): {HOW}"
        )


def unwrap(runnable: object, kwargs: Mapping[str, Any] | None = None) -> Plan:
    """The :data:`Plan` of ``runnable`` (module docstring); TypeError for what cannot be sealed."""
    bound = dict(kwargs or {})
    if isinstance(runnable, (BaseChatModel, BaseLLM)):
        return Leaf(runnable, bound)
    if isinstance(runnable, RunnableBindingBase):  # bind, with_config, with_retry, listeners
        _config(runnable)
        inner = unwrap(runnable.bound, {**runnable.kwargs, **bound})
        if not isinstance(runnable, RunnableRetry):
            return inner
        types = runnable.retry_exception_types
        if not isinstance(types, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in types
        ):  # anything else would be user code handed the raw (private) provider error
            raise TypeError(
                "model.with_retry(retry_if_exception_type=...) must be a tuple of exception "
                "types to be sealed: " + HOW
            )
        return Retry(inner, runnable)
    if isinstance(runnable, RunnableWithFallbacks):
        if runnable.exception_key is not None:
            raise TypeError("model.with_fallbacks(exception_key=...) cannot be sealed: " + HOW)
        options = (runnable.runnable, *runnable.fallbacks)
        return Fallbacks(
            tuple(unwrap(r, bound) for r in options), tuple(runnable.exceptions_to_handle)
        )
    kind = type(runnable).__name__
    what = "a Runnable" if isinstance(runnable, Runnable) else "an object"
    raise TypeError(
        f"model must be a LangChain chat model or LLM that dprag can call on its sealed path; "
        f"got {what} of type {kind}, which would see the private prompts: {HOW}"
    )


def sealed(plan: Plan) -> Plan:
    """``plan`` with each model replaced by a copy without callbacks, cache and verbosity."""
    if isinstance(plan, Leaf):
        return replace(plan, model=plan.model.model_copy(update=_BARE))
    if isinstance(plan, Retry):
        return replace(plan, inner=sealed(plan.inner))
    return replace(plan, options=tuple(sealed(p) for p in plan.options))


def _split(leaf: Leaf, extra: Mapping[str, Any]) -> tuple[list[str] | None, dict[str, Any]]:
    kwargs = {**leaf.kwargs, **extra}
    return kwargs.pop("stop", None), kwargs


def _leaf(leaf: Leaf, prompt: str, extra: Mapping[str, Any]) -> str:
    stop, kwargs = _split(leaf, extra)
    model = leaf.model
    if isinstance(model, BaseChatModel):
        chat = model._generate_with_cache([HumanMessage(content=prompt)], stop=stop, **kwargs)
        return _chat_text(chat.generations[0])
    assert isinstance(model, BaseLLM)
    return _llm_text(model._generate([prompt], stop=stop, **kwargs).generations[0][0])


async def _aleaf(leaf: Leaf, prompt: str, extra: Mapping[str, Any]) -> str:
    stop, kwargs = _split(leaf, extra)
    model = leaf.model
    if isinstance(model, BaseChatModel):
        messages: list[BaseMessage] = [HumanMessage(content=prompt)]
        chat = await model._agenerate_with_cache(messages, stop=stop, **kwargs)
        return _chat_text(chat.generations[0])
    assert isinstance(model, BaseLLM)
    return _llm_text((await model._agenerate([prompt], stop=stop, **kwargs)).generations[0][0])


def _chat_text(generation: Any) -> str:
    """The message's text, a :class:`~dprag_core.models.cut.CutText` when the provider
    says it stopped at the token limit (``finish_reason`` / ``stop_reason``)."""
    meta = {**(generation.generation_info or {}), **generation.message.response_metadata}
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    return marked(message_text(generation.message), reason)


def _llm_text(generation: Any) -> str:
    return marked(generation.text, (generation.generation_info or {}).get("finish_reason"))


def complete(plan: Plan, prompt: str, extra: Mapping[str, Any]) -> str:
    """One completion of ``prompt`` by a :func:`sealed` plan, below the callback machinery."""
    if isinstance(plan, Leaf):
        return _leaf(plan, prompt, extra)
    if isinstance(plan, Retry):
        for attempt in plan.wrapper._sync_retrying(reraise=True):
            with attempt:
                return complete(plan.inner, prompt, extra)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover
    first: BaseException | None = None
    for option in plan.options:
        try:
            return complete(option, prompt, extra)
        except plan.exceptions as err:
            first = first or err
    assert first is not None
    raise first


async def acomplete(plan: Plan, prompt: str, extra: Mapping[str, Any]) -> str:
    """Async :func:`complete`."""
    if isinstance(plan, Leaf):
        return await _aleaf(plan, prompt, extra)
    if isinstance(plan, Retry):
        async for attempt in plan.wrapper._async_retrying(reraise=True):
            with attempt:
                return await acomplete(plan.inner, prompt, extra)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover
    first: BaseException | None = None
    for option in plan.options:
        try:
            return await acomplete(option, prompt, extra)
        except plan.exceptions as err:
            first = first or err
    assert first is not None
    raise first
