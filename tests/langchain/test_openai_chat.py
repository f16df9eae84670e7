"""langchain-openai's ``ChatOpenAI`` against a real OpenAI-compatible server process.

Twenty consecutive DP-KSA and DPAnswerVote queries through ``DPRAGChain`` over one
``ChatOpenAI`` (``LangChainTextModel``) all answer, sync and async; a completion
the server stopped at its token limit comes back marked as cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from openai_stub import stub_server

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPKSA, DPAnswerVote
from dprag_core.budget import Budget
from dprag_core.models.cut import was_cut
from langchain_dprag import DPRAGChain, LangChainTextModel

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI

QUESTION = "Which city is the capital of Portugal?"


class Ranking(BaseRetriever):
    """The first k of a fixed ranking of 16 records."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        return [
            Document(page_content=f"Record {i}: «Lisbon.»", id=f"r{i}", metadata={"who": f"u{i}"})
            for i in range(16)
        ][:k]


@pytest.fixture(scope="module")
def chat() -> Iterator[Any]:
    with stub_server(default="Lisbon.") as url:
        yield ChatOpenAI(model="stub", base_url=url, api_key="none", max_retries=0, timeout=30)


def chain(mechanism: Any) -> DPRAGChain:
    return DPRAGChain(
        retriever=Ranking(),
        retriever_honours_k=True,
        mechanism=mechanism,
        unit_key="who",
        accountant=InMemoryCorpusAccountant(Budget(1000.0, 0.5)),
        rng=0,
    )


def mechanism(name: str, chat: Any) -> Any:
    model = LangChainTextModel(chat, max_concurrency=4, max_tokens_param="max_tokens")
    if name == "DPKSA":
        return DPKSA(model, epsilon=10.0, delta=1e-4, n_docs=16)
    return DPAnswerVote(model, m=16, k=1, epsilon=10.0, delta=1e-4, voter_errors="raise")


@pytest.mark.parametrize("name", ["DPKSA", "DPAnswerVote"])
def test_twenty_consecutive_queries_all_answer(chat: Any, name: str) -> None:
    dp = chain(mechanism(name, chat))
    outputs = [dp.invoke(QUESTION) for _ in range(20)]
    assert all("lisbon" in o.answer.lower() for o in outputs), [o.answer for o in outputs]
    assert {o.answer_source for o in outputs} == {"documents"}

    async def twice() -> list[str]:
        return [(await dp.ainvoke(QUESTION)).answer for _ in range(2)]

    assert all("lisbon" in a.lower() for _ in range(2) for a in asyncio.run(twice()))


def test_a_completion_stopped_at_the_token_limit_is_marked_cut(chat: Any) -> None:
    model = LangChainTextModel(chat, max_tokens_param="max_tokens")
    short, whole = model.generate(["«Combination Quinine»", "«Lisbon.»"], max_new_tokens=7)
    assert (short, was_cut(short)) == ("Combination Qu", True)
    assert (whole, was_cut(whole)) == ("Lisbon.", False)
    [cut] = asyncio.run(model.agenerate(["«Combination Quinine»"], max_new_tokens=7))
    assert was_cut(cut)
