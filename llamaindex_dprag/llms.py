"""Any LlamaIndex ``LLM`` as a dprag :class:`~dprag_core.models.base.TextModel`.

Text-level mechanisms (DP-KSA, KSA and the text baselines) only need
completions, so any LlamaIndex LLM works: ``OpenAI``, ``Ollama``, a
``CustomLLM``... Each prompt (a user message with private documents in it) is
sent with ``complete``; batches run concurrently through ``acomplete``
(``max_concurrency`` at a time).

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
import threading
from collections.abc import Sequence
from typing import Any

from llama_index.core.llms import LLM

from dprag_core.errors import aguarded, guarded
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES, keep_last_bytes
from dprag_core.validation import positive_int, strict_init
from llamaindex_dprag._quiet import private_section

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
        """One completion per prompt, in order (concurrent when ``max_concurrency > 1``)."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        with private_section():
            if self.max_concurrency == 1 or len(prompts) <= 1:
                kwargs = self._kwargs(max_new_tokens)
                return guarded(lambda: [self.llm.complete(p, **kwargs).text for p in prompts])
            return guarded(lambda: _run_coroutine(self._agenerate(prompts, max_new_tokens)))

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """:meth:`generate`'s calls, one per prompt; None where a prompt's own call failed
        (a content filter), its error dropped, nothing sent again
        (:mod:`dprag_core.models.outcomes`)."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        with private_section():
            return guarded(lambda: _run_coroutine(self._each(prompts, max_new_tokens)))

    async def _each(self, prompts: list[str], max_new_tokens: int) -> list[str | None]:
        limit = asyncio.Semaphore(self.max_concurrency)
        kwargs = self._kwargs(max_new_tokens)

        async def one(prompt: str) -> str | None:
            async with limit:
                try:
                    return (await self.llm.acomplete(prompt, **kwargs)).text
                except Exception:
                    return None

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """Async :meth:`generate`: ``acomplete`` calls, ``max_concurrency`` at a time."""
        max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        prompts = self._cut(prompts)
        with private_section():
            return await aguarded(lambda: self._agenerate(prompts, max_new_tokens))

    async def _agenerate(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        limit = asyncio.Semaphore(self.max_concurrency)
        kwargs = self._kwargs(max_new_tokens)

        async def one(prompt: str) -> str:
            async with limit:
                return (await self.llm.acomplete(prompt, **kwargs)).text

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    def __repr__(self) -> str:
        llm = type(self.llm).__name__
        return f"LlamaIndexTextModel(llm={llm}, max_concurrency={self.max_concurrency})"


def _run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code, even under a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # a loop is running in this thread: run in a helper thread (context copied)
    result: list[Any] = []
    errors: list[BaseException] = []
    context = contextvars.copy_context()

    def target() -> None:
        try:
            result.append(context.run(asyncio.run, coro))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return result[0]
