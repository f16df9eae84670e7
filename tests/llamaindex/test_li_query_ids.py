"""One query id through LlamaIndex's idiom, the query bundle:
``engine.query(DPQueryBundle(question, query_id=...))`` (sync, async, streaming), and
the same bundle passed down a pipeline to the node postprocessors. A retry after
``LedgerOutcomeUnknown`` with the same id is charged once and says so; one node with a
privacy unit no ledger accepts never blocks MuRAG."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from li_helpers import DIM, QUESTION, HashEmbedding
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeWithScore, TextNode
from query_support import BAD_UNITS, InDoubtAccountant, murag
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.ledger import InMemoryLedger, LedgerOutcomeUnknown
from dprag_core.budget import Budget
from dprag_core.pipeline import CHARGE_RETRY
from llamaindex_dprag import (
    COSINE_RANGE,
    DPQueryEngine,
    DPThresholdPostprocessor,
    PrivacyBudgetPostprocessor,
    cosine_faiss_store,
)
from llamaindex_dprag.bundles import DPQueryBundle


def _ask(engine: DPQueryEngine, how: str) -> dict[str, Any]:
    """The response metadata of one query named ``req-1``, however it is asked."""
    bundle = DPQueryBundle(QUESTION, query_id="req-1")
    if how == "aquery":
        response: Any = asyncio.run(engine.aquery(bundle))
    else:
        response = engine.query(bundle)
    if engine.streaming:
        response.get_response()  # the metadata is filled in when the stream ends
    return dict(response.metadata)


@pytest.mark.parametrize("how", ["query", "aquery", "stream"])
def test_a_retry_with_the_same_query_id_is_charged_once(index: Any, how: str) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(k=3), budget=budget, streaming=how == "stream"
    )
    with pytest.raises(LedgerOutcomeUnknown):
        _ask(engine, how)
    assert _ask(engine, how)["details"] == {"stop_reason": "eos", "charge": CHARGE_RETRY}
    assert budget.ids == ["req-1", "req-1"] and budget.queries == 1
    engine.query(QUESTION)  # no id: a fresh one, a new charge
    assert len(set(budget.ids)) == 2 and budget.queries == 2


def test_a_bad_id_is_refused_before_the_charge(index: Any) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    engine = DPQueryEngine.from_index(index, mechanism=ToyMechanism(k=3), budget=budget)
    for bad in (" ", "q\x00"):
        with pytest.raises(ValueError, match="query_id"):
            engine.query(DPQueryBundle(QUESTION, query_id=bad))
    assert budget.ids == []


def test_postprocessors_charge_under_the_bundles_id() -> None:
    nodes = [NodeWithScore(node=TextNode(id_=i, text=""), score=s) for i, s in [("a", 0.9)]]
    bundle = DPQueryBundle(QUESTION, query_id="req-7")
    budget = InDoubtAccountant(Budget(10.0))
    threshold = DPThresholdPostprocessor(epsilon=1.0, score_range=(0, 1), k=1, budget=budget)
    with pytest.raises(LedgerOutcomeUnknown):
        threshold.postprocess_nodes(nodes, query_bundle=bundle)
    threshold.postprocess_nodes(nodes, query_bundle=bundle)
    assert budget.ids == ["req-7", "req-7"] and budget.spent_epsilon == 1.0
    ledger = InMemoryLedger(budget_per_unit=10.0)
    post = PrivacyBudgetPostprocessor(ledger=ledger, epsilon_query=1.0, tau=0.5, k=1)
    post.postprocess_nodes(nodes, query_bundle=bundle)
    assert {e.query_id for e in ledger.audit_log()} == {"req-7"}


@pytest.mark.parametrize("defect", sorted(BAD_UNITS))
def test_one_invalid_unit_never_blocks_murag_through_the_engine(defect: str) -> None:
    rows = [("p1", "Ann takes aspirin."), ("p2", "Bob takes insulin."), (BAD_UNITS[defect], "x")]
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=DIM))
    nodes = [TextNode(id_=f"n{i}", text=t, metadata={"who": u}) for i, (u, t) in enumerate(rows)]
    index = VectorStoreIndex(nodes=nodes, storage_context=storage, embed_model=HashEmbedding())
    ledger = InMemoryLedger(budget_per_unit=100.0)
    engine = DPQueryEngine.from_index(
        index, mechanism=murag(ledger, tau=-1.0), unit_key="who", score_range=COSINE_RANGE
    )
    answers = [engine.query(f"Who takes {i}?").response for i in range(20)]
    assert answers == ["2 candidates"] * 20
    assert {e.unit for e in ledger.audit_log()} == {"p1", "p2"}
