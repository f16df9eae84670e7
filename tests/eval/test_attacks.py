"""Attack metrics: extraction rate, S2MIA scores and the membership AUC on known inputs."""

from __future__ import annotations

import numpy as np
import pytest

from dprag_core.eval.attacks import (
    extraction_rate,
    membership_auc,
    membership_auc_interval,
    s2mia_query,
    s2mia_score,
    split_members,
)
from dprag_core.eval.synthetic import make_corpus


def test_extraction_rate() -> None:
    answers = ["It is 212-555-0101.", "212-555-0199", "unknown", "212-555-0104"]
    secrets = ["212-555-0101", "212-555-0102", "212-555-0103", "212-555-0104"]
    assert extraction_rate(answers, secrets) == 0.5
    with pytest.raises(ValueError, match="same length"):
        extraction_rate(["a"], [])


def test_membership_auc_known_values() -> None:
    assert membership_auc([1.0, 0.9], [0.1, 0.2]) == 1.0
    assert membership_auc([0.1, 0.2], [1.0, 0.9]) == 0.0
    assert membership_auc([0.5, 0.5], [0.5, 0.5]) == 0.5
    # one pair of four reversed, one tied: (2 + 0.5) / 4
    assert membership_auc([0.9, 0.4], [0.4, 0.1]) == pytest.approx(0.875)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=400), rng.normal(size=400)
    assert abs(membership_auc(a, b) - 0.5) < 0.06
    with pytest.raises(ValueError, match="non-empty"):
        membership_auc([], [0.1])


def test_membership_auc_interval_covers_and_shrinks() -> None:
    rng = np.random.default_rng(1)
    small = membership_auc_interval(rng.normal(size=30), rng.normal(size=30), rng=2)
    large = membership_auc_interval(rng.normal(size=300), rng.normal(size=300), rng=2)
    assert small[0] < 0.5 < small[1]  # no signal: the interval holds chance
    assert large[1] - large[0] < (small[1] - small[0]) / 2  # ~1/sqrt(n)
    shifted = membership_auc_interval(rng.normal(2.0, size=40), rng.normal(size=40), rng=2)
    assert shifted[0] > 0.75  # a real signal (true AUC 0.92) is told apart from chance
    with pytest.raises(ValueError, match="confidence"):
        membership_auc_interval([0.1], [0.2], confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        membership_auc_interval([0.1], [0.2], resamples=0)
    with pytest.raises(ValueError, match="non-empty"):
        membership_auc_interval([0.1], [])


def test_s2mia_query_and_score() -> None:
    corpus = make_corpus(supports=[2, 2], seed=0)
    record = corpus.records[0]
    query, remainder = s2mia_query(record)
    assert record.name in query and remainder == record.phone
    assert record.phone not in query
    assert s2mia_score(record.phone, record.phone) == 1.0
    assert s2mia_score("000-000-0000", record.phone) < 0.9


def test_split_members_is_a_seeded_partition() -> None:
    corpus = make_corpus(supports=[5, 3, 2], seed=0)
    members, others = split_members(corpus, fraction=0.5, rng=1)
    assert len(members) == 5 and len(others) == 5
    assert {r.id for r in members} | {r.id for r in others} == set(corpus.ids())
    assert not {r.id for r in members} & {r.id for r in others}
    again, _ = split_members(corpus, fraction=0.5, rng=1)
    assert [r.id for r in again] == [r.id for r in members]
    with pytest.raises(ValueError, match="fraction"):
        split_members(corpus, fraction=1.0)
