"""Errors on the documented paths name the fix (issue 27 item 5).

``DPRAGChain(...) | StrOutputParser()`` with the default output form used to fail
inside the parser with a bare pydantic error; it now composes the text form (the
parser reads text), and a dict-form chain is refused when composed, naming
``output='text'``. ``condensed_chat`` over a default-form chain, wrapped in
``RunnableWithMessageHistory``, used to drop every turn from the history (the error
only in a callback log); it now answers in the text form.
"""

from __future__ import annotations

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, budget
from toy_mechanisms import ToyMechanism

from langchain_dprag import DPRAGChain, condensed_chat


def _chain(store: InMemoryVectorStore, **kw: object) -> DPRAGChain:
    return DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget(), **kw)


async def test_the_default_form_composes_with_a_string_parser(store: InMemoryVectorStore) -> None:
    app = _chain(store) | StrOutputParser()
    assert app.invoke(QUESTION) == "3 candidates"
    assert [c for c in app.stream(QUESTION) if c] == ["3", " candidates"]
    assert [c async for c in app.astream(QUESTION) if c] == ["3", " candidates"]
    parsed = _chain(store) | (StrOutputParser() | RunnableLambda(str.upper))
    assert parsed.invoke(QUESTION) == "3 CANDIDATES"


def test_the_dict_form_is_refused_when_composed_naming_the_fix(
    store: InMemoryVectorStore,
) -> None:
    for parser in (StrOutputParser(), JsonOutputParser()):
        with pytest.raises(TypeError, match="output='text'"):
            _chain(store, output="dict") | parser
    assert (_chain(store, output="dict").pick("answer") | StrOutputParser()).invoke(
        QUESTION
    ) == "3 candidates"


def test_a_chat_over_the_default_form_keeps_its_history(store: InMemoryVectorStore) -> None:
    history = InMemoryChatMessageHistory()
    chat = RunnableWithMessageHistory(
        condensed_chat(_chain(store), FakeListChatModel(responses=["Who?"])),
        lambda session_id: history,
        input_messages_key="question",
        history_messages_key="chat_history",
    )
    config: dict[str, object] = {"configurable": {"session_id": "s1"}}
    assert chat.invoke({"question": QUESTION}, config) == "3 candidates"  # type: ignore[arg-type]
    assert [m.content for m in history.messages] == [QUESTION, "3 candidates"]
