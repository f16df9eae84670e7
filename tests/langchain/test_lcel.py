"""DPRAGChain in LCEL: output forms, input keys, streaming through downstream steps,
chat-UI stream events, and the one-line switch from LangChain's tutorial shapes."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, budget
from toy_mechanisms import ToyMechanism

from langchain_dprag import DPRAGChain, DPRAGOutput

PRIVACY = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "Toy", "details": {"stop_reason": "eos"}}


def end_payload_of(fields: dict[str, Any]) -> dict[str, Any]:
    """The public end payload of an answer with these privacy fields (no per-query counts)."""
    keep = {k: fields[k] for k in ("epsilon", "delta", "mechanism")}
    return {
        **keep,
        "stop_reason": fields["details"]["stop_reason"],
        "private_tokens": None,
        "keywords_released": None,
        "public_fallback": False,
    }


def _chain(store: InMemoryVectorStore, **kw: Any) -> DPRAGChain:
    return DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget(), **kw)


def test_text_form_composes_with_string_steps(store: InMemoryVectorStore) -> None:
    app = _chain(store, output="text") | StrOutputParser()
    assert app.invoke(QUESTION) == "3 candidates"
    assert [c for c in app.stream(QUESTION) if c] == ["3", " candidates"]  # tokens survive
    assert app.batch([QUESTION, QUESTION]) == ["3 candidates"] * 2


async def test_text_form_async_stream(store: InMemoryVectorStore) -> None:
    app = _chain(store, output="text") | StrOutputParser()
    assert [c async for c in app.astream(QUESTION) if c] == ["3", " candidates"]
    assert await app.ainvoke(QUESTION) == "3 candidates"


def test_dict_form_echoes_the_input_and_adds_the_privacy_fields(
    store: InMemoryVectorStore,
) -> None:
    chain = _chain(store, output="dict", input_key="input")
    out = chain.invoke({"input": QUESTION, "chat_history": []})
    fields = {**PRIVACY, "answer_source": None}  # the toy mechanism states no source
    assert out == {"input": QUESTION, "chat_history": [], "answer": "3 candidates", **fields}
    total: Any = None
    for chunk in chain.stream({"input": QUESTION}):
        total = chunk if total is None else total + chunk
    assert total == {"input": QUESTION, "answer": "3 candidates", **fields}


def test_pick_streams_tokens_in_every_form(store: InMemoryVectorStore) -> None:
    for form in ("object", "text", "dict"):
        picked = _chain(store, output=form).pick("answer")
        assert picked.invoke(QUESTION) == "3 candidates"
        assert [c for c in picked.stream(QUESTION) if c] == ["3", " candidates"]
    both = _chain(store).pick(["answer", "epsilon"])
    assert both.invoke(QUESTION) == {"answer": "3 candidates", "epsilon": 1.0}


def test_output_key_and_types(store: InMemoryVectorStore) -> None:
    chain = _chain(store, output="dict", output_key="result", input_key="query")
    assert chain.invoke({"query": QUESTION})["result"] == "3 candidates"
    assert _chain(store, output="text").OutputType is str
    assert _chain(store).OutputType is DPRAGOutput
    for reserved in ("details", "epsilon"):  # the answer would overwrite a privacy field
        with pytest.raises(ValueError, match="output_key must not be one of the privacy fields"):
            _chain(store, output="dict", output_key=reserved)


@pytest.mark.parametrize("key", ["input", "query"])
def test_input_key_like_langchain_chains(store: InMemoryVectorStore, key: str) -> None:
    chain = _chain(store, input_key=key)
    assert chain.invoke({key: QUESTION}).answer == "3 candidates"
    with pytest.raises(ValueError, match=f"mapping with the key '{key}'"):
        chain.invoke({"question": QUESTION})


def test_bad_forms_are_refused(store: InMemoryVectorStore) -> None:
    with pytest.raises(ValueError, match="output"):
        _chain(store, output="xml")
    with pytest.raises(ValueError, match="input_key must be a non-empty string"):
        _chain(store, input_key="")


async def test_stream_events_show_released_tokens_as_chat_model_stream(
    store: InMemoryVectorStore,
) -> None:
    app = _chain(store, output="text") | StrOutputParser()
    events = [e async for e in app.astream_events(QUESTION, version="v2")]
    tokens = [e["data"]["chunk"].content for e in events if e["event"] == "on_chat_model_stream"]
    assert tokens == ["3", " candidates"]
    start = next(e for e in events if e["event"] == "on_chat_model_start")
    assert start["name"] == "Toy"
    assert [[m.content for m in ms] for ms in start["data"]["input"]["messages"]] == [[QUESTION]]
    end = next(e for e in events if e["event"] == "on_chat_model_end")
    assert end["data"]["output"].content == "3 candidates"
    public = end["data"]["output"].response_metadata["dprag"]
    assert public == end_payload_of(PRIVACY)
    assert end["data"]["output"].usage_metadata is None  # no voter token counts


def test_invoke_reports_the_answer_run_too(store: InMemoryVectorStore) -> None:
    from lc_support import RecordingHandler

    handler = RecordingHandler()
    _chain(store).invoke(QUESTION, {"callbacks": [handler]})
    kinds = [r.split(" ", 1)[0] for r in handler.records]
    assert kinds.count("on_chat_model_start") == 1 and kinds.count("on_llm_end") == 1


# -- the one-line switch from LangChain's tutorial shapes ---------------------------------


def _format(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def test_tutorial_shape_retriever_prompt_llm_parser(store: InMemoryVectorStore) -> None:
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    llm = FakeListChatModel(responses=["aspirin"])
    before = (
        {"context": store.as_retriever() | _format, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )
    after = _chain(store, output="text") | StrOutputParser()  # the switch
    for app in (before, after):
        assert isinstance(app.invoke(QUESTION), str)
        assert all(isinstance(c, str) for c in app.stream(QUESTION))


def _create_retrieval_chain() -> Any:
    for module in ("langchain_classic.chains", "langchain.chains"):
        try:
            return importlib.import_module(module).create_retrieval_chain
        except ImportError:
            continue
    pytest.skip("neither langchain-classic nor langchain is installed")


def test_tutorial_shape_create_retrieval_chain(store: InMemoryVectorStore) -> None:
    create_retrieval_chain = _create_retrieval_chain()
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {input}")
    combine = prompt | FakeListChatModel(responses=["aspirin"]) | StrOutputParser()
    before = create_retrieval_chain(store.as_retriever(), combine)
    after = _chain(store, input_key="input", output="dict")  # the switch
    got_before = before.invoke({"input": QUESTION})
    got_after = after.invoke({"input": QUESTION})
    assert set(got_before) - set(got_after) == {"context"}  # the documents stay private
    assert got_after["input"] == QUESTION and isinstance(got_after["answer"], str)
    assert [c["answer"] for c in after.stream({"input": QUESTION}) if c.get("answer")] == [
        "3",
        " candidates",
    ]
