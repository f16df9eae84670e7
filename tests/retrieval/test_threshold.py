"""DPThreshold: unit-level selection, cost, padding, bad input."""

from __future__ import annotations

import pytest

from dprag_core import Budget
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold
from dprag_core.retrieval.units import group_by_unit


def _doc(i: int, score: float, unit: str = "") -> ScoredDocument:
    return ScoredDocument(id=f"d{i}", text=f"secret {i}", score=score, unit=unit)


def test_selects_k_units_at_large_epsilon() -> None:
    docs = [_doc(i, 0.9 - 0.1 * i) for i in range(8)]
    sel = DPThreshold(epsilon=1000.0, bounds=(0.0, 1.0), k=3)
    for seed in range(10):
        assert [d.id for d in sel.select(docs, rng=seed)] == ["d0", "d1", "d2"]


def test_units_score_by_their_best_chunk_and_keep_all_chunks() -> None:
    docs = [
        _doc(0, 0.2, unit="alice"),
        _doc(1, 0.95, unit="alice"),
        _doc(2, 0.9, unit="bob"),
        _doc(3, 0.1, unit="carol"),
    ]
    sel = DPThreshold(epsilon=1000.0, bounds=(0.0, 1.0), k=2)
    chosen = sel.select(docs, rng=0)
    assert [d.id for d in chosen] == ["d1", "d2", "d0"]  # both of alice's chunks, best first
    assert list(group_by_unit(docs)) == ["alice", "bob", "carol"]


def test_padding_is_ignored_and_empty_input_selects_nothing() -> None:
    sel = DPThreshold(epsilon=1.0, bounds=(-1.0, 1.0), k=2)
    assert sel.select([ScoredDocument.padding(0), ScoredDocument.padding(1)], rng=0) == []
    assert sel.select([], rng=0) == []


def test_top_p_selects_a_share_of_weight() -> None:
    docs = [_doc(i, s) for i, s in enumerate([0.95, 0.9, 0.2, 0.15, 0.1, 0.05])]
    sel = DPThreshold(epsilon=500.0, bounds=(0.0, 1.0), utility="top_p", p=0.9, alpha=5.0)
    chosen = {d.id for d in sel.select(docs, rng=1)}
    assert chosen == {"d0", "d1"}


def test_cost_and_repr_hide_nothing_private() -> None:
    sel = DPThreshold(epsilon=0.3, bounds=(-1.0, 1.0), utility="top_p", p=0.4)
    assert sel.cost() == Budget(0.3)
    assert "secret" not in repr(sel)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        DPThreshold(epsilon=0.0)
    with pytest.raises(ValueError, match="bounds"):
        DPThreshold(epsilon=1.0, bounds=(1.0, 1.0))
    with pytest.raises(ValueError, match="utility"):
        DPThreshold(epsilon=1.0, utility="top_x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="p must be"):
        DPThreshold(epsilon=1.0, utility="top_p", p=0.0)
    with pytest.raises(ValueError, match="k"):
        DPThreshold(epsilon=1.0, k=0)
    with pytest.raises(ValueError, match="alpha"):
        DPThreshold(epsilon=1.0, alpha=-1.0)
