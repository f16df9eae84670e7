"""The seal through ``DPQueryEngine``: D and D + x look the same but for the DP answer.

Issue 36's cases 1, 5 and 6 on neighbouring corpora (tests/seal_support.py),
queried and streamed, comparing what the caller gets: the exception's class and
message, or ``Response.metadata``. Each ``test_*_on_d_and_d_plus_x`` failed on
the code before issue 36 (checked on main at 21887b1).
"""

from __future__ import annotations

from typing import Any

import pytest
from li_helpers import DIM, HashEmbedding
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
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

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.budget import Budget
from dprag_core.retrieval.documents import ScoredDocument
from llamaindex_dprag import (
    COSINE_RANGE,
    DPQueryBundle,
    DPQueryEngine,
    PrivacyBudgetPostprocessor,
)
from llamaindex_dprag.vector_stores import cosine_faiss_store

MODES = ["query", "stream"]


def index(with_x: bool) -> VectorStoreIndex:
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=DIM))
    nodes = [TextNode(id_=f"n-{u}", text=t, metadata={"who": u}) for u, t in rows(with_x)]
    return VectorStoreIndex(nodes=nodes, storage_context=storage, embed_model=HashEmbedding())


def engine(with_x: bool, mechanism: Any, mode: str, **options: Any) -> DPQueryEngine:
    options.setdefault("budget", InMemoryCorpusAccountant(Budget(100.0, 0.5)))
    return DPQueryEngine.from_index(
        index(with_x),
        mechanism=mechanism,
        unit_key="who",
        score_range=COSINE_RANGE,
        streaming=mode == "stream",
        **options,
    )


def ask(engine: DPQueryEngine, query_id: str | None = None) -> dict[str, Any]:
    """One query: its ``Response.metadata`` (the response text, a DP release, left out)."""
    response: Any = engine.query(DPQueryBundle(QUESTION, query_id=query_id))
    if engine.streaming:
        response.get_response()  # the metadata is filled in when the stream ends
    return dict(response.metadata)


@pytest.mark.parametrize("mode", MODES)
def test_a_reused_query_id_is_refused_alike_on_d_and_d_plus_x(mode: str) -> None:
    """Case 1 (a client's idempotency key as the query id)."""

    def scenario(with_x: bool) -> tuple[Observation, Observation]:
        ledger = InMemoryLedger(budget_per_unit=10.0)
        app = engine(with_x, murag(ledger, tau=TAU), mode, budget=None)
        first = observed(lambda: ask(app, "client-key-1"))
        return first, observed(lambda: ask(app, "client-key-1"))

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx
    assert on_d[0][0] == "released" and on_d[1][:2] == ("raised", "QueryIdReused")


class RaisingRetriever(BaseRetriever):
    """A user's retriever whose error depends on what it holds."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self.texts = texts

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise error_by_corpus([ScoredDocument(f"d{i}", t, 1.0) for i, t in enumerate(self.texts)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["retriever", "mechanism"])
def test_an_errors_class_and_message_are_alike_on_d_and_d_plus_x(where: str, mode: str) -> None:
    """Case 5."""

    def scenario(with_x: bool) -> Observation:
        if where == "mechanism":
            return observed(lambda: ask(engine(with_x, FailsByCorpus(k=2), mode)))
        texts = sorted((t for _, t in rows(with_x)), key=lambda t: "Zora" not in t)
        app = DPQueryEngine.from_retriever(
            RaisingRetriever(texts),
            mechanism=ToyMechanism(k=2),
            returns_everything=True,
            budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
            streaming=mode == "stream",
        )
        return observed(lambda: ask(app))

    assert scenario(False) == scenario(True) == FIXED_FAILURE


@pytest.mark.parametrize("mode", MODES)
def test_private_details_are_refused_alike_on_d_and_d_plus_x(mode: str) -> None:
    """Case 6: a detail holding the documents' ids never reaches ``Response.metadata``."""

    def scenario(with_x: bool) -> Observation:
        return observed(lambda: ask(engine(with_x, IdsInDetails(k=2), mode)))

    assert scenario(False) == scenario(True) == FIXED_FAILURE


def test_the_budget_filter_refuses_a_reused_id_alike_on_d_and_d_plus_x() -> None:
    """Case 1 for the node postprocessor: its ledger recorded the bundle's id only when some
    node scored above τ; the id is claimed first now."""

    def scenario(with_x: bool) -> tuple[Observation, Observation]:
        scored = [(u, 0.9 if "Zora" in t else 0.1) for u, t in rows(with_x)]
        nodes = [NodeWithScore(node=TextNode(id_=u, text=""), score=s) for u, s in scored]
        post = PrivacyBudgetPostprocessor(
            ledger=InMemoryLedger(budget_per_unit=10.0), epsilon_query=1.0, tau=TAU, k=2
        )
        bundle = DPQueryBundle(QUESTION, query_id="client-key-1")
        first = observed(lambda: len(post.postprocess_nodes(nodes, query_bundle=bundle)) >= 0)
        return first, observed(lambda: post.postprocess_nodes(nodes, query_bundle=bundle))

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx and on_d[1][:2] == ("raised", "QueryIdReused")
