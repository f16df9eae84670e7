"""The released answer as a chat-model run: what chat UIs and token callbacks listen to.

A chat UI built on LangChain reads tokens from ``on_llm_new_token`` callbacks
(``astream_events``: ``on_chat_model_stream``; LangGraph's "messages" stream
mode), not from a chain's output stream. :class:`AnswerRun` opens one chat-model
run nested under the chain run and reports, as that run's tokens, exactly what
the mechanism *released*: the DP answer, chunk by chunk. Its input is the
question alone (public: the caller's own input) and its output the released
answer; the voter prompts and the voter outputs never pass through it (they run
below LangChain's callback machinery, :mod:`langchain_dprag.models`).

No token usage is reported (``usage_metadata`` and ``llm_output`` stay empty):
the voters' prompt lengths depend on the private documents, and a partial count
would under-report the cost.

>>> from langchain_core.callbacks import CallbackManager
>>> run = AnswerRun.start(CallbackManager([]), "Who?", name="DPSparseVote")
>>> run.token("aspirin")
>>> run.end({"epsilon": 1.0})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import CallbackManager, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult

__all__ = ["AnswerRun"]


class AnswerRun:
    """One chat-model run whose tokens are the released answer chunks (module docstring)."""

    def __init__(self, run: CallbackManagerForLLMRun | None) -> None:
        self._run = run
        self._text: list[str] = []

    @classmethod
    def start(cls, callbacks: CallbackManager, question: str, *, name: str) -> AnswerRun:
        """Open the run under ``callbacks`` with the question as its only input message."""
        runs = callbacks.on_chat_model_start(
            {"name": name, "id": ["langchain_dprag", name]},
            [[HumanMessage(content=question)]],
            name=name,
            invocation_params={"_type": "dprag", "mechanism": name},
        )
        return cls(runs[0] if runs else None)

    def token(self, text: str) -> None:
        """Report one released chunk."""
        self._text.append(text)
        if self._run is not None:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            self._run.on_llm_new_token(text, chunk=chunk)

    def end(self, public: Mapping[str, Any], *, text: str | None = None) -> None:
        """Close the run with the released answer and its public end payload."""
        if self._run is None:
            return
        answer = "".join(self._text) if text is None else text
        message = AIMessage(content=answer, response_metadata={"dprag": dict(public)})
        run, self._run = self._run, None  # closed once
        run.on_llm_end(LLMResult(generations=[[ChatGeneration(message=message)]]))

    def error(self, err: BaseException) -> None:
        """Close the run with ``err`` (a data-free error: see :mod:`dprag_core.errors`)."""
        if self._run is not None:
            run, self._run = self._run, None  # closed once
            run.on_llm_error(err)
