"""Token-usage callbacks never receive the voters' token counts (they reveal document
lengths): UsageMetadataCallbackHandler and get_openai_callback see nothing from a DP
query; the positive control shows both counting the same model's ordinary calls."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, EchoChatModel, budget

from dprag_core.algorithms.ksa import DPKSA
from langchain_dprag import DPRAGChain, LangChainTextModel


class Metered(EchoChatModel):
    """Echoes, reporting the prompt's length in words as its input tokens."""

    def reply(self, text: str) -> AIMessage:
        usage = {"input_tokens": len(text.split()), "output_tokens": 1}
        usage["total_tokens"] = usage["input_tokens"] + 1
        return AIMessage(
            content=text, usage_metadata=usage, response_metadata={"model_name": "gpt-4o-mini"}
        )


def _chain(store: InMemoryVectorStore) -> DPRAGChain:
    mechanism = DPKSA(LangChainTextModel(Metered()), epsilon=5.0, n_docs=8)
    return DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget())


def test_usage_metadata_handler_sees_no_voter_tokens(store: InMemoryVectorStore) -> None:
    handler = UsageMetadataCallbackHandler()
    _chain(store).invoke(QUESTION, {"callbacks": [handler]})
    list(_chain(store).stream(QUESTION, {"callbacks": [handler]}))
    assert handler.usage_metadata == {}
    Metered().invoke("one two three", {"callbacks": [handler]})  # positive control
    assert sum(u["input_tokens"] for u in handler.usage_metadata.values()) == 3


def test_openai_callback_sees_no_voter_tokens(store: InMemoryVectorStore) -> None:
    callbacks = pytest.importorskip("langchain_community.callbacks")
    with callbacks.get_openai_callback() as cb:
        _chain(store).invoke(QUESTION)
    assert cb.total_tokens == 0 and cb.successful_requests == 0
    with callbacks.get_openai_callback() as cb:  # positive control
        Metered().invoke("one two three")
    assert cb.prompt_tokens == 3
