"""End-to-end retrieval audits through the LangChain adapter (tests/retrieval_audit.py).

DPRAGChain with vectorstore= (every score tied: one fixed ranking, ties by id) and
with retriever= (a declared k-honouring retriever without scores; a capped one feeding
MuRAG), and DPRetriever's DP threshold (every unit above the lower bound). Each stays
within its claim; each mutation restores today's variant and must exceed it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
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
    unscored_ranking,
)

from dprag_core import pipeline
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms.murag import MuRAG
from dprag_core.audit import audit_epsilon
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold
from langchain_dprag import DPRAGChain, DPRetriever, ScoreFunction, vectorstores
from langchain_dprag.retriever import DPRetriever as _DPRetriever

Hists = list[tuple[int, int]]
UNIT_RANGE = ScoreFunction("unit_cosine", low=0.0, high=1.0)


class TableEmbeddings(Embeddings):
    """Query (1, 0); a document's vector (s, sqrt(1 - s²)) has cosine s (default 1)."""

    def __init__(self, scores: dict[str, float] | None = None) -> None:
        self.scores = scores or {}

    def _vector(self, text: str) -> list[float]:
        s = self.scores.get(text, 1.0)
        return [s, math.sqrt(max(0.0, 1.0 - s * s))]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


# -- vectorstore=: every score tied ------------------------------------------------------


def _tied(rows: list[tuple[str, str, str]], *, composed: bool = False) -> Hists:
    store = InMemoryVectorStore(TableEmbeddings())
    store.add_documents(
        [Document(page_content=t, id=i, metadata={"who": u}) for i, u, t in rows]
    )  # one at a time is not needed: insertion order is the list's
    recorder = Recorder(UNITS)
    source: dict[str, Any] = {"vectorstore": store}
    if composed:  # the store's own retriever, configured: searched as the store
        source = {"retriever": store.as_retriever().with_config(tags=["rag"])}
    chain = DPRAGChain(**source, mechanism=recorder, unit_key="who", accountant=accountant())
    chain.invoke("Q")
    return histograms(recorder.seen, UNITS)


def test_vectorstore_ties_within_claim() -> None:
    d, d_prime = tied_corpus("x")
    assert audit_pair(_tied(d), _tied(d_prime), seed=11).epsilon_lower_bound <= EPSILON


def test_vectorstore_mutation_store_tie_order_and_id_window_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vectorstores, "tie_complete", lambda search, k, **kw: list(search(k)))
    monkeypatch.setattr(pipeline, "top_units", old_top_units)
    d, d_prime = tied_corpus("x")
    assert audit_pair(_tied(d), _tied(d_prime), seed=12).epsilon_lower_bound > EPSILON


# -- retriever=: a k-honouring retriever without scores ----------------------------------


class RankRetriever(BaseRetriever):
    """The first k of a fixed ranking, without scores (a keyword index, a re-ranker...)."""

    rows: list[Any]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        return [Document(page_content=t, id=i, metadata={"who": u}) for i, u, t in self.rows[:k]]


def _unscored(*, with_new_unit: bool, composed: bool = False) -> Hists:
    recorder = Recorder(UNITS)
    retriever: Any = RankRetriever(rows=unscored_ranking(with_new_unit=with_new_unit))
    if composed:  # a query step, then the retriever, configured
        retriever = RunnableLambda(str.strip) | retriever.with_config(run_name="mine")
    chain = DPRAGChain(
        retriever=retriever,
        retriever_honours_k=True,
        mechanism=recorder,
        unit_key="who",
        accountant=accountant(),
    )
    chain.invoke("Q")
    return histograms(recorder.seen, UNITS)


def test_retriever_without_scores_within_claim() -> None:
    d, d_prime = _unscored(with_new_unit=False), _unscored(with_new_unit=True)
    assert 1.0 < audit_pair(d, d_prime, seed=13).epsilon_lower_bound <= EPSILON


def test_composed_sources_within_claim() -> None:
    d, d_prime = tied_corpus("x")
    tied = audit_pair(_tied(d, composed=True), _tied(d_prime, composed=True), seed=11)
    assert tied.epsilon_lower_bound <= EPSILON
    d, d_prime = (_unscored(with_new_unit=new, composed=True) for new in (False, True))
    assert 1.0 < audit_pair(d, d_prime, seed=13).epsilon_lower_bound <= EPSILON


def test_retriever_without_scores_mutation_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "top_units", old_top_units)
    d, d_prime = _unscored(with_new_unit=False), _unscored(with_new_unit=True)
    assert audit_pair(d, d_prime, seed=14).epsilon_lower_bound > EPSILON


