"""The app's own LangChain prompt carried over to dprag mechanisms: context_template and
DPRAGChain(prompt=...), with errors naming the variables needed, and a canary."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, EchoChatModel, RecordingHandler, budget, dump

from dprag_core.algorithms.dpvote import DPSparseVote
from dprag_core.algorithms.ksa import DPKSA
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, LangChainTextModel
from langchain_dprag.prompts import context_template


def test_string_prompt_escapes_braces_and_keeps_fields() -> None:
    prompt = PromptTemplate.from_template('Reply as JSON {{"a": 1}}.\n{context}\nQ: {question}')
    template = context_template(prompt)
    assert template.format(context="C", question="Q?") == 'Reply as JSON {"a": 1}.\nC\nQ: Q?'


def test_chat_prompt_partials_and_renamed_variables() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are {persona}."), ("human", "Records:\n{docs}\n\n{input}")]
    ).partial(persona="a careful clinician")
    template = context_template(prompt, context="docs", question="input")
    assert template == "You are a careful clinician.\n\nRecords:\n{context}\n\n{question}"


def test_optional_history_placeholder_is_left_empty() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history", optional=True), ("human", "{context} {question}")]
    )
    assert context_template(prompt) == "{context} {question}"


@pytest.mark.parametrize(
    "prompt",
    [
        PromptTemplate.from_template("{context} {question} {language}"),
        PromptTemplate.from_template("{question} only"),
        ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")]),
    ],
)
def test_wrong_variables_are_named(prompt: Any) -> None:
    with pytest.raises(ValueError, match="must take the variables 'context' and 'question'"):
        context_template(prompt)


def test_not_a_prompt() -> None:
    with pytest.raises(TypeError, match="PromptTemplate or ChatPromptTemplate"):
        context_template("{context} {question}")  # type: ignore[arg-type]


def test_chain_prompt_reaches_each_voter(store: InMemoryVectorStore, tiny_token_model: Any) -> None:
    prompt = PromptTemplate.from_template("Docs: {context}\nAsk: {input}")
    sparse = DPSparseVote(
        tiny_token_model, m=2, k=1, epsilon=1.0, delta=1e-4, epsilon_token=0.5, max_new_tokens=2
    )
    chain = DPRAGChain(
        vectorstore=store, mechanism=sparse, accountant=budget(), prompt=prompt, input_key="input"
    )
    voters = [[ScoredDocument("a", "doc A", 0.9)], [ScoredDocument("b", "doc B", 0.8)]]
    prompts = chain.mechanism.prompts("Who?", voters)  # type: ignore[attr-defined]
    assert prompts[:2] == ["Docs: doc A\nAsk: Who?", "Docs: doc B\nAsk: Who?"]
    assert prompts[2] == sparse.public_template.format(question="Who?")  # public: unchanged
    assert sparse.template != chain.mechanism.template  # type: ignore[attr-defined]
    assert chain.invoke({"input": QUESTION}).epsilon is not None
    with pytest.raises(ValueError, match="'context' and 'question'"):
        DPRAGChain(vectorstore=store, mechanism=sparse, accountant=budget(), prompt=prompt)


async def test_canary_with_the_apps_prompt(store: InMemoryVectorStore) -> None:
    """DP-KSA over an echoing model with the app's chat prompt: the secret stays inside."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Use the records."), ("human", "{context}\n{question}")]
    )
    mechanism = DPKSA(LangChainTextModel(EchoChatModel()), epsilon=5.0, n_docs=8)
    chain = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget(), prompt=prompt)
    assert chain.mechanism.response_template.startswith("Use the records.")  # type: ignore[attr-defined]
    handler = RecordingHandler()
    out = chain.invoke(QUESTION, {"callbacks": [handler]})
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    assert SECRET not in dump(out.model_dump()) + dump(events) + handler.text()
