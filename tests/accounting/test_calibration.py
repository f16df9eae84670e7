"""per_token_epsilon: the inverse of max_compositions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag_core.accounting.calibration import per_token_epsilon
from dprag_core.accounting.composition import max_compositions
from dprag_core.budget import Budget

TOTAL = Budget(10.0, 1e-6)


@pytest.mark.parametrize(("tokens", "bounded_range"), [(346, False), (1231, True), (100, False)])
def test_pinned_counts_invert(tokens: int, bounded_range: bool) -> None:
    eps0 = per_token_epsilon(TOTAL, tokens, bounded_range=bounded_range)
    # 0.1 is the regression step for 346 (optimal) and 1231 (bounded range): slightly more fits
    if tokens != 100:
        assert 0.1 <= eps0 < 0.1005
    assert max_compositions(Budget(eps0), TOTAL, bounded_range=bounded_range).count >= tokens


def test_bounded_range_allows_a_larger_step() -> None:
    assert per_token_epsilon(TOTAL, 200, bounded_range=True) > 1.5 * per_token_epsilon(TOTAL, 200)


def test_one_token_gets_everything_and_pure_total_splits_evenly() -> None:
    assert per_token_epsilon(TOTAL, 1) == 10.0
    assert per_token_epsilon(Budget(1.0), 4) == 0.25
    assert per_token_epsilon(Budget(0.7), 7) == pytest.approx(0.1, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(
    eps=st.floats(0.5, 20.0),
    delta=st.floats(1e-10, 1e-4),
    tokens=st.integers(1, 2000),
    bounded_range=st.booleans(),
)
def test_round_trip_is_tight(eps: float, delta: float, tokens: int, bounded_range: bool) -> None:
    total = Budget(eps, delta)
    eps0 = per_token_epsilon(total, tokens, bounded_range=bounded_range)
    assert max_compositions(Budget(eps0), total, bounded_range=bounded_range).count >= tokens
    bigger = min(eps0 * (1 + 1e-8), eps)
    if bigger > eps0:  # a slightly larger step no longer fits
        assert max_compositions(Budget(bigger), total, bounded_range=bounded_range).count < tokens


@settings(max_examples=10, deadline=None)
@given(tokens=st.integers(1, 1000), more=st.integers(1, 1000))
def test_more_tokens_never_get_a_larger_step(tokens: int, more: int) -> None:
    assert per_token_epsilon(TOTAL, tokens + more) <= per_token_epsilon(TOTAL, tokens)
