"""LlamaIndex's ``OpenAILike`` against a real OpenAI-compatible server process.

The client keeps pooled HTTP connections between calls; the wrapper must not
strand them on an event loop that is gone ("Event loop is closed" on a later
query, each failure charged). Twenty consecutive DP-KSA queries and twenty
DPAnswerVote queries on one ``OpenAILike`` all answer, sync and async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from li_helpers import HashEmbedding
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from openai_stub import stub_server

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPKSA, DPAnswerVote
from dprag_core.budget import Budget
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel
from llamaindex_dprag.vector_stores import cosine_faiss_store

OpenAILike = pytest.importorskip("llama_index.llms.openai_like").OpenAILike

QUESTION = "Which city is the capital of Portugal?"
QUERIES = 20


@pytest.fixture(scope="module")
def llm() -> Iterator[object]:
    with stub_server(default="Lisbon.") as url:
        yield OpenAILike(
            model="stub",
            api_base=url,
            api_key="none",
            is_chat_model=True,
            max_retries=0,
            timeout=30,
        )


def engine(mechanism: object) -> DPQueryEngine:
    nodes = [
        TextNode(id_=f"n{i}", text=f"Record {i}: «Lisbon.»", metadata={"who": f"u{i}"})
        for i in range(16)
    ]
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=256))
    index = VectorStoreIndex(nodes=nodes, storage_context=storage, embed_model=HashEmbedding())
    return DPQueryEngine.from_index(
        index,
        mechanism=mechanism,  # type: ignore[arg-type]
        unit_key="who",
        budget=InMemoryCorpusAccountant(Budget(1000.0, 0.5)),
        rng=0,
    )


def mechanisms(llm: object) -> dict[str, object]:
    model = LlamaIndexTextModel(llm, max_concurrency=4, max_tokens_kwarg="max_tokens")  # type: ignore[arg-type]
    return {
        "DPKSA": DPKSA(model, epsilon=10.0, delta=1e-4, n_docs=16),
        "DPAnswerVote": DPAnswerVote(
            model, m=16, k=1, epsilon=10.0, delta=1e-4, voter_errors="raise"
        ),
    }


@pytest.mark.parametrize("name", ["DPKSA", "DPAnswerVote"])
def test_twenty_consecutive_queries_all_answer(llm: object, name: str) -> None:
    query_engine = engine(mechanisms(llm)[name])
    answers = [query_engine.query(QUESTION) for _ in range(QUERIES)]
    assert all("lisbon" in str(a).lower() for a in answers), [str(a) for a in answers]
    assert {a.metadata["answer_source"] for a in answers} == {"documents"}


@pytest.mark.parametrize("name", ["DPKSA", "DPAnswerVote"])
def test_sync_and_async_queries_mix_on_one_llm(llm: object, name: str) -> None:
    query_engine = engine(mechanisms(llm)[name])

    async def twice() -> list[str]:
        return [str(await query_engine.aquery(QUESTION)) for _ in range(2)]

    answers: list[str] = []
    for _ in range(3):  # each asyncio.run is a new loop; sync queries in between
        answers += asyncio.run(twice())
        answers.append(str(query_engine.query(QUESTION)))
    assert all("lisbon" in a.lower() for a in answers), answers
