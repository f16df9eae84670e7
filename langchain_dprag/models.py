"""Any LangChain chat model or LLM as a dprag ``TextModel`` (for DP-KSA and friends).

Text-level mechanisms only need completions, so any ``BaseChatModel`` or
``BaseLLM`` works. Prompts given to a ``TextModel`` contain private
documents, so every call goes to the model with nothing attached, by any
route: it runs on a private copy of the model (``callbacks``, ``cache``,
``verbose``, ``tags`` and ``metadata`` removed) through the model's own
generation method (``_generate_with_cache`` for chat models, ``_generate`` for
LLMs), *below* LangChain's callback machinery. So no ``CallbackManager`` is
ever built for these calls: callbacks passed to the model's constructor or set
later, handlers of ``register_configure_hook`` (switched on by config or by
their environment variable), ``set_debug`` / ``set_verbose`` printers,
LangSmith tracing and instrumentors that patch the callback manager
(OpenInference, MLflow autolog) are never reached, and neither is the global
LLM cache (``set_llm_cache``), which would store the prompts. The provider
clients' loggers are muted for the duration (:mod:`dprag_core.quiet_logs`).
The model's ``rate_limiter`` still applies. What is lost: these calls do not
appear in traces or token-usage callbacks.

Token-level mechanisms (DPSparseVote, DPVote, DP-ICL) need next-token
log-probabilities, which LangChain's model wrappers do not expose: give them a
``dprag_core.models.hf.HFTokenModel`` directly.

>>> from langchain_core.language_models import FakeListChatModel
>>> LangChainTextModel(FakeListChatModel(responses=["aspirin"])).generate(["Which drug?"])
['aspirin']
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, BaseLanguageModel, BaseLLM
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables.config import ContextThreadPoolExecutor

from dprag_core._validation import positive_int
from dprag_core.quiet_logs import muted_logs
from langchain_dprag._compat import message_text

__all__ = ["LangChainTextModel", "private_copy"]


_BARE = {"callbacks": None, "cache": False, "verbose": False, "tags": None, "metadata": None}


def private_copy(model: BaseLanguageModel[Any]) -> BaseLanguageModel[Any]:
    """A shallow copy of ``model`` with its callbacks, cache and verbosity removed.

    >>> from langchain_core.language_models import FakeListLLM
    >>> from langchain_core.callbacks import StdOutCallbackHandler
    >>> bare = private_copy(FakeListLLM(responses=["a"], callbacks=[StdOutCallbackHandler()]))
    >>> bare.callbacks, bare.cache, bare.verbose
    (None, False, False)
    """
    if not isinstance(model, (BaseChatModel, BaseLLM)):
        raise TypeError(f"model must be a LangChain chat model or LLM, got {type(model).__name__}")
    return model.model_copy(update=_BARE)


def _complete(model: BaseLanguageModel[Any], prompt: str, kwargs: dict[str, Any]) -> str:
    if isinstance(model, BaseChatModel):
        chat = model._generate_with_cache([HumanMessage(content=prompt)], stop=None, **kwargs)
        return message_text(chat.generations[0].message)
    assert isinstance(model, BaseLLM)
    return model._generate([prompt], stop=None, **kwargs).generations[0][0].text


async def _acomplete(model: BaseLanguageModel[Any], prompt: str, kwargs: dict[str, Any]) -> str:
    if isinstance(model, BaseChatModel):
        messages: list[BaseMessage] = [HumanMessage(content=prompt)]
        chat = await model._agenerate_with_cache(messages, stop=None, **kwargs)
        return message_text(chat.generations[0].message)
    assert isinstance(model, BaseLLM)
    return (await model._agenerate([prompt], stop=None, **kwargs)).generations[0][0].text


class LangChainTextModel:
    """Adapts a LangChain ``BaseChatModel`` / ``BaseLLM`` to dprag's ``TextModel``.

    Each call runs on :func:`private_copy` of the model, below the callback
    machinery (see the module docstring).

    ``max_concurrency`` caps the parallel requests of one ``generate`` call;
    ``max_tokens_param`` names the model's keyword for the completion length
    (``"max_tokens"`` for most chat APIs); when ``None`` the model's own setting
    applies and ``max_new_tokens`` is ignored.

    >>> from langchain_core.language_models import FakeListLLM
    >>> LangChainTextModel(FakeListLLM(responses=["a", "b"])).generate(["x", "y"])
    ['a', 'b']
    """

    def __init__(
        self,
        model: BaseLanguageModel[Any],
        *,
        max_concurrency: int | None = None,
        max_tokens_param: str | None = None,
    ) -> None:
        private_copy(model)  # checks the type
        self.model = model
        self.max_concurrency = (
            None if max_concurrency is None else positive_int("max_concurrency", max_concurrency)
        )
        self.max_tokens_param = max_tokens_param

    def _kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        positive_int("max_new_tokens", max_new_tokens)
        return {} if self.max_tokens_param is None else {self.max_tokens_param: max_new_tokens}

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per user-message prompt (``max_concurrency`` threads at a time)."""
        kwargs = self._kwargs(max_new_tokens)
        model, prompts = private_copy(self.model), list(prompts)
        with muted_logs(), ContextThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(lambda p: _complete(model, p, kwargs), prompts))

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """Like :meth:`generate`, with asyncio concurrency (``max_concurrency`` at a time)."""
        kwargs = self._kwargs(max_new_tokens)
        model = private_copy(self.model)
        limit = asyncio.Semaphore(self.max_concurrency or len(prompts) or 1)

        async def one(prompt: str) -> str:
            async with limit:
                return await _acomplete(model, prompt, kwargs)

        with muted_logs():  # the tasks copy this context
            return list(await asyncio.gather(*(one(p) for p in prompts)))

    def __repr__(self) -> str:
        return f"LangChainTextModel({type(self.model).__name__})"
