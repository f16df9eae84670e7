"""A prompt the model refuses is a public abstain, on one fixed request schedule.

A hosted API refuses prompts by what they hold (an HTTP 400 ``content_filter``, a
tokenizer rejecting ``<|endoftext|>``). D + x, x a record holding the marker such
an endpoint refuses, must answer like D: no failure, the same number of model
calls and of prompts sent, the same kind of outcome. Checked for DP-KSA (which
sent all prompts in one call and failed on D + x) and DPAnswerVote (which re-sent
every prompt alone after a failed batch: 1 call became 9), through the core's
``PrivateRAG`` over a text model of the app's own (a whole call refused), a
LangChain chat model in ``DPRAGChain`` and a LlamaIndex LLM in ``DPQueryEngine``
(one request per prompt, each refused alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever as LCRetriever
from llama_index.core.base.base_retriever import BaseRetriever as LIRetriever
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPKSA, DPAnswerVote
from dprag_core.budget import Budget
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, LangChainTextModel
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel

MARKER = "<|endoftext|>"
QUESTION = "Which drug treats Snurfosis?"
RECORD = "Snurfosis is treated with Gleeblorazine."
ROWS_D = [(f"r{i}", f"u{i}", RECORD) for i in range(6)]
ROWS_X = [("x", "ux", f"{MARKER} Snurfosis: Gleeblorazine."), *ROWS_D]  # x ranks first


def _answer(prompt: str) -> str:
    return "Gleeblorazine" if "Gleeblorazine" in prompt else "I do not know"


class Log:
    """What the endpoint saw: one entry per call, the number of prompts it carried."""

    def __init__(self) -> None:
        self.calls: list[int] = []


class OwnTextModel:
    """An app's own TextModel over a hosted API that refuses a whole call with the marker."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.log.calls.append(len(prompts))
        if any(MARKER in p for p in prompts):
            raise ValueError("HTTP 400 content_filter")
        return [_answer(p) for p in prompts]


class RefusingChat(BaseChatModel):
    """A hosted chat API: one request per prompt, refused when it holds the marker."""

    log: Any

    @property
    def _llm_type(self) -> str:
        return "refusing"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = str(messages[-1].content)
        self.log.calls.append(1)
        if MARKER in text:
            raise ValueError("HTTP 400 content_filter")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=_answer(text)))])


class RefusingLLM(CustomLLM):
    """A LlamaIndex LLM over a hosted API refusing the marker."""

    log: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="refusing")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.log.calls.append(1)
        if MARKER in prompt:
            raise ValueError("HTTP 400 content_filter")
        return CompletionResponse(text=_answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class LCRank(LCRetriever):
    rows: list[Any]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        return [Document(page_content=t, id=i, metadata={"who": u}) for i, u, t in self.rows[:k]]


class LIRank(LIRetriever):
    def __init__(self, rows: list[Any]) -> None:
        super().__init__()
        self.rows = rows

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(id_=i, text=t, metadata={"who": u}), score=0.9 - n / 100)
            for n, (i, u, t) in enumerate(self.rows)
        ]


def _mechanism(kind: str, model: Any) -> Any:
    if kind == "DPKSA":
        return DPKSA(model, epsilon=8.0, delta=1e-4, n_docs=8, k_max=4)
    return DPAnswerVote(model, m=4, k=2, epsilon=8.0, delta=1e-4)


def _budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(1000.0, 0.5))


def _core(kind: str, rows: list[Any], log: Log) -> Callable[[], object]:
    docs = [ScoredDocument(i, t, 0.9 - n / 100, unit=u) for n, (i, u, t) in enumerate(rows)]
    app = PrivateRAG(
        _mechanism(kind, OwnTextModel(log)),
        HonoursK(lambda q, k: docs[:k]),
        accountant=_budget(),
    )
    return lambda: app.answer(QUESTION, rng=0)


def _chain(kind: str, rows: list[Any], log: Log) -> Callable[[], object]:
    chain = DPRAGChain(
        retriever=LCRank(rows=rows),
        retriever_honours_k=True,
        mechanism=_mechanism(kind, LangChainTextModel(RefusingChat(log=log))),
        unit_key="who",
        accountant=_budget(),
        rng=0,
    )
    return lambda: chain.invoke(QUESTION)


def _engine(kind: str, rows: list[Any], log: Log) -> Callable[[], object]:
    engine = DPQueryEngine.from_retriever(
        LIRank(rows),
        mechanism=_mechanism(kind, LlamaIndexTextModel(RefusingLLM(log=log))),
        returns_everything=True,
        unit_key="who",
        budget=_budget(),
        rng=0,
    )
    return lambda: engine.query(QUESTION)


def _observe(app: Callable[[str, list[Any], Log], Callable[[], object]], kind: str, rows: Any):
    log = Log()
    query = app(kind, rows, log)
    try:
        outcome = type(query()).__name__
    except Exception as error:  # the old DP-KSA: PrivateDataError on D + x only
        outcome = type(error).__name__
    return outcome, len(log.calls), sum(log.calls)


@pytest.mark.parametrize("kind", ["DPKSA", "DPAnswerVote"])
@pytest.mark.parametrize("app", [_core, _chain, _engine], ids=["core", "langchain", "llamaindex"])
def test_a_refused_prompt_changes_nothing_a_host_sees(kind: str, app: Any) -> None:
    d = _observe(app, kind, ROWS_D)
    with_x = _observe(app, kind, ROWS_X)
    assert d == with_x, (d, with_x)  # outcome type, calls, prompts sent
    assert "Error" not in d[0]


def test_an_own_model_is_called_once_per_prompt_on_both_corpora() -> None:
    for rows in (ROWS_D, ROWS_X):
        log = Log()
        _core("DPAnswerVote", rows, log)()
        assert log.calls == [1] * 4  # m = 4 voters: 4 calls of one prompt, never a resend
