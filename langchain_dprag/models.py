"""Any LangChain chat model or LLM as a dprag ``TextModel`` (for DP-KSA and friends).

Text-level mechanisms only need completions, so any ``BaseChatModel`` or
``BaseLLM`` works, through its own ``batch`` (thread pool, ``max_concurrency``)
or ``abatch``. Prompts given to a ``TextModel`` contain private documents, so
the calls run *sealed*: without the callbacks of the surrounding run, with
LangChain/LangSmith tracing switched off (see :mod:`langchain_dprag._sealed`).

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

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage

from dprag_core._validation import positive_int
from langchain_dprag._sealed import run_sealed, sealed_config

__all__ = ["LangChainTextModel"]


def _text(output: Any) -> str:
    if isinstance(output, BaseMessage):
        return str(output.text)
    return str(output)


class LangChainTextModel:
    """Adapts a LangChain ``BaseChatModel`` / ``BaseLLM`` to dprag's ``TextModel``.

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
        if not isinstance(model, BaseLanguageModel):
            raise TypeError(
                f"model must be a LangChain chat model or LLM, got {type(model).__name__}"
            )
        self.model = model
        self.max_concurrency = (
            None if max_concurrency is None else positive_int("max_concurrency", max_concurrency)
        )
        self.max_tokens_param = max_tokens_param

    def _kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        positive_int("max_new_tokens", max_new_tokens)
        return {} if self.max_tokens_param is None else {self.max_tokens_param: max_new_tokens}

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per user-message prompt, via the model's ``batch``."""
        kwargs = self._kwargs(max_new_tokens)
        config = sealed_config(max_concurrency=self.max_concurrency)
        outputs = run_sealed(self.model.batch, list(prompts), config, **kwargs)
        return [_text(o) for o in outputs]

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """Like :meth:`generate`, via the model's ``abatch`` (asyncio concurrency)."""
        kwargs = self._kwargs(max_new_tokens)
        config = sealed_config(max_concurrency=self.max_concurrency)
        coroutine = self.model.abatch(list(prompts), config, **kwargs)
        # a task copies the context it is created in: create it inside the sealed one
        outputs = await run_sealed(asyncio.ensure_future, coroutine)
        return [_text(o) for o in outputs]

    def __repr__(self) -> str:
        return f"LangChainTextModel({type(self.model).__name__})"
