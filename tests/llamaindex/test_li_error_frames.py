"""Every error a LlamaIndex entry point raises reaches no private text through any frame of
its traceback (an error tracker's view), beyond what the caller passed in itself.

``DPQueryEngine`` raises its public errors (a reused id, an exhausted budget, a bad input)
before retrieval, and the fixed ``PrivateDataError`` for anything after. The node
postprocessors claim or charge before they read a node: the frames then hold only the nodes
the caller passed (``allowed``), never what the postprocessor made of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from li_helpers import CANARY, META_CANARY, QUESTION
from llama_index.core.schema import NodeWithScore, TextNode
from private_frames import assert_sealed
from query_support import murag
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PrivateDataError
from llamaindex_dprag import (
    COSINE_RANGE,
    DPQueryEngine,
    DPThresholdPostprocessor,
    PrivacyBudgetPostprocessor,
)
from llamaindex_dprag.bundles import DPQueryBundle

SECRETS = (CANARY, META_CANARY, "amoxicillin", "cetirizine")


class FailingLedger(InMemoryLedger):
    """Claims ids as usual; every charge fails (inside the private part)."""

    def charge(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the ledger's store went away")


def _raised(call: Any, error: type[BaseException]) -> BaseException:
    with pytest.raises(error) as info:
        call()
    return info.value


@pytest.mark.parametrize("streaming", [False, True])
def test_engine_public_errors(index: Any, streaming: bool) -> None:
    ledger = InMemoryLedger(budget_per_unit=10.0)
    engine = DPQueryEngine.from_index(
        index,
        mechanism=murag(ledger, tau=-1.0),
        unit_key="patient",
        score_range=COSINE_RANGE,
        streaming=streaming,
    )

    def ask(question: str = QUESTION, query_id: str | None = "q-1") -> Any:
        response: Any = engine.query(DPQueryBundle(question, query_id=query_id))
        return response.get_response() if streaming else response

    ask()
    assert_sealed(_raised(ask, QueryIdReused), SECRETS)
    assert_sealed(_raised(lambda: ask("Who" + chr(0xD800) + "?", None), ValueError), SECRETS)
    budget = InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    spent = DPQueryEngine.from_index(index, mechanism=ToyMechanism(k=2), budget=budget)
    spent.query(QUESTION)
    assert_sealed(_raised(lambda: spent.query(QUESTION), PrivacyBudgetExhausted), SECRETS)


def test_engine_failure_inside(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index,
        mechanism=murag(FailingLedger(budget_per_unit=10.0), tau=-1.0),
        unit_key="patient",
        score_range=COSINE_RANGE,
    )
    assert_sealed(_raised(lambda: engine.query(QUESTION), PrivateDataError), SECRETS)


def _nodes() -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(id_=f"n-{CANARY}-{i}", text=f"{CANARY} {i}"), score=s)
        for i, s in enumerate([0.9, 0.8, 0.1])
    ]


def test_postprocessors_public_errors() -> None:
    nodes, bundle = _nodes(), DPQueryBundle(QUESTION, query_id="q-1")
    post = PrivacyBudgetPostprocessor(
        ledger=InMemoryLedger(budget_per_unit=10.0), epsilon_query=1.0, tau=0.5, k=1
    )
    post.postprocess_nodes(nodes, query_bundle=bundle)
    reused = _raised(lambda: post.postprocess_nodes(nodes, query_bundle=bundle), QueryIdReused)
    assert_sealed(reused, [CANARY], allowed=[nodes])
    failing = PrivacyBudgetPostprocessor(
        ledger=FailingLedger(budget_per_unit=10.0), epsilon_query=1.0, tau=0.5, k=1
    )
    inside = _raised(lambda: failing.postprocess_nodes(nodes), PrivateDataError)
    assert_sealed(inside, [CANARY], allowed=[nodes])
    budget = InMemoryCorpusAccountant(Budget(1.0))
    threshold = DPThresholdPostprocessor(epsilon=1.0, score_range=(0, 1), k=1, budget=budget)
    threshold.postprocess_nodes(nodes)
    spent = _raised(lambda: threshold.postprocess_nodes(nodes), PrivacyBudgetExhausted)
    assert_sealed(spent, [CANARY], allowed=[nodes])
