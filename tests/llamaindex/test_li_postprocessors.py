"""DPThresholdPostprocessor and PrivacyBudgetPostprocessor on real nodes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold
from llamaindex_dprag.postprocessors import DPThresholdPostprocessor, PrivacyBudgetPostprocessor


def nodes(scores: dict[str, float], units: dict[str, str] | None = None) -> list[NodeWithScore]:
    units = units or {}
    return [
        NodeWithScore(
            node=TextNode(id_=i, text=f"private {i}", metadata={"who": units.get(i, i)}), score=s
        )
        for i, s in scores.items()
    ]


SCORES = {"a": 0.9, "b": 0.8, "c": 0.3, "d": -0.2, "e": 0.85}


def test_threshold_matches_the_core_mechanism() -> None:
    """Same seed, same scores: exactly DPThreshold's selection (no logic of its own)."""
    post = DPThresholdPostprocessor(
        epsilon=1.0,
        score_range=(-1.0, 1.0),
        k=2,
        budget=InMemoryCorpusAccountant(Budget(100.0)),
        rng=11,
    )
    core = DPThreshold(epsilon=1.0, bounds=(-1.0, 1.0), k=2)
    gen = np.random.default_rng(11)
    docs = [ScoredDocument(id=i, text="", score=s) for i, s in SCORES.items()]
    for _ in range(30):
        got = [n.node.node_id for n in post.postprocess_nodes(nodes(SCORES))]
        assert got == [d.id for d in core.select(docs, rng=gen)]


def test_threshold_charges_before_returning() -> None:
    accountant = InMemoryCorpusAccountant(Budget(1.0))
    post = DPThresholdPostprocessor(
        epsilon=0.6, score_range=(-1.0, 1.0), k=2, budget=accountant, rng=0
    )
    assert post.cost() == Budget(0.6)
    post.postprocess_nodes(nodes(SCORES))
    assert accountant.spent_epsilon == pytest.approx(0.6)
    with pytest.raises(PrivacyBudgetExhausted):
        post.postprocess_nodes(nodes(SCORES))
    assert accountant.queries == 1


def test_threshold_high_epsilon_picks_top_k_units_whole() -> None:
    post = DPThresholdPostprocessor(
        epsilon=500.0,
        score_range=(-1.0, 1.0),
        k=2,
        budget=InMemoryCorpusAccountant(Budget(1e4)),
        unit_key="who",
        rng=1,
    )
    # b and c belong to one unit: it scores 0.8 (its best) and is kept whole
    picked = post.postprocess_nodes(nodes(SCORES, units={"b": "u", "c": "u"}))
    assert [n.node.node_id for n in picked] == ["a", "e"]
    picked = post.postprocess_nodes(nodes({"a": 0.9, "b": 0.8, "c": 0.3}, {"b": "u", "c": "u"}))
    assert [n.node.node_id for n in picked] == ["a", "b", "c"]


def test_threshold_on_distances() -> None:
    post = DPThresholdPostprocessor(
        epsilon=500.0,
        score_range=(0.0, 4.0),
        score_direction="distance",
        k=2,
        budget=InMemoryCorpusAccountant(Budget(1e4)),
        rng=2,
    )
    picked = post.postprocess_nodes(nodes({"far": 3.5, "near": 0.1, "mid": 0.4, "x": 2.0}))
    assert [n.node.node_id for n in picked] == ["near", "mid"]


def test_threshold_validation() -> None:
    with pytest.raises(ValueError, match="score_range is required"):
        DPThresholdPostprocessor(
            epsilon=1.0, score_range=None, budget=InMemoryCorpusAccountant(Budget(1.0))
        )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        DPThresholdPostprocessor(
            epsilon=-1.0, score_range=(-1, 1), budget=InMemoryCorpusAccountant(Budget(1.0))
        )
    with pytest.raises(ValueError, match="utility must be"):
        DPThresholdPostprocessor(
            epsilon=1.0,
            score_range=(-1, 1),
            budget=InMemoryCorpusAccountant(Budget(1.0)),
            utility="x",
        )
    with pytest.raises(TypeError, match="budget must be a CorpusAccountant"):
        DPThresholdPostprocessor(epsilon=1.0, score_range=(-1, 1), budget=1.0)  # type: ignore[arg-type]
    post = DPThresholdPostprocessor(
        epsilon=1.0, score_range=(-1, 1), budget=InMemoryCorpusAccountant(Budget(5.0))
    )
    # a node without a score is dropped: no error after the charge
    assert post.postprocess_nodes([NodeWithScore(node=TextNode(id_="a", text=""))]) == []
    assert "private" not in repr(post)


