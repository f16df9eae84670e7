"""End-to-end retrieval audits of the core pipeline, PrivateRAG (tests/retrieval_audit.py).

Top-n: a retriever without scores (every score tied) over multi-chunk units, read in
its own rank order. Threshold: MuRAG over two queries; the complete source is read
to the end, the capped one (today's broken variant, now refused when built) hides
one unit from the charge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from retrieval_audit import (
    CAP,
    EPSILON,
    TAU,
    UNITS,
    Recorder,
    accountant,
    audit_pair,
    capped_corpus,
    histograms,
    old_top_units,
    unscored_ranking,
)

from dprag_core import pipeline
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms.murag import MuRAG
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

Hists = list[tuple[int, int]]


def _top_n(*, with_new_unit: bool) -> Hists:
    docs = [
        ScoredDocument(id=i, text=t, score=1.0, unit=u)
        for i, u, t in unscored_ranking(with_new_unit=with_new_unit)
    ]
    recorder = Recorder(UNITS)
    PrivateRAG(recorder, HonoursK(lambda q, k: docs[:k]), accountant=accountant()).answer("Q")
    return histograms(recorder.seen, UNITS)


def test_top_n_in_rank_order_within_claim() -> None:
    result = audit_pair(_top_n(with_new_unit=False), _top_n(with_new_unit=True), seed=1)
    assert 1.0 < result.epsilon_lower_bound <= EPSILON


def test_top_n_mutation_window_sorted_by_id_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "top_units", old_top_units)
    result = audit_pair(_top_n(with_new_unit=False), _top_n(with_new_unit=True), seed=2)
    assert result.epsilon_lower_bound > EPSILON


Source = Callable[[str, int], Sequence[ScoredDocument]]


def _source(*, with_new_unit: bool, cap: int | None) -> Source:
    docs = {
        q: [ScoredDocument(id=i, text=t, score=s) for i, t, s in rows]
        for q, rows in capped_corpus(with_new_unit=with_new_unit).items()
    }
    if cap is None:
        return HonoursK(lambda q, k: docs[q][:k])
    return lambda q, k: docs[q][: min(k, cap)]


def _murag(*, with_new_unit: bool, cap: int | None) -> Hists:
    recorder = Recorder(UNITS)
    murag = MuRAG(
        recorder,
        ledger=InMemoryLedger(budget_per_unit=EPSILON),
        tau=TAU,
        epsilon_query=EPSILON,
        score_bounds=(0.0, 1.0),
    )
    rag = PrivateRAG(murag, _source(with_new_unit=with_new_unit, cap=cap), accountant=accountant())
    assert rag.answer("A").guarantee.epsilon == EPSILON  # the transcript's claim
    rag.answer("B")
    return histograms(recorder.seen, UNITS)


def test_murag_with_a_complete_source_within_claim() -> None:
    d, d_prime = _murag(with_new_unit=False, cap=None), _murag(with_new_unit=True, cap=None)
    assert 1.0 < audit_pair(d, d_prime, seed=3).epsilon_lower_bound <= EPSILON


def test_capped_source_is_refused_and_would_fail_the_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="native range search, or a store query that honours k"):
        _murag(with_new_unit=False, cap=CAP)
    monkeypatch.setattr(pipeline, "check_source", lambda *a, **kw: None)  # today's acceptance
    d, d_prime = _murag(with_new_unit=False, cap=CAP), _murag(with_new_unit=True, cap=CAP)
    assert audit_pair(d, d_prime, seed=4).epsilon_lower_bound > EPSILON
