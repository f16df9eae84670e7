"""The app's own LangChain prompt carried over to dprag mechanisms (templates_from_prompt)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, EchoChatModel, RecordingHandler, budget, dump

from dprag_core.algorithms.baselines import RAG, NonRAG
from dprag_core.algorithms.dpvote import DPSparseVote
from dprag_core.algorithms.ksa import DPKSA
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, LangChainTextModel
from langchain_dprag.prompts import DPTemplates, templates_from_prompt


def test_string_prompt_escapes_braces_and_keeps_fields() -> None:
    prompt = PromptTemplate.from_template('Reply as JSON {{"a": 1}}.\n{context}\nQ: {question}')
    t = templates_from_prompt(prompt)
    assert t.rag.format(context="C", question="Q?") == 'Reply as JSON {"a": 1}.\nC\nQ: Q?'
    assert t.public.format(question="Q?") == 'Reply as JSON {"a": 1}.\n\nQ: Q?'


def test_chat_prompt_partials_and_renamed_variables() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are {persona}."), ("human", "Records:\n{docs}\n\n{input}")]
    ).partial(persona="a careful clinician")
    t = templates_from_prompt(prompt, context="docs", question="input")
    assert t.rag == "You are a careful clinician.\n\nRecords:\n{context}\n\n{question}"
    assert t.public == "You are a careful clinician.\n\nRecords:\n\n\n{question}"


def test_optional_history_placeholder_is_left_empty() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history", optional=True), ("human", "{context} {question}")]
    )
    assert templates_from_prompt(prompt).rag == "{context} {question}"


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
        templates_from_prompt(prompt)


def test_not_a_prompt() -> None:
    with pytest.raises(TypeError, match="PromptTemplate or ChatPromptTemplate"):
        templates_from_prompt("{context} {question}")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes no prompt template"):
        DPTemplates("{context}{question}", "{question}").kwargs(object)


def test_kwargs_fit_each_mechanism(tiny_token_model: Any) -> None:
    t = templates_from_prompt(PromptTemplate.from_template("Docs: {context}\nAsk: {question}"))
    text = LangChainTextModel(EchoChatModel())
    sparse = DPSparseVote(
        tiny_token_model,
        m=2,
        k=1,
        epsilon=1.0,
        delta=1e-4,
        epsilon_token=0.5,
        max_new_tokens=2,
        **t.kwargs(DPSparseVote),
    )
    voters = [[ScoredDocument("a", "doc A", 0.9)], [ScoredDocument("b", "doc B", 0.8)]]
    assert sparse.prompts("Who?", voters) == [
        "Docs: doc A\nAsk: Who?",
        "Docs: doc B\nAsk: Who?",
        "Docs: \nAsk: Who?",
    ]
    assert DPKSA(text, epsilon=1.0, **t.kwargs(DPKSA)).response_template == t.rag
    assert RAG(text, k=2, **t.kwargs(RAG)).template == t.rag
    assert NonRAG(text, **t.kwargs(NonRAG)).template == t.public


async def test_canary_with_the_apps_prompt(store: InMemoryVectorStore) -> None:
    """DP-KSA over an echoing model with the app's chat prompt: the secret stays inside."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Use the records."), ("human", "{context}\n{question}")]
    )
    t = templates_from_prompt(prompt)
    mechanism = DPKSA(LangChainTextModel(EchoChatModel()), epsilon=5.0, n_docs=8, **t.kwargs(DPKSA))
    chain = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget())
    handler = RecordingHandler()
    out = chain.invoke(QUESTION, {"callbacks": [handler]})
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    assert SECRET not in dump(out.model_dump()) + dump(events) + handler.text()
