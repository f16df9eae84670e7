"""The two core selection steps: DP score threshold and MuRAG's ledger filter."""

from __future__ import annotations

import pytest

from dprag_core.accounting.ledger import InMemoryLedger, charge_active
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.selection import dp_threshold_select, ledger_filter, units_above
from dprag_core.retrieval.threshold import DPThreshold


def _doc(i: str, score: float, unit: str = "") -> ScoredDocument:
    return ScoredDocument(id=i, text="", score=score, unit=unit)


DOCS = [
    _doc("a1", 0.9, "a"),
    _doc("a2", 0.95, "a"),
    _doc("b1", 0.8, "b"),
    _doc("c1", 0.7, "c"),
    _doc("d1", 0.5, "d"),  # exactly at tau: not relevant
    _doc("e1", 0.2, "e"),
    ScoredDocument.padding(0),
]


def test_ledger_filter_charges_every_relevant_unit_not_only_the_top_k() -> None:
    ledger = InMemoryLedger(budget_per_unit=1.0)
    top = ledger_filter(DOCS, ledger=ledger, tau=0.5, cost=1.0, k=1, query_id="q1")
    assert [d.id for d in top] == ["a2"]  # the unit's best chunk, one slot per unit
    assert ledger.remaining(["a", "b", "c", "d", "e"]) == {
        "a": 0.0, "b": 0.0, "c": 0.0, "d": 1.0, "e": 1.0
    }  # fmt: skip
    assert ledger_filter(DOCS, ledger=ledger, tau=0.5, cost=1.0, k=3, query_id="q2") == []


def test_ledger_filter_drops_exhausted_units_silently() -> None:
    ledger = InMemoryLedger(budget_per_unit=1.0)
    assert charge_active(ledger, "spent", ["b"], 1.0) == ["b"]
    top = ledger_filter(DOCS, ledger=ledger, tau=0.5, cost=1.0, k=5, query_id="q")
    assert [d.id for d in top] == ["a2", "c1"]


def test_units_above_keeps_whole_units_by_their_clipped_best_score() -> None:
    assert [d.id for d in units_above(DOCS, 0.85, (0.0, 0.9))] == ["a2", "a1"]
    assert [d.id for d in units_above(DOCS, 0.9, (0.0, 0.9))] == []  # clipped to 0.9


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dpthreshold_is_the_core_step(seed: int) -> None:
    selector = DPThreshold(epsilon=2.0, bounds=(0.0, 1.0), k=2)
    core = dp_threshold_select(DOCS, epsilon=2.0, scale=(0.0, 1.0), k=2, rng=seed)
    assert selector.select(DOCS, rng=seed) == core.documents
    assert selector.threshold(DOCS, rng=seed) == core.tau
    assert all(d.score > core.tau for d in core.documents if d.unit != "a")


def test_dpthreshold_refuses_unbounded_scales() -> None:
    from dprag_core.retrieval.scores import ScoreScale

    with pytest.raises(ValueError, match="bounds must be finite"):
        DPThreshold(epsilon=1.0, bounds=ScoreScale.unclipped())


def test_charge_active_refuses_a_ledger_that_names_no_lacking_unit() -> None:
    class Refusing(InMemoryLedger):
        def charge(self, query_id, units, cost, *, retry=False):  # type: ignore[no-untyped-def]
            return type(super().charge(query_id, [], cost))(granted=False, lacking=())

    with pytest.raises(RuntimeError, match="without naming a lacking unit"):
        charge_active(Refusing(budget_per_unit=1.0), "q", ["a"], 0.5)


def test_ledger_filter_never_raises_on_unit_ids_a_ledger_refuses() -> None:
    from dprag_core.retrieval.documents import admit

    ledger = InMemoryLedger(budget_per_unit=1.0)
    docs = [admit(f"d{i}", "t", 0.9, unit, slot=i) for i, unit in enumerate([" ", "a", "x" * 2000])]
    kept = ledger_filter(docs, ledger=ledger, tau=0.5, cost=0.5, k=3, query_id="q")
    assert [d.unit for d in kept] == ["a"]
