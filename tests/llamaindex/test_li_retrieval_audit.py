"""End-to-end retrieval audits through the LlamaIndex adapter (tests/retrieval_audit.py).

DPQueryEngine.from_index (every score tied: one fixed ranking, ties by id) and
.from_retriever (a retriever's fixed list feeding MuRAG), and both postprocessors on a
complete candidate list. Each stays within its claim; each mutation restores today's
variant (the store's own tie order with a window sorted by id; a capped list taken as
complete; an upstream top-N) and must exceed it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from retrieval_audit import (
    CAP,
    EPSILON,
    SELECTION_BOUNDS,
    SELECTION_EPSILON,
    SELECTION_K,
    TAU,
    TRIALS,
    UNITS,
    Recorder,
    accountant,
    audit_pair,
    capped_corpus,
    histograms,
    old_top_units,
    selection_corpus,
    threshold_votes,
    tied_corpus,
)

from dprag_core import pipeline
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms.murag import MuRAG
from dprag_core.audit import audit_epsilon
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold
from llamaindex_dprag import DPQueryEngine, sources
from llamaindex_dprag.postprocessors import DPThresholdPostprocessor, PrivacyBudgetPostprocessor

Hists = list[tuple[int, int]]


class ConstantEmbedding(BaseEmbedding):
    """Every text and query at the same point: every score ties."""

    @classmethod
    def class_name(cls) -> str:
        return "ConstantEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return [1.0, 0.0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return [1.0, 0.0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return [1.0, 0.0]


# -- from_index: every score tied ------------------------------------------------------


def _tied(rows: list[tuple[str, str, str]]) -> Hists:
    nodes = [TextNode(id_=i, text=t, metadata={"who": u}) for i, u, t in rows]
    index = VectorStoreIndex(nodes=nodes, embed_model=ConstantEmbedding())
    recorder = Recorder(UNITS)
    engine = DPQueryEngine.from_index(
        index, mechanism=recorder, budget=accountant(), unit_key="who"
    )
    engine.query("Q")
    return histograms(recorder.seen, UNITS)


def test_from_index_ties_within_claim() -> None:
    d, d_prime = tied_corpus("zz")  # SimpleVectorStore keeps the largest ids among ties
    assert audit_pair(_tied(d), _tied(d_prime), seed=21).epsilon_lower_bound <= EPSILON


def test_from_index_mutation_store_tie_order_and_id_window_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sources, "tie_complete", lambda search, k, **kw: list(search(k)))
    monkeypatch.setattr(pipeline, "top_units", old_top_units)
    d, d_prime = tied_corpus("zz")
    assert audit_pair(_tied(d), _tied(d_prime), seed=22).epsilon_lower_bound > EPSILON


# -- from_retriever: MuRAG behind a retriever's fixed list --------------------------------


class TableRetriever(BaseRetriever):
    """Per question, its ranking with scores (the first ``cap`` only, when capped)."""

    def __init__(self, table: dict[str, list[Any]], cap: int | None) -> None:
        super().__init__()
        self.table, self.cap = table, cap

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        rows = self.table[query_bundle.query_str]
        rows = rows if self.cap is None else rows[: self.cap]
        return [NodeWithScore(node=TextNode(id_=i, text=t), score=s) for i, t, s in rows]


def _murag(*, with_new_unit: bool, cap: int | None, declared: bool = True) -> Hists:
    recorder = Recorder(UNITS)
    murag = MuRAG(
        recorder,
        ledger=InMemoryLedger(budget_per_unit=EPSILON),
        tau=TAU,
        epsilon_query=EPSILON,
        score_bounds=(0.0, 1.0),
    )
    engine = DPQueryEngine.from_retriever(
        TableRetriever(capped_corpus(with_new_unit=with_new_unit), cap),
        mechanism=murag,
        budget=accountant(),
        score_range=(0.0, 1.0),
        returns_everything=declared,
    )
    assert engine.query("A").metadata["epsilon"] == EPSILON
    engine.query("B")
    return histograms(recorder.seen, UNITS)


def test_from_retriever_complete_list_within_claim() -> None:
    d, d_prime = _murag(with_new_unit=False, cap=None), _murag(with_new_unit=True, cap=None)
    assert 1.0 < audit_pair(d, d_prime, seed=23).epsilon_lower_bound <= EPSILON


def test_from_retriever_capped_list_is_refused_and_would_fail_the_audit() -> None:
    with pytest.raises(ValueError, match="Sources that qualify: DPQueryEngine"):
        _murag(with_new_unit=False, cap=CAP, declared=False)
    # today's variant took the retriever's list as it came: capped at 4
    d, d_prime = _murag(with_new_unit=False, cap=CAP), _murag(with_new_unit=True, cap=CAP)
    assert audit_pair(d, d_prime, seed=24).epsilon_lower_bound > EPSILON


# -- PrivacyBudgetPostprocessor: MuRAG's filter on a complete list ------------------------


def _budget_filter(*, with_new_unit: bool, top: int | None) -> Hists:
    post = PrivacyBudgetPostprocessor(
        ledger=InMemoryLedger(budget_per_unit=EPSILON), epsilon_query=EPSILON, tau=TAU, k=UNITS
    )
    seen = []
    for question, rows in capped_corpus(with_new_unit=with_new_unit).items():
        nodes = [NodeWithScore(node=TextNode(id_=i, text=t), score=s) for i, t, s in rows]
        kept = post.postprocess_nodes(nodes if top is None else nodes[:top])
        seen.append((question, [n.node.get_content() for n in kept]))
    return histograms(seen, UNITS)


def test_budget_postprocessor_on_a_complete_list_within_claim() -> None:
    d, d_prime = (
        _budget_filter(with_new_unit=False, top=None),
        _budget_filter(with_new_unit=True, top=None),
    )
    assert 1.0 < audit_pair(d, d_prime, seed=25).epsilon_lower_bound <= EPSILON


def test_budget_postprocessor_mutation_upstream_top_n_fails() -> None:
    d, d_prime = (
        _budget_filter(with_new_unit=False, top=CAP),
        _budget_filter(with_new_unit=True, top=CAP),
    )
    assert audit_pair(d, d_prime, seed=26).epsilon_lower_bound > EPSILON


# -- DPThresholdPostprocessor on a complete list -------------------------------------------


def _threshold_candidates(
    monkeypatch: pytest.MonkeyPatch, *, with_new_unit: bool, top: int | None
) -> list[ScoredDocument]:
    seen: list[list[ScoredDocument]] = []
    select = DPThreshold.select

    def recording(self: DPThreshold, docs: Any, *, rng: Any = None) -> Any:
        seen.append(list(docs))
        return select(self, docs, rng=rng)

    monkeypatch.setattr(DPThreshold, "select", recording)
    post = DPThresholdPostprocessor(
        epsilon=SELECTION_EPSILON,
        score_range=SELECTION_BOUNDS,
        budget=accountant(),
        k=SELECTION_K,
        rng=0,
    )
    rows = selection_corpus(with_new_unit=with_new_unit)
    nodes = [NodeWithScore(node=TextNode(id_=i, text=t), score=s) for i, t, s in rows]
    post.postprocess_nodes(nodes if top is None else nodes[:top])
    # the postprocessor keeps no text: the votes come from the corpus rows
    texts = {i: t for i, t, _ in rows}
    return [ScoredDocument(id=d.id, text=texts[d.id], score=d.score) for d in seen[0]]


def _audit_threshold(monkeypatch: pytest.MonkeyPatch, *, top: int | None, seed: int) -> float:
    gen = np.random.default_rng(seed)
    outputs = [
        threshold_votes(
            _threshold_candidates(monkeypatch, with_new_unit=new, top=top),
            "Q",
            bounds=SELECTION_BOUNDS,
            k=SELECTION_K,
            trials=TRIALS,
            rng=gen,
        )
        for new in (False, True)
    ]
    return audit_epsilon(*outputs).epsilon_lower_bound


def test_threshold_postprocessor_on_a_complete_list_within_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _audit_threshold(monkeypatch, top=None, seed=27) <= SELECTION_EPSILON + EPSILON


def test_threshold_postprocessor_mutation_upstream_top_n_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _audit_threshold(monkeypatch, top=SELECTION_K, seed=28) > SELECTION_EPSILON + EPSILON
