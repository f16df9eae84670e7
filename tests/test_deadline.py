"""Deadline mode: results held until a public deadline; an overrun is the fixed failure, then.

No timing claims here (benchmarks/timing.py measures them): a result never leaves
before its deadline (a lower bound the code guarantees), and an overrun leaves
while its work is still blocked (the work waits on an event the test sets only
afterwards), so the late result cannot be what was released.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever as LCRetriever
from llama_index.core.base.base_retriever import BaseRetriever as LIRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPAnswerVote
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.deadline import Deadline
from dprag_core.errors import PRIVATE_FAILURE, PrivateDataError
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import ANSWER
from langchain_dprag import DPRAGChain, LangChainTextModel
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel

SECONDS = 1.0  # ample for the work here, even on a loaded machine
SHORT = 0.05  # for work that is blocked anyway
DOCS = [ScoredDocument(f"d{i}", "Aspirin.", 0.9, unit=f"u{i}") for i in range(4)]


class Reader:
    def generate(self, prompts: Any, *, max_new_tokens: int = 64) -> list[str]:
        return ["Aspirin" for _ in prompts]


def _app(gate: threading.Event | None = None, **kw: Any) -> PrivateRAG:
    def retrieve(question: str, k: int) -> list[ScoredDocument]:
        if gate is not None:
            gate.wait()
        return DOCS[:k]

    mech = DPAnswerVote(Reader(), m=4, k=1, epsilon=40.0, delta=1e-4)
    budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    return PrivateRAG(mech, HonoursK(retrieve), accountant=budget, **kw)


def test_the_result_leaves_at_the_deadline_not_before() -> None:
    began = time.monotonic()
    answer = _app(deadline=SECONDS).answer("Which drug?", rng=0)
    assert time.monotonic() - began >= SECONDS
    assert answer == _app().answer("Which drug?", rng=0)  # the same release as without
    assert answer.details["stop_reason"] == ANSWER


def test_a_failure_inside_is_held_too() -> None:
    def broken(question: str, k: int) -> list[ScoredDocument]:
        raise RuntimeError("a store error quoting Aspirin.")

    mech = DPAnswerVote(Reader(), m=4, k=1, epsilon=40.0, delta=1e-4)
    app = PrivateRAG(
        mech,
        HonoursK(broken),
        accountant=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        deadline=SECONDS,
    )
    began = time.monotonic()
    with pytest.raises(PrivateDataError) as caught:
        app.answer("Which drug?", rng=0, query_id="q-1")
    assert time.monotonic() - began >= SECONDS
    assert str(caught.value) == PRIVATE_FAILURE
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_an_overrun_is_the_fixed_failure_at_the_deadline_and_the_late_answer_is_dropped() -> None:
    gate = threading.Event()
    app = _app(gate, deadline=SHORT)
    with pytest.raises(PrivateDataError, match=re.escape(PRIVATE_FAILURE)):
        app.answer("Which drug?", rng=0, query_id="q-late")
    assert not gate.is_set()  # raised while the work was still blocked
    gate.set()  # the late work now finishes; nothing of it is released
    retried = app.answer("Which drug?", rng=0, query_id="q-late")  # failed before release
    assert retried.details["charge"] == "retry"


def test_a_stream_releases_the_held_answer_once() -> None:
    items = list(_app(deadline=SECONDS).stream("Which drug?", rng=0))
    assert items[0] == "Aspirin" and isinstance(items[-1], DPAnswer) and len(items) == 2


def test_bad_deadlines_are_refused_when_built() -> None:
    for bad in (0, -1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="deadline must be a finite number > 0"):
            _app(deadline=bad)
    assert repr(Deadline(0.5)) == "Deadline(seconds=0.5)"


class Gated(LCRetriever):
    """A LangChain retriever that waits on ``gate`` (when given) before answering."""

    gate: Any = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        if self.gate is not None:
            self.gate.wait()
        return [Document(page_content="Aspirin.", id=f"d{i}") for i in range(k)]


class GatedNodes(LIRetriever):
    def __init__(self, gate: threading.Event | None) -> None:
        super().__init__()
        self.gate = gate

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.gate is not None:
            self.gate.wait()
        return [
            NodeWithScore(node=TextNode(id_=f"n{i}", text="Aspirin."), score=0.9) for i in range(4)
        ]


def _chain(gate: threading.Event | None) -> Any:
    seconds = SECONDS if gate is None else SHORT
    model = LangChainTextModel(FakeListChatModel(responses=["Aspirin"]))
    chain = DPRAGChain(
        retriever=Gated(gate=gate),
        retriever_honours_k=True,
        mechanism=DPAnswerVote(model, m=4, k=1, epsilon=40.0, delta=1e-4),
        accountant=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        deadline=seconds,
    )
    return lambda: chain.invoke("Which drug?").answer


def _engine(gate: threading.Event | None) -> Any:
    seconds = SECONDS if gate is None else SHORT
    llm = LlamaIndexTextModel(MockLLM(max_tokens=1))
    engine = DPQueryEngine.from_retriever(
        GatedNodes(gate),
        mechanism=DPAnswerVote(llm, m=4, k=1, epsilon=40.0, delta=1e-4),
        returns_everything=True,
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        deadline=seconds,
    )
    return lambda: engine.query("Which drug?").response


@pytest.mark.parametrize("build", [_chain, _engine], ids=["langchain", "llamaindex"])
def test_the_chain_and_the_engine_take_a_deadline(build: Any) -> None:
    began = time.monotonic()
    assert isinstance(build(None)(), str)
    assert time.monotonic() - began >= SECONDS
    gate = threading.Event()
    with pytest.raises(PrivateDataError, match=re.escape(PRIVATE_FAILURE)):
        build(gate)()
    assert not gate.is_set()  # the fixed failure left while the work was blocked
    gate.set()
