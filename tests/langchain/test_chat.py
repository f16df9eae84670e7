"""The condensed-question chat path with RunnableWithMessageHistory: the whole history
is public input to the app's public model, which never sees a document (canary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models import FakeListChatModel
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, EchoChatModel, RecordingHandler, budget, dump
from toy_mechanisms import RELEASED, ToyMechanism

from dprag_core.answers import DPAnswer
from dprag_core.mechanisms.rng import RngLike
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain
from langchain_dprag.chat import condensed_chat

pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")


class Repeat(ToyMechanism):
    """Answers with the question it was given (public), after reading every candidate."""

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        question = as_query(query, rng=rng).question
        return DPAnswer(f"Q: {question}", self.query_cost(), self.name, RELEASED)


def _app(store: InMemoryVectorStore, llm: Any, **kw: Any) -> tuple[Any, InMemoryChatMessageHistory]:
    history = InMemoryChatMessageHistory()
    chain = DPRAGChain(
        vectorstore=store, mechanism=Repeat(k=11), accountant=budget(), output="text", **kw
    )
    app = RunnableWithMessageHistory(
        condensed_chat(chain, llm),
        lambda session_id: history,
        input_messages_key=chain.input_key,
        history_messages_key="chat_history",
    )
    return app, history


def test_follow_up_is_condensed_with_the_whole_history(store: InMemoryVectorStore) -> None:
    llm = FakeListChatModel(responses=["Which drug does Alice Martin take?"])
    app, history = _app(store, llm)
    config = {"configurable": {"session_id": "s"}}
    assert app.invoke({"question": "Who has a migraine?"}, config) == "Q: Who has a migraine?"
    follow_up = app.invoke({"question": "What does she take?"}, config)
    assert follow_up == "Q: Which drug does Alice Martin take?"
    assert [m.content for m in history.messages] == [
        "Who has a migraine?",
        "Q: Who has a migraine?",
        "What does she take?",
        "Q: Which drug does Alice Martin take?",
    ]


def test_input_key_and_streaming(store: InMemoryVectorStore) -> None:
    app, _ = _app(store, FakeListChatModel(responses=["standalone"]), input_key="input")
    config = {"configurable": {"session_id": "s"}}
    assert "".join(app.stream({"input": "first"}, config)) == "Q: first"
    assert "".join(app.stream({"input": "second"}, config)) == "Q: standalone"


def test_only_a_dp_chain() -> None:
    with pytest.raises(TypeError, match="DPRAGChain"):
        condensed_chat(FakeListChatModel(responses=[]), FakeListChatModel(responses=[]))  # type: ignore[arg-type]


async def test_canary_the_public_model_never_sees_a_document(store: InMemoryVectorStore) -> None:
    """The condensing model echoes its prompt (history + follow-up): never the secret."""
    app, history = _app(store, EchoChatModel(), max_question_tokens=4096)
    handler = RecordingHandler()
    config: Any = {"configurable": {"session_id": "s"}, "callbacks": [handler]}
    app.invoke({"question": QUESTION}, config)
    app.invoke({"question": "And her doctor?"}, config)
    events = [e async for e in app.astream_events({"question": "Why?"}, config, version="v2")]
    seen = dump(events) + handler.text() + dump([m.content for m in history.messages])
    assert "And her doctor?" in seen and SECRET not in seen
