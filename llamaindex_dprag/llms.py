"""Any LlamaIndex ``LLM`` as a dprag :class:`~dprag_core.models.base.TextModel`.

Text-level mechanisms (DP-KSA, KSA and the text baselines) only need
completions, so any LlamaIndex LLM works: ``OpenAI``, ``OpenAILike``,
``Ollama``, a ``CustomLLM``... Each prompt (a user message with private
documents in it) is sent with the LLM's own sync ``complete``; a batch runs
``max_concurrency`` calls at a time on worker threads, from sync and async
code alike (:meth:`LlamaIndexTextModel.agenerate` awaits the same threads).
Why not ``acomplete``: an async provider client (``AsyncOpenAI`` under
``OpenAILike``) keeps pooled connections bound to the event loop that opened
them, so driving it from a new loop per batch, or from an app's successive
``asyncio.run`` calls, fails a later query with "Event loop is closed"; the
sync client is thread-safe and bound to no loop. The worker threads live for
one batch and are joined before it returns.

A completion its LLM stopped at the token limit (``finish_reason`` "length" or
"max_tokens" in the provider's raw response) comes back as a
:class:`~dprag_core.models.cut.CutText`, so an answer key drops its cut last word.

The prompts and completions are private: the calls run inside
:func:`~llamaindex_dprag._quiet.private_section`, so the LLM's
``LLMCompletionStartEvent`` / ``EndEvent``, its spans and its callback-manager
``LLM`` events reach no handler (which also means that token-usage handlers do
not count these calls), the provider clients' loggers are muted, and an error
is re-raised as the one fixed :class:`~dprag_core.errors.PrivateDataError`,
without its class, message, cause or traceback (a provider error can quote the
prompt).

>>> from llama_index.core.llms import MockLLM
>>> LlamaIndexTextModel(MockLLM(max_tokens=2)).generate(["Question: x"])
['text text']
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from llama_index.core.llms import LLM

from dprag_core.errors import aguarded, guarded
from dprag_core.models.cut import marked
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES, keep_last_bytes
from dprag_core.validation import positive_int, strict_init
from llamaindex_dprag._quiet import private_section

T = TypeVar("T")

__all__ = ["LlamaIndexTextModel"]


class LlamaIndexTextModel:
    """Wrap a LlamaIndex ``LLM`` as a dprag ``TextModel``.

    ``max_tokens_kwarg``: the keyword (e.g. ``"max_tokens"``) under which this
    LLM's ``complete`` accepts a per-call length limit; ``None`` (default)
    leaves the limit to the LLM's own configuration, since LlamaIndex has no
    common per-call keyword for it.

    ``max_prompt_bytes`` (public, default 16384): every prompt keeps its last that
    many UTF-8 bytes (:mod:`dprag_core.models.envelope` says why, and how to choose it).

    >>> from llama_index.core.llms import MockLLM
    >>> model = LlamaIndexTextModel(MockLLM(max_tokens=1), max_concurrency=2)
    >>> model.generate(["a", "b"])
    ['text', 'text']
    """

    @strict_init
    def __init__(
        self,
        llm: LLM,
        *,
        max_concurrency: int = 4,
        max_tokens_kwarg: str | None = None,
        max_prompt_bytes: int = DEFAULT_PROMPT_BYTES,
    ) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a LlamaIndex LLM, got {type(llm).__name__}")
        if max_tokens_kwarg is not None and not isinstance(max_tokens_kwarg, str):
            raise TypeError("max_tokens_kwarg must be a str or None")
        self.llm = llm
        self.max_concurrency = positive_int("max_concurrency", max_concurrency)
        self.max_tokens_kwarg = max_tokens_kwarg
        self.max_prompt_bytes = positive_int("max_prompt_bytes", max_prompt_bytes)

    def _cut(self, prompts: Sequence[str]) -> list[str]:
        """Each prompt's last ``max_prompt_bytes`` bytes (the public width)."""
        return [keep_last_bytes(p, self.max_prompt_bytes) for p in prompts]

    def _kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        return {} if self.max_tokens_kwarg is None else {self.max_tokens_kwarg: max_new_tokens}

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per prompt, in order (``max_concurrency`` threads at a time)."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        kwargs = self._kwargs(max_new_tokens)
        with private_section():
            return guarded(lambda: self._complete_all(prompts, kwargs, self._complete))

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """:meth:`generate`'s calls, one per prompt; None where a prompt's own call failed
        (a content filter), its error dropped, nothing sent again
        (:mod:`dprag_core.models.outcomes`)."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        kwargs = self._kwargs(max_new_tokens)
        with private_section():
            return guarded(lambda: self._complete_all(prompts, kwargs, self._complete_or_none))

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """Async :meth:`generate`: the same threads, awaited (the event loop stays free)."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        kwargs = self._kwargs(max_new_tokens)
        with private_section():
            return await aguarded(
                lambda: asyncio.to_thread(self._complete_all, prompts, kwargs, self._complete)
            )

    def _complete_all(
        self, prompts: list[str], kwargs: dict[str, Any], one: Callable[[str, dict[str, Any]], T]
    ) -> list[T]:
        """``one`` on every prompt, ``max_concurrency`` at a time on worker threads, each in
        a copy of this context (the private section holds there too); joined before it
        returns."""
        if self.max_concurrency == 1 or len(prompts) <= 1:
            return [one(p, kwargs) for p in prompts]
        workers = min(self.max_concurrency, len(prompts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dprag-llm") as pool:
            futures = [pool.submit(contextvars.copy_context().run, one, p, kwargs) for p in prompts]
            return [f.result() for f in futures]

    def _complete(self, prompt: str, kwargs: dict[str, Any]) -> str:
        response = self.llm.complete(prompt, **kwargs)
        return marked(response.text, _stop_reason(response.raw))

    def _complete_or_none(self, prompt: str, kwargs: dict[str, Any]) -> str | None:
        """One prompt's completion, or None where its own call failed (a refusal)."""
        try:
            return self._complete(prompt, kwargs)
        except Exception:
            return None

    def __repr__(self) -> str:
        llm = type(self.llm).__name__
        return f"LlamaIndexTextModel(llm={llm}, max_concurrency={self.max_concurrency})"


def _stop_reason(raw: Any) -> object:
    """The provider's stop reason in a raw response (first choice), if it has one."""
    try:
        choices = _field(raw, "choices")
        if choices:
            return _field(choices[0], "finish_reason")
        return _field(raw, "stop_reason")
    except Exception:
        return None


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a dict, ``obj.name`` of an object; None when it has none."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
