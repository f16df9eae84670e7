"""The one calibration search: never over budget, within its one tolerance, used everywhere."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprag_core.accounting.calibration import per_token_epsilon
from dprag_core.accounting.composition import max_compositions
from dprag_core.accounting.icl import calibrate_icl, icl_epsilon
from dprag_core.accounting.ksa import calibrate_ksa, ksa_guarantee
from dprag_core.accounting.search import TOLERANCE, boundary
from dprag_core.budget import Budget


@settings(max_examples=60, deadline=None)
@given(
    edge=st.floats(1e-6, 1e6),
    steps=st.integers(1, 50),
    geometric=st.booleans(),
    upward=st.booleans(),
)
def test_the_result_always_fits_and_is_within_the_tolerance(
    edge: float, steps: int, geometric: bool, upward: bool
) -> None:
    """A monotone predicate, also a step function (counts): the result is a checked point."""
    grid = edge / steps

    def fits(x: float) -> bool:  # a staircase boundary at ``edge``
        quantised = math.floor(x / grid) * grid if upward else math.ceil(x / grid) * grid
        return quantised <= edge if upward else quantised >= edge

    low, high = edge / 1000, edge * 1000
    good, bad = (low, high) if upward else (high, low)
    seen: list[tuple[float, bool]] = []

    def recorded(x: float) -> bool:
        seen.append((x, fits(x)))
        return seen[-1][1]

    found = boundary(recorded, good=good, bad=bad, geometric=geometric)
    assert (found, True) in seen  # never a value that was not checked to fit
    beyond = found * (1 + 4 * TOLERANCE) if upward else found * (1 - 4 * TOLERANCE)
    assert not fits(beyond) or fits(bad)  # and within the tolerance of the boundary


def test_a_bracket_whose_fitting_end_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        boundary(lambda x: x < 1.0, good=2.0, bad=3.0)
    assert boundary(lambda x: x < 10.0, good=2.0, bad=3.0) == 3.0  # both fit: the far end


def test_a_broken_search_is_caught() -> None:
    """The mutation: returning the other end of the final bracket goes over the budget."""

    def broken(fits: Callable[[float], bool], *, good: float, bad: float) -> float:
        while abs(good - bad) > TOLERANCE * max(abs(good), abs(bad)):
            mid = 0.5 * (good + bad)
            good, bad = (mid, bad) if fits(mid) else (good, mid)
        return bad

    fits = lambda x: x <= 1.0  # noqa: E731
    assert fits(boundary(fits, good=0.0, bad=2.0))
    assert not fits(broken(fits, good=0.0, bad=2.0))


@pytest.mark.parametrize("tokens", [7, 346, 1231])
def test_per_token_epsilon_is_tight_and_fits(tokens: int) -> None:
    total = Budget(10.0, 1e-6)
    eps0 = per_token_epsilon(total, tokens, bounded_range=True)
    assert max_compositions(Budget(eps0), total, bounded_range=True).count >= tokens
    more = Budget(eps0 * (1 + 4 * TOLERANCE))
    assert max_compositions(more, total, bounded_range=True).count < tokens


def test_icl_calibration_is_tight_and_never_over() -> None:
    total = Budget(5.0, 1e-6)
    p = calibrate_icl(total, max_new_tokens=32, selection_epsilon=0.5)
    kw = {"selection_epsilon": 0.5, "tokens": 32, "delta": total.delta}
    assert icl_epsilon(p.bound, epsilon_token=p.epsilon_token, **kw) <= total.epsilon
    more = p.epsilon_token * (1 + 4 * TOLERANCE)
    assert icl_epsilon(p.bound, epsilon_token=more, **kw) > total.epsilon


@pytest.mark.parametrize("epsilon", [800.0, 1e6, 1e300])
def test_icl_calibration_of_a_huge_budget_fits_without_overflow(epsilon: float) -> None:
    """Past float range of exp(ε) the PLD bound certifies nothing; the rest still fits."""
    total = Budget(epsilon, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = calibrate_icl(total, max_new_tokens=32, selection_epsilon=0.1 * epsilon)
        kw = {"selection_epsilon": 0.1 * epsilon, "tokens": 32, "delta": total.delta}
        assert icl_epsilon(p.bound, epsilon_token=p.epsilon_token, **kw) <= epsilon
    assert p.epsilon_token >= 0.9 * epsilon / 32 and p.bound != "pld"


@pytest.mark.parametrize("epsilon", [0.5, 5.0])
def test_ksa_calibration_is_tight_and_never_over(epsilon: float) -> None:
    total = Budget(epsilon, 1e-4)
    p = calibrate_ksa(total)
    conv = total.delta - p.delta_ptr
    assert p.achieved.epsilon <= epsilon
    assert ksa_guarantee(p.epsilon_k, p.sigma, delta_ptr=p.delta_ptr, delta=conv) == p.achieved
    less_noise = ksa_guarantee(
        p.epsilon_k, p.sigma * (1 - 8 * TOLERANCE), delta_ptr=p.delta_ptr, delta=conv
    )
    assert less_noise.epsilon > epsilon * (1 - 1e-7)  # less noise: at (or over) the target
