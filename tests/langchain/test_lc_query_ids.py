"""One query id through LangChain's idioms: the chain run's ``run_id`` (one per input in a
batch), ``configurable={"dprag_query_id": ...}`` inside a larger runnable, and the
retriever run's ``run_id`` for ``DPRetriever``. A retry after ``LedgerOutcomeUnknown``
with the same id is charged once and says so; one document with a privacy unit no
ledger accepts never blocks MuRAG through the chain."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, HashingEmbeddings
from query_support import BAD_UNITS, InDoubtAccountant, murag
from toy_mechanisms import ToyMechanism

from dprag_core.accounting import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger, LedgerOutcomeUnknown
from dprag_core.budget import Budget
from dprag_core.pipeline import CHARGE_RETRY
from langchain_dprag import DPRAGChain, DPRetriever
from langchain_dprag.chain import QUERY_ID_KEY


def _chain(store: InMemoryVectorStore, budget: InDoubtAccountant, **kw: Any) -> DPRAGChain:
    return DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget, **kw)


@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_a_retry_with_the_same_run_id_is_charged_once(
    store: InMemoryVectorStore, mode: str
) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    chain = _chain(store, budget)
    run_id = uuid.uuid4()

    def ask() -> Any:
        if mode == "invoke":
            return chain.invoke(QUESTION, {"run_id": run_id})
        *_, last = chain.stream(QUESTION, {"run_id": run_id})
        return last

    with pytest.raises(LedgerOutcomeUnknown):
        ask()
    assert ask().details == {"stop_reason": "eos", "charge": CHARGE_RETRY}
    assert budget.ids == [str(run_id)] * 2 and budget.queries == 1
    assert "charge" not in chain.invoke(QUESTION).details  # a fresh run id: a new charge
    assert len(set(budget.ids)) == 2 and budget.queries == 2


def test_a_batch_has_one_id_per_input(store: InMemoryVectorStore) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    budget.failed = True  # no fault this time
    ids = [uuid.uuid4(), uuid.uuid4()]
    _chain(store, budget).batch([QUESTION, QUESTION], [{"run_id": i} for i in ids])
    assert sorted(budget.ids) == sorted(map(str, ids))  # type: ignore[type-var]
    _chain(store, budget).batch([QUESTION, QUESTION])
    assert len(set(budget.ids)) == 4


async def test_the_config_key_names_the_query_inside_a_larger_runnable(
    store: InMemoryVectorStore,
) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    app = RunnablePassthrough() | _chain(store, budget, output="text")
    config: Any = {"configurable": {QUERY_ID_KEY: "req-5"}}
    with pytest.raises(LedgerOutcomeUnknown):
        app.invoke(QUESTION, config)
    assert [c async for c in app.astream(QUESTION, config) if c] == ["3", " candidates"]
    assert budget.ids == ["req-5", "req-5"] and budget.queries == 1


@pytest.mark.parametrize("key", ["dprag_query_idd", "dprag_queryid", "dprag_id"])
def test_a_misspelt_dprag_configurable_key_is_refused_before_the_charge(
    store: InMemoryVectorStore, key: str
) -> None:
    budget = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    app = RunnablePassthrough() | DPRAGChain(
        vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget, output="text"
    )
    with pytest.raises(ValueError, match=f"{key!r} .* {QUERY_ID_KEY!r}"):
        app.invoke(QUESTION, {"configurable": {key: "req-5"}})
    assert budget.queries == 0
    other: Any = {"configurable": {"session_id": "s1"}}  # another runnable's key: not dprag's
    assert app.invoke(QUESTION, other) == "3 candidates" and budget.queries == 1


def test_dpretriever_charges_under_its_run_id(store: InMemoryVectorStore) -> None:
    budget = InDoubtAccountant(Budget(10.0))
    retriever = DPRetriever(vectorstore=store, epsilon=1.0, accountant=budget, k=2, rng=0)
    run_id = uuid.uuid4()
    with pytest.raises(LedgerOutcomeUnknown):
        retriever.invoke(QUESTION, {"run_id": run_id})
    retriever.invoke(QUESTION, {"run_id": run_id})
    assert budget.ids == [str(run_id)] * 2 and budget.spent_epsilon == 1.0
    ledger = InMemoryLedger(budget_per_unit=10.0)
    filtered = DPRetriever(vectorstore=store, ledger=ledger, tau=-1.0, epsilon_query=1.0, k=2)
    filtered.invoke(QUESTION, {"run_id": run_id})
    assert {e.query_id for e in ledger.audit_log()} == {str(run_id)}


@pytest.mark.parametrize("defect", sorted(BAD_UNITS))
def test_one_invalid_unit_never_blocks_murag_through_the_chain(defect: str) -> None:
    rows = [("p1", "Ann takes aspirin."), ("p2", "Bob takes insulin."), (BAD_UNITS[defect], "x")]
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents([Document(page_content=t, metadata={"who": u}) for u, t in rows])
    ledger = InMemoryLedger(budget_per_unit=100.0)
    chain = DPRAGChain(vectorstore=store, mechanism=murag(ledger, tau=-1.0), unit_key="who")
    answers = [chain.invoke(f"Who takes {i}?").answer for i in range(20)]
    assert answers == ["2 candidates"] * 20
    assert {e.unit for e in ledger.audit_log()} == {"p1", "p2"}
