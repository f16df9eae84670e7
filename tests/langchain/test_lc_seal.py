"""The seal through ``DPRAGChain``: D and D + x look the same but for the DP answer.

Issue 36's cases 1, 5 and 6 on neighbouring corpora (tests/seal_support.py),
invoked and streamed, comparing what the caller gets (the exception's class and
message, or the output's public fields) and what the chain's callbacks receive
(errors, custom events, retriever runs). Each ``test_*_on_d_and_d_plus_x``
failed on the code before issue 36 (checked on main at 21887b1).
"""

from __future__ import annotations

import functools
import operator
import uuid
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import HashingEmbeddings, budget
from query_support import murag
from seal_support import (
    FIXED_FAILURE,
    QUESTION,
    TAU,
    FailsByCorpus,
    IdsInDetails,
    Observation,
    error_by_corpus,
    observed,
    rows,
)
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.errors import PRIVATE_FAILURE
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, DPRAGOutput, DPRetriever
from langchain_dprag.chain import QUERY_ID_KEY

MODES = ["invoke", "stream"]


class Observer(BaseCallbackHandler):
    """What the chain's observers receive, without run ids or the released text."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        self.seen.append(("chain_error", type(error).__name__, str(error)))

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.seen.append(("retriever_start", query))

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.seen.append(("retriever_end", len(documents)))

    def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
        self.seen.append(("retriever_error", type(error).__name__, str(error)))

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.seen.append(("custom", name, data))


def store(with_x: bool) -> InMemoryVectorStore:
    vs = InMemoryVectorStore(HashingEmbeddings())
    docs = [Document(page_content=t, id=f"d-{u}", metadata={"patient": u}) for u, t in rows(with_x)]
    vs.add_documents(docs)
    return vs


def ask(chain: DPRAGChain, mode: str, observer: Observer, query_id: str | None = None) -> Any:
    """One query invoked or streamed: its public fields (the answer, a DP release, left out)."""
    config: Any = {"callbacks": [observer]}
    if query_id is not None:
        config["configurable"] = {QUERY_ID_KEY: query_id}
    if mode == "invoke":
        out = chain.invoke(QUESTION, config)
    else:
        out = functools.reduce(operator.add, chain.stream(QUESTION, config))
    assert isinstance(out, DPRAGOutput)
    return out.public()


def test_x_is_above_tau_and_d_below() -> None:
    """The neighbours are what the cases need (a positive control of the fixture)."""
    scores = [s for _, s in store(True).similarity_search_with_score(QUESTION, k=3)]
    assert scores[0] > TAU > max(scores[1:])


@pytest.mark.parametrize("mode", MODES)
def test_a_reused_query_id_is_refused_alike_on_d_and_d_plus_x(mode: str) -> None:
    """Case 1 (a client's idempotency key as the query id)."""

    def scenario(with_x: bool) -> tuple[Observation, Observation, list[Any]]:
        observer = Observer()
        ledger = InMemoryLedger(budget_per_unit=10.0)
        chain = DPRAGChain(
            vectorstore=store(with_x), mechanism=murag(ledger, tau=TAU), unit_key="patient"
        )
        first = observed(lambda: ask(chain, mode, observer, "client-key-1"))
        again = observed(lambda: ask(chain, mode, observer, "client-key-1"))
        return first, again, observer.seen

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx
    assert on_d[0][0] == "released" and on_d[1][:2] == ("raised", "QueryIdReused")


class RaisingRetriever(BaseRetriever):
    """A user's retriever (or a store client) whose error depends on what it holds."""

    texts: list[str]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        raise error_by_corpus([ScoredDocument(f"d{i}", t, 1.0) for i, t in enumerate(self.texts)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["retriever", "mechanism"])
def test_an_errors_class_and_message_are_alike_on_d_and_d_plus_x(where: str, mode: str) -> None:
    """Case 5, also as the chain's callbacks see it (``on_retriever_error``, ``on_chain_error``)."""

    def scenario(with_x: bool) -> tuple[Observation, list[Any]]:
        observer = Observer()
        if where == "retriever":
            texts = sorted((t for _, t in rows(with_x)), key=lambda t: "Zora" not in t)
            source: dict[str, Any] = {"retriever": RaisingRetriever(texts=texts)}
            chain = DPRAGChain(
                **source, retriever_honours_k=True, mechanism=ToyMechanism(k=2), accountant=budget()
            )
        else:
            chain = DPRAGChain(
                vectorstore=store(with_x), mechanism=FailsByCorpus(k=2), accountant=budget()
            )
        return observed(lambda: ask(chain, mode, observer)), observer.seen

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx and on_d[0] == FIXED_FAILURE
    assert ("chain_error", "PrivateDataError", PRIVATE_FAILURE) in on_d[1]


@pytest.mark.parametrize("mode", MODES)
def test_private_details_are_refused_alike_on_d_and_d_plus_x(mode: str) -> None:
    """Case 6: a detail holding the documents' ids never reaches ``DPRAGOutput.details``."""

    def scenario(with_x: bool) -> tuple[Observation, list[Any]]:
        observer = Observer()
        chain = DPRAGChain(
            vectorstore=store(with_x), mechanism=IdsInDetails(k=2), accountant=budget()
        )
        return observed(lambda: ask(chain, mode, observer)), observer.seen

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx and on_d[0] == FIXED_FAILURE


@pytest.mark.parametrize("mode", MODES)
def test_one_retriever_run_per_query_on_d_and_d_plus_x(mode: str) -> None:
    """A threshold mechanism's search grows until exhausted (32, then 64 documents): 31 above
    τ take one store call, 32 take two. The chain reported each call as a retriever run, so
    its observers counted the documents above τ; now one run per query (issue 36)."""

    def scenario(n: int) -> tuple[Observation, list[Any]]:
        vs = InMemoryVectorStore(HashingEmbeddings())
        vs.add_texts([f"filler record {i}" for i in range(n)], ids=[f"f{i}" for i in range(n)])
        ledger = InMemoryLedger(budget_per_unit=10.0)
        chain = DPRAGChain(vectorstore=vs, mechanism=murag(ledger, tau=-1.0))
        observer = Observer()
        return observed(lambda: ask(chain, mode, observer, "q-1")), observer.seen

    on_d, on_dx = scenario(31), scenario(32)
    assert on_d == on_dx
    assert [e[0] for e in on_d[1] if e[0].startswith("retriever")] == [
        "retriever_start",
        "retriever_end",
    ]


def test_dpretrievers_ledger_filter_refuses_a_reused_id_alike_on_d_and_d_plus_x() -> None:
    """Case 1 for ``DPRetriever``: the ledger recorded its run's id only when some document
    scored above τ; the id is claimed before the filter charges now."""

    def scenario(with_x: bool) -> tuple[Observation, Observation]:
        retriever = DPRetriever(
            vectorstore=store(with_x),
            ledger=InMemoryLedger(budget_per_unit=10.0),
            tau=TAU,
            epsilon_query=1.0,
            k=2,
            unit_key="patient",
        )
        run_id = uuid.uuid4()
        first = observed(lambda: len(retriever.invoke(QUESTION, {"run_id": run_id})) >= 0)
        return first, observed(lambda: retriever.invoke(QUESTION, {"run_id": run_id}))

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx and on_d[1][:2] == ("raised", "QueryIdReused")
