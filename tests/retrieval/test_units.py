"""Top-n retrieval by privacy unit: one added unit substitutes at most one unit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag_core.pipeline import retrieve_for
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.units import top_units


def _retriever(docs: list[ScoredDocument]) -> Callable[[str, int], list[ScoredDocument]]:
    ranked = sorted(docs, key=lambda d: d.score, reverse=True)
    return lambda question, k: ranked[:k]


def _corpus(seed: int, units: int) -> list[ScoredDocument]:
    rng = np.random.default_rng(seed)
    return [
        ScoredDocument(id=f"u{u}c{c}", text="", score=float(rng.random()), unit=f"u{u}")
        for u in range(units)
        for c in range(int(rng.integers(1, 5)))
    ]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000), units=st.integers(1, 15), n=st.integers(1, 8))
def test_adding_one_unit_substitutes_at_most_one(seed: int, units: int, n: int) -> None:
    corpus = _corpus(seed, units)
    rng = np.random.default_rng(seed + 1)
    extra = [
        ScoredDocument(id=f"new{c}", text="", score=float(rng.random()), unit="new")
        for c in range(int(rng.integers(1, 6)))
    ]
    before = top_units(_retriever(corpus), "q", n)
    after = top_units(_retriever(corpus + extra), "q", n)
    assert len({d.unit for d in before}) == len(before) <= n
    only_before = {d.id for d in before} - {d.id for d in after}
    only_after = {d.id for d in after} - {d.id for d in before}
    assert len(only_before) <= 1 and len(only_after) <= 1
    assert only_after <= {d.id for d in extra}


def test_chunk_level_top_n_would_shift_several_documents() -> None:
    """Why: with plain top-n chunks one multi-chunk unit pushes out several others."""
    corpus = [ScoredDocument(id=f"d{i}", text="", score=0.5 - i / 100) for i in range(6)]
    extra = [ScoredDocument(id=f"x{c}", text="", score=0.9, unit="x") for c in range(3)]
    chunks_before = {d.id for d in _retriever(corpus)("q", 4)}
    chunks_after = {d.id for d in _retriever(corpus + extra)("q", 4)}
    assert len(chunks_before - chunks_after) == 3
    units_before = {d.id for d in top_units(_retriever(corpus), "q", 4)}
    units_after = {d.id for d in top_units(_retriever(corpus + extra), "q", 4)}
    assert len(units_before - units_after) == 1


def test_retrieve_for_uses_a_native_range_search() -> None:
    class RangeRetriever:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def __call__(self, question: str, k: int) -> list[ScoredDocument]:
            self.calls.append("top")
            return []

        def above(self, question: str, tau: float) -> list[ScoredDocument]:
            self.calls.append("above")
            return [ScoredDocument(id="a", text="", score=0.9)]

    class Wants:
        name = "Wants"

        def candidates_needed(self) -> None:
            return None

        def min_score(self) -> float:
            return 0.5

    retriever = RangeRetriever()
    docs = retrieve_for(Wants(), retriever, "q")  # type: ignore[arg-type]
    assert [d.id for d in docs] == ["a"] and retriever.calls == ["above"]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000), units=st.integers(1, 15), n=st.integers(1, 8))
def test_unscored_ranking_substitutes_at_most_one_unit(seed: int, units: int, n: int) -> None:
    """A retriever without scores (every score tied): its own rank order is the only order."""
    rng = np.random.default_rng(seed)
    ranking = [
        ScoredDocument(id=f"z{u}c{c}", text="", score=1.0, unit=f"u{u}")
        for u in range(units)
        for c in range(int(rng.integers(1, 5)))
    ]
    rng.shuffle(ranking)  # type: ignore[arg-type]
    grown = list(ranking)
    for c in range(int(rng.integers(1, 6))):  # the new unit's chunks land anywhere
        grown.insert(int(rng.integers(0, len(grown) + 1)), ScoredDocument(
            id=f"a{c}", text="", score=1.0, unit="new"))  # fmt: skip
    before = {d.unit for d in top_units(lambda q, k: ranking[:k], "q", n)}
    after = {d.unit for d in top_units(lambda q, k: grown[:k], "q", n)}
    assert len(before - after) <= 1 and after - before <= {"new"}
