"""Errors on the documented paths name the fix (issue 27 item 5).

``as_chat_engine(chat_mode=...)`` used to fail with a bare ``TypeError``; it now
says which chat modes are private and why. ``from_retriever`` used to drop the
retriever's ``similarity_top_k`` silently; a count the user chose that the
mechanism overrides is now stated.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from llama_index.core.chat_engine.types import ChatMode
from llama_index.core.llms import MockLLM
from toy_mechanisms import AboveToy, ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from llamaindex_dprag import DPQueryEngine
from llamaindex_dprag.query_engine import PRIVATE_CHAT_MODES


def _budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(100.0, 0.5))


@pytest.mark.parametrize("mode", [m for m in ChatMode if m not in PRIVATE_CHAT_MODES])
def test_every_other_chat_mode_is_refused_saying_why(index: Any, mode: ChatMode) -> None:
    engine = DPQueryEngine.from_index(index, mechanism=ToyMechanism(), budget=_budget())
    with pytest.raises(ValueError, match=f"chat_mode={mode.value!r} is not available") as info:
        engine.as_chat_engine(chat_mode=mode, llm=MockLLM())
    assert "'condense_question'" in str(info.value)
    with pytest.raises(ValueError, match="chat_mode must be one of"):
        engine.as_chat_engine(chat_mode="telepathy", llm=MockLLM())
    chat = engine.as_chat_engine(chat_mode="condense_question", llm=MockLLM(max_tokens=2))
    assert str(chat.chat("Who?")) == "4 candidates"


def test_from_retriever_states_the_similarity_top_k_it_overrides(index: Any) -> None:
    with pytest.warns(UserWarning, match=r"similarity_top_k=7 is overridden: Toy retrieves"):
        DPQueryEngine.from_retriever(
            index.as_retriever(similarity_top_k=7), mechanism=ToyMechanism(k=4), budget=_budget()
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # LlamaIndex's default, the mechanism's own: nothing
        for k in (2, 4):
            DPQueryEngine.from_retriever(
                index.as_retriever(similarity_top_k=k), mechanism=ToyMechanism(), budget=_budget()
            )
        above = DPQueryEngine.from_retriever(
            index.as_retriever(similarity_top_k=7), mechanism=AboveToy(), budget=_budget()
        )
    assert above.similarity_top_k == 7  # a threshold mechanism: the least k of each query