# -- retriever=: MuRAG behind a capped retriever -----------------------------------------


class ScoredRetriever(BaseRetriever):
    """Per question, the first min(k, cap) of a ranking, scores in metadata."""

    table: dict[str, list[Any]]
    cap: int | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        rows = self.table[query][: k if self.cap is None else min(k, self.cap)]
        return [Document(page_content=t, id=i, metadata={"score": s}) for i, t, s in rows]


def _murag(*, with_new_unit: bool, cap: int | None, declared: bool = True) -> Hists:
    recorder = Recorder(UNITS)
    murag = MuRAG(
        recorder,
        ledger=InMemoryLedger(budget_per_unit=EPSILON),
        tau=TAU,
        epsilon_query=EPSILON,
        score_bounds=(0.0, 1.0),
    )
    chain = DPRAGChain(
        retriever=ScoredRetriever(table=capped_corpus(with_new_unit=with_new_unit), cap=cap),
        retriever_honours_k=declared,
        mechanism=murag,
        score_function=UNIT_RANGE,
        accountant=accountant(),
    )
    assert chain.invoke("A").epsilon == EPSILON
    chain.invoke("B")
    return histograms(recorder.seen, UNITS)


def test_murag_behind_a_complete_retriever_within_claim() -> None:
    d, d_prime = _murag(with_new_unit=False, cap=None), _murag(with_new_unit=True, cap=None)
    assert 1.0 < audit_pair(d, d_prime, seed=15).epsilon_lower_bound <= EPSILON


def test_capped_retriever_is_refused_and_would_fail_the_audit() -> None:
    with pytest.raises(ValueError, match="Sources that qualify: vectorstore="):
        _murag(with_new_unit=False, cap=CAP, declared=False)
    # today's variant took any retriever: the capped one, as if it honoured k
    d, d_prime = _murag(with_new_unit=False, cap=CAP), _murag(with_new_unit=True, cap=CAP)
    assert audit_pair(d, d_prime, seed=16).epsilon_lower_bound > EPSILON


# -- DPRetriever: DP threshold over every unit above the lower bound ---------------------


def _selected_candidates(
    monkeypatch: pytest.MonkeyPatch, *, with_new_unit: bool
) -> list[ScoredDocument]:
    rows = selection_corpus(with_new_unit=with_new_unit)
    store = InMemoryVectorStore(TableEmbeddings({t: s for _, t, s in rows}))
    store.add_documents([Document(page_content=t, id=i) for i, t, _ in rows])
    seen: list[list[ScoredDocument]] = []
    select = DPThreshold.select

    def recording(self: DPThreshold, docs: Any, *, rng: Any = None) -> Any:
        seen.append(list(docs))
        return select(self, docs, rng=rng)

    monkeypatch.setattr(DPThreshold, "select", recording)
    retriever = DPRetriever(
        vectorstore=store,
        epsilon=SELECTION_EPSILON,
        accountant=accountant(),
        k=SELECTION_K,
        fetch_k=SELECTION_K,
        score_function=UNIT_RANGE,
        rng=0,
    )
    retriever.invoke("Q")
    return seen[0]


def _audit_selection(monkeypatch: pytest.MonkeyPatch, seed: int) -> float:
    gen = np.random.default_rng(seed)
    outputs = [
        threshold_votes(
            _selected_candidates(monkeypatch, with_new_unit=new),
            "Q",
            bounds=SELECTION_BOUNDS,
            k=SELECTION_K,
            trials=TRIALS,
            rng=gen,
        )
        for new in (False, True)
    ]
    return audit_epsilon(*outputs).epsilon_lower_bound


def test_dp_retriever_threshold_within_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _audit_selection(monkeypatch, seed=17) <= SELECTION_EPSILON + EPSILON


def test_dp_retriever_mutation_fetch_k_cut_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def fetch_k_cut(self: Any, query: str, k: int, search: Any) -> list[ScoredDocument]:
        selector = DPThreshold(epsilon=self.epsilon, bounds=self.score_function.bounds, k=k)
        self.accountant.charge(selector.cost())
        candidates = old_top_units(search, query, max(self.fetch_k, k))
        return list(selector.select(candidates, rng=self.rng))

    monkeypatch.setattr(_DPRetriever, "_threshold", fetch_k_cut)
    assert _audit_selection(monkeypatch, seed=18) > SELECTION_EPSILON + EPSILON
