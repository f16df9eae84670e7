"""Every error a LangChain entry point raises, and every error its callbacks receive, reaches
no private text through any frame of its traceback (an error tracker's view: every local of
every frame, recursively, causes and contexts included).

The public errors (a reused id, an exhausted budget, a bad input) are raised before the store
is searched; whatever fails after is the one fixed ``PrivateDataError``. On the code before,
``DPRetriever``'s ledger filter fetched before claiming the id: a reused ``run_id`` raised
``QueryIdReused`` from a frame holding every fetched document, and ``on_retriever_error``
received that exception.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET
from private_frames import assert_sealed
from query_support import murag
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PrivateDataError
from langchain_dprag import DPRAGChain, DPRetriever
from langchain_dprag.chain import QUERY_ID_KEY

SECRETS = (SECRET, "salbutamol", "lisinopril", "metformin")


class ErrorSink(BaseCallbackHandler):
    """Keeps every exception a callback receives."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)


class FailingLedger(InMemoryLedger):
    """Claims ids as usual; every charge fails quoting nothing (inside the private part)."""

    def charge(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the ledger's store went away")


def _check(call: Any, error: type[BaseException], sink: ErrorSink) -> None:
    with pytest.raises(error) as info:
        call()
    assert_sealed(info.value, SECRETS)
    assert sink.errors, "the callbacks received no error"
    for seen in sink.errors:
        assert_sealed(seen, SECRETS)
    sink.errors.clear()


def _ledger_retriever(store: InMemoryVectorStore, ledger: InMemoryLedger) -> DPRetriever:
    return DPRetriever(
        vectorstore=store, ledger=ledger, tau=-0.5, epsilon_query=1.0, k=2, unit_key="patient"
    )


def test_dpretriever_ledger_filter_reused_run_id(store: InMemoryVectorStore) -> None:
    sink = ErrorSink()
    retriever = _ledger_retriever(store, InMemoryLedger(budget_per_unit=10.0))
    run_id = uuid.uuid4()
    assert retriever.invoke(QUESTION, {"run_id": run_id, "callbacks": [sink]})
    config = {"run_id": run_id, "callbacks": [sink]}
    _check(lambda: retriever.invoke(QUESTION, config), QueryIdReused, sink)


def test_dpretriever_ledger_filter_failure_after_the_fetch(store: InMemoryVectorStore) -> None:
    sink = ErrorSink()
    retriever = _ledger_retriever(store, FailingLedger(budget_per_unit=10.0))
    _check(lambda: retriever.invoke(QUESTION, {"callbacks": [sink]}), PrivateDataError, sink)


def test_dpretriever_threshold_exhausted_and_reused(store: InMemoryVectorStore) -> None:
    sink = ErrorSink()
    budget = InMemoryCorpusAccountant(Budget(1.0))
    retriever = DPRetriever(vectorstore=store, epsilon=1.0, accountant=budget, k=2, rng=0)
    run_id = uuid.uuid4()
    retriever.invoke(QUESTION, {"run_id": run_id})
    config: Any = {"run_id": run_id, "callbacks": [sink]}
    _check(lambda: retriever.invoke(QUESTION, config), QueryIdReused, sink)
    config = {"callbacks": [sink]}
    _check(lambda: retriever.invoke(QUESTION, config), PrivacyBudgetExhausted, sink)


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_chain_public_errors(store: InMemoryVectorStore, how: str) -> None:
    sink = ErrorSink()
    ledger = InMemoryLedger(budget_per_unit=10.0)
    chain = DPRAGChain(vectorstore=store, mechanism=murag(ledger, tau=-1.0), unit_key="patient")
    config: Any = {"callbacks": [sink], "configurable": {QUERY_ID_KEY: "q-1"}}

    def ask(question: Any = QUESTION) -> Any:
        if how == "invoke":
            return chain.invoke(question, config)
        return list(chain.stream(question, config))

    ask()
    _check(ask, QueryIdReused, sink)
    config = {"callbacks": [sink]}
    _check(lambda: ask("Who" + chr(0xD800) + "?"), ValueError, sink)  # bad input
    budget = InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    spent = DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=2), accountant=budget)
    spent.invoke(QUESTION)
    _check(lambda: spent.invoke(QUESTION, {"callbacks": [sink]}), PrivacyBudgetExhausted, sink)


def test_chain_failure_inside(store: InMemoryVectorStore) -> None:
    sink = ErrorSink()
    chain = DPRAGChain(
        vectorstore=store,
        mechanism=murag(FailingLedger(budget_per_unit=10.0), tau=-1.0),
        unit_key="patient",
    )
    _check(lambda: chain.invoke(QUESTION, {"callbacks": [sink]}), PrivateDataError, sink)
