"""partition_voters: exact sizes, padding, units kept together, exchangeable (not by rank)."""

from __future__ import annotations

import numpy as np
import pytest

from dprag_core.retrieval import ScoredDocument, partition_voters


def _docs(n: int, units: list[str] | None = None) -> list[ScoredDocument]:
    return [
        ScoredDocument(
            id=f"d{i}", text=f"text {i}", score=1.0 - i / 100, unit=units[i] if units else ""
        )
        for i in range(n)
    ]


def test_exact_sizes_and_disjoint() -> None:
    docs = _docs(12)
    voters = partition_voters(docs, m=4, k=3, rng=0)
    assert [len(v) for v in voters] == [3, 3, 3, 3]
    ids = [d.id for v in voters for d in v]
    assert sorted(ids) == sorted(d.id for d in docs)


def test_takes_only_top_m_times_k() -> None:
    voters = partition_voters(_docs(20), m=3, k=2, rng=1)
    assert sorted(d.id for v in voters for d in v) == sorted(f"d{i}" for i in range(6))


def test_pads_when_fewer_candidates() -> None:
    voters = partition_voters(_docs(2), m=3, k=2, rng=2)
    assert [len(v) for v in voters] == [2, 2, 2]
    flat = [d for v in voters for d in v]
    assert sum(d.is_padding for d in flat) == 4
    assert len({d.id for d in flat}) == 6
    empty = partition_voters([], m=2, k=1, rng=0)
    assert [len(v) for v in empty] == [1, 1] and all(v[0].is_padding for v in empty)


def test_units_stay_together() -> None:
    units = ["a", "a", "b", "c", "c", "c", "d", "e"]
    for seed in range(20):
        voters = partition_voters(_docs(8, units), m=4, k=2, rng=seed)
        owner = {d.unit: i for i, v in enumerate(voters) for d in v}
        for i, v in enumerate(voters):
            for d in v:
                assert owner[d.unit] == i
        assert sum(len(v) for v in voters) == 8


def test_uniform_assignment_not_by_rank() -> None:
    """Every document is equally likely to land with every voter, whatever its rank."""
    m, k, trials = 3, 2, 3000
    docs = _docs(m * k)
    rng = np.random.default_rng(3)
    where = np.zeros((m * k, m))
    together = 0
    for _ in range(trials):
        voters = partition_voters(docs, m=m, k=k, rng=rng)
        for i, v in enumerate(voters):
            for d in v:
                where[int(d.id[1:]), i] += 1
        together += any({"d0", "d1"} <= {d.id for d in v} for v in voters)
    freq = where / trials
    np.testing.assert_allclose(freq, 1 / m, atol=0.04)
    # P(two given documents share a voter) = (k-1)/(m*k-1) = 1/5 for a uniform partition.
    assert abs(together / trials - 1 / 5) < 0.03


def test_seeded_is_reproducible() -> None:
    a = partition_voters(_docs(6), m=3, k=2, rng=5)
    b = partition_voters(_docs(6), m=3, k=2, rng=5)
    assert a == b


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"m": 0, "k": 1}, ValueError, "m must be an integer >= 1"),
        ({"m": 2, "k": 0}, ValueError, "k must be an integer >= 1"),
        ({"m": 2.0, "k": 1}, TypeError, "m must be an integer"),
        ({"m": 2, "k": True}, TypeError, "k must be an integer"),
    ],
)
def test_bad_parameters(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        partition_voters(_docs(3), **kwargs)  # type: ignore[arg-type]


def test_bad_docs() -> None:
    with pytest.raises(TypeError, match="ScoredDocument"):
        partition_voters(["text"], m=1, k=1)  # type: ignore[list-item]