def test_budget_filter_charges_every_relevant_active_unit() -> None:
    ledger = InMemoryLedger(budget_per_unit=2.0)
    post = PrivacyBudgetPostprocessor(ledger=ledger, epsilon_query=1.0, tau=0.5, k=1)
    picked = post.postprocess_nodes(nodes(SCORES))
    assert [n.node.node_id for n in picked] == ["a"]  # the top k=1
    # every unit above tau paid, not only the top k; those below tau did not
    assert ledger.remaining(["a", "b", "e", "c", "d"]) == {
        "a": 1.0, "b": 1.0, "e": 1.0, "c": 2.0, "d": 2.0,
    }  # fmt: skip
    post.postprocess_nodes(nodes(SCORES))
    assert post.postprocess_nodes(nodes(SCORES)) == []  # a, b, e exhausted: dropped
    assert ledger.remaining(["a", "b", "e"]) == {"a": 0.0, "b": 0.0, "e": 0.0}


def test_budget_filter_charges_a_unit_once() -> None:
    ledger = InMemoryLedger(budget_per_unit=1.0)
    post = PrivacyBudgetPostprocessor(
        ledger=ledger, epsilon_query=1.0, tau=0.0, k=5, unit_key="who"
    )
    picked = post.postprocess_nodes(nodes({"a": 0.9, "b": 0.8}, units={"a": "u", "b": "u"}))
    assert [n.node.node_id for n in picked] == ["a"]  # one slot per unit: its best chunk
    assert ledger.remaining(["u"]) == {"u": 0.0}  # one unit, charged once
    assert post.postprocess_nodes(nodes({"a": 0.9}, units={"a": "u"})) == []


class LookAlike:
    """A ledger's methods without being one: its charges could not be trusted."""

    def __init__(self) -> None:
        self.inner = InMemoryLedger(budget_per_unit=1.0)
        self.charge, self.active = self.inner.charge, self.inner.active


def test_budget_filter_validation() -> None:
    for fake in (object(), LookAlike()):
        with pytest.raises(
            TypeError, match=r"ledger must be a dprag Ledger .* got (object|LookAlike)"
        ):
            PrivacyBudgetPostprocessor(ledger=fake, epsilon_query=1.0, tau=0.1, k=2)
    ledger: Any = InMemoryLedger(budget_per_unit=1.0)
    with pytest.raises(ValueError, match="epsilon_query must be a finite number > 0"):
        PrivacyBudgetPostprocessor(ledger=ledger, epsilon_query=0.0, tau=0.1, k=2)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        PrivacyBudgetPostprocessor(ledger=ledger, epsilon_query=1.0, tau=0.1, k=0)


@pytest.mark.parametrize(
    ("score_direction", "score_range", "tau", "allowed"),
    [
        ("similarity", (-1.0, 1.0), -1.0, True),  # the floor: every unit above it
        ("similarity", (-1.0, 1.0), 1.0, False),  # the top: no clipped score exceeds it
        ("similarity", (-1.0, 1.0), 2.0, False),
        ("similarity", (-1.0, 1.0), -1.5, False),
        ("distance", (0.0, 2.0), 0.5, False),  # similarities are negated distances: [-2, 0)
        ("distance", (0.0, 2.0), -0.5, True),
        ("similarity", None, 7.0, True),  # no declared range: any finite tau
    ],
)
def test_budget_filter_tau_follows_the_one_threshold_rule(
    score_direction: str, score_range: tuple[float, float] | None, tau: float, allowed: bool
) -> None:
    def build() -> PrivacyBudgetPostprocessor:
        return PrivacyBudgetPostprocessor(
            ledger=InMemoryLedger(budget_per_unit=1.0),
            epsilon_query=1.0,
            tau=tau,
            k=2,
            score_direction=score_direction,
            score_range=score_range,
        )

    if allowed:
        assert build().tau == tau
    else:
        with pytest.raises(ValueError, match=r"tau must be in \[-?\d\.0, -?\d\.0\)"):
            build()


@pytest.mark.parametrize(("tau", "error"), [(float("nan"), ValueError), ("0.5", TypeError)])
def test_budget_filter_tau_must_be_a_finite_real(tau: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="tau must be"):
        PrivacyBudgetPostprocessor(
            ledger=InMemoryLedger(budget_per_unit=1.0), epsilon_query=1.0, tau=tau, k=2
        )
