"""Composition bounds and max_compositions: pinned table, dp_accounting PLD, properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from dprag_core.accounting.composition import (
    BOUNDS,
    CompositionCount,
    advanced_composition,
    composition_fits,
    max_compositions,
    max_rdp_compositions,
    optimal_composition,
    rdp_composition,
    sequential_composition,
)
from dprag_core.accounting.rdp import DEFAULT_ORDERS, bounded_range_rdp, pure_dp_rdp
from dprag_core.budget import Budget

TOTAL = Budget(10.0, 1e-6)

# c_max at total (ε=10, δ=1e-6) for a pure step ε0 (docs/design.md §5; 0.5 and 1.0 measured here).
PINNED = {
    0.1: {"sequential": 100, "advanced": 216, "optimal": 346, "rdp": 313,
          "bounded_range_rdp": 1231},
    0.5: {"sequential": 20, "advanced": 7, "optimal": 20, "rdp": 20, "bounded_range_rdp": 49},
    1.0: {"sequential": 10, "advanced": 1, "optimal": 10, "rdp": 10, "bounded_range_rdp": 12},
}  # fmt: skip


def pld_epsilon(step: Budget, count: int, delta: float) -> float:
    params = DifferentialPrivacyParameters(step.epsilon, step.delta)
    return float(
        pld.from_privacy_parameters(params).self_compose(count).get_epsilon_for_delta(delta)
    )


@pytest.mark.parametrize("eps0", sorted(PINNED))
def test_pinned_c_max_table(eps0: float) -> None:
    expected = PINNED[eps0]
    general = max_compositions(Budget(eps0), TOTAL)
    em = max_compositions(Budget(eps0), TOTAL, bounded_range=True)
    assert dict(em.counts) == expected
    assert dict(general.counts) == {b: c for b, c in expected.items() if b != "bounded_range_rdp"}
    assert (em.count, em.bound) == (expected["bounded_range_rdp"], "bounded_range_rdp")
    assert general.count == expected["optimal"]
    # ties go to the simplest bound: at ε0 = 0.5 sequential already reaches 20
    assert general.bound == ("optimal" if eps0 == 0.1 else "sequential")
    for bound, count in expected.items():
        assert composition_fits(bound, Budget(eps0), count, TOTAL)
        assert not composition_fits(bound, Budget(eps0), count + 1, TOTAL)


def test_pinned_values_use_the_stated_conventions() -> None:
    # advanced: all of δ is the slack δ' (δ0 = 0); 216 fits, 217 does not
    assert advanced_composition(Budget(0.1), 216, delta_slack=1e-6).epsilon < 10
    assert advanced_composition(Budget(0.1), 217, delta_slack=1e-6).epsilon > 10
    # optimal: the same as dp_accounting's PLD (discretised, hence slightly larger)
    assert pld_epsilon(Budget(0.1), 346, 1e-6) <= 10 < pld_epsilon(Budget(0.1), 347, 1e-6)


@pytest.mark.parametrize(
    ("total", "step", "count"),
    [(10.0, 0.1, 100), (0.7, 0.1, 7), (1.0, 0.1, 10), (0.9, 0.3, 3), (1.0, 1 / 3, 3),
     (3.3, 1.1, 3), (1.0, 0.7, 1)],
)  # fmt: skip
def test_sequential_count_is_exact_in_decimal(total: float, step: float, count: int) -> None:
    # 10 // 0.1 == 99 and 0.7 / 0.1 == 6.999999999999999 in floating point
    assert max_compositions(Budget(step), Budget(total)).counts["sequential"] == count


def test_sequential_and_advanced_formulas() -> None:
    assert sequential_composition(Budget(0.25, 1e-7), 8) == Budget(2.0, 8e-7)
    b = advanced_composition(Budget(0.2, 1e-8), 50, delta_slack=1e-6)
    eps = math.sqrt(2 * 50 * math.log(1e6)) * 0.2 + 50 * 0.2 * math.expm1(0.2)
    assert b.epsilon == pytest.approx(eps, rel=1e-15)
    assert b.delta == pytest.approx(1e-6 + 50 * 1e-8, rel=1e-15)


@pytest.mark.parametrize(
    ("eps0", "delta0", "count", "delta"),
    [(0.1, 0.0, 346, 1e-6), (0.1, 0.0, 1, 1e-6), (0.5, 0.0, 21, 1e-6), (1.0, 1e-8, 12, 1e-6),
     (0.05, 0.0, 2000, 1e-9), (2.0, 0.0, 3, 1e-3), (0.25, 1e-9, 200, 1e-5)],
)  # fmt: skip
def test_optimal_matches_dp_accounting_pld(
    eps0: float, delta0: float, count: int, delta: float
) -> None:
    ours = optimal_composition(Budget(eps0, delta0), count, delta=delta)
    ref = pld_epsilon(Budget(eps0, delta0), count, delta)
    assert ours <= ref * (1 + 1e-9)  # PLD rounds pessimistically (its FFT: ~1e-10 noise)
    assert ref - ours <= 1e-4 * count * eps0 + 1e-9


@pytest.mark.parametrize(
    ("eps0", "delta0", "count", "delta"),
    [(0.1, 0.0, 346, 1e-6), (0.3, 1e-8, 80, 1e-5), (1.0, 0.0, 5, 1e-2)],
)
def test_optimal_epsilon_spends_exactly_delta(
    eps0: float, delta0: float, count: int, delta: float
) -> None:
    """Independent check: the hockey-stick divergence at the returned ε equals δ."""
    eps = optimal_composition(Budget(eps0, delta0), count, delta=delta)
    i = np.arange(count + 1)
    loss = eps0 * (count - 2 * i)
    p = binom.pmf(i, count, 1 / (1 + math.exp(eps0)))
    pure = float(np.sum(np.where(loss > eps, p * -np.expm1(eps - loss), 0.0)))
    spent = 1 - (1 - delta0) ** count * (1 - pure)
    assert spent == pytest.approx(delta, rel=1e-9)


def test_optimal_is_infinite_when_delta0_mass_exceeds_delta() -> None:
    assert optimal_composition(Budget(0.1, 1e-7), 20, delta=1e-6) == math.inf
    assert rdp_composition(Budget(0.1, 1e-7), 10, delta=1e-6) == math.inf


def test_limited_domain_step_charges_count_times_delta0() -> None:
    step, total = Budget(0.1, 2e-9), Budget(10.0, 1e-6)
    r = max_compositions(step, total)
    c_adv, c_rdp = r.counts["advanced"], r.counts["rdp"]
    # advanced: the slack is what cδ0 leaves of δ; the composed δ is exactly δ
    adv = advanced_composition(step, c_adv, delta_slack=1e-6 - c_adv * 2e-9)
    assert adv.epsilon <= 10 and adv.delta == pytest.approx(1e-6)
    # rdp: converted at δ − cδ0, so it certifies fewer steps than the pure step
    assert rdp_composition(step, c_rdp, delta=1e-6) <= 10
    assert c_rdp < max_compositions(Budget(0.1), total).counts["rdp"]
    # sequential limited by δ: 10 steps of δ0 = 1e-7 fill δ = 1e-6
    assert max_compositions(Budget(0.01, 1e-7), total).counts["sequential"] == 10


def test_pure_total_only_sequential_and_optimal_apply() -> None:
    r = max_compositions(Budget(0.5), Budget(2.0))
    assert dict(r.counts) == {"sequential": 4, "advanced": 0, "optimal": 4, "rdp": 0}


def test_result_is_immutable() -> None:
    r = max_compositions(Budget(1.0), Budget(3.0))
    assert isinstance(r, CompositionCount)
    with pytest.raises(TypeError):
        r.counts["sequential"] = 5  # type: ignore[index]


steps = st.floats(0.01, 2.0)
totals = st.floats(0.5, 20.0)
deltas = st.floats(1e-10, 1e-3)


@settings(max_examples=25, deadline=None)
@given(eps0=steps, eps=totals, delta=deltas, bounded_range=st.booleans())
def test_every_count_fits_and_one_more_does_not(
    eps0: float, eps: float, delta: float, bounded_range: bool
) -> None:
    step, total = Budget(min(eps0, eps)), Budget(eps, delta)
    r = max_compositions(step, total, bounded_range=bounded_range)
    assert r.count == max(r.counts.values()) and r.counts[r.bound] == r.count
    assert r.bound == next(b for b in BOUNDS if r.counts.get(b) == r.count)
    for bound, count in r.counts.items():
        if count >= 1:
            assert composition_fits(bound, step, count, total)
        assert not composition_fits(bound, step, count + 1, total)
    # the optimal composition is optimal: no other general bound certifies more
    assert r.counts["optimal"] >= max(r.counts[b] for b in ("sequential", "advanced", "rdp"))


@settings(max_examples=20, deadline=None)
@given(eps0=steps, grow=st.floats(1.0, 3.0), eps=totals, delta=deltas,
       bounded_range=st.booleans())  # fmt: skip
def test_more_costly_steps_never_fit_more(
    eps0: float, grow: float, eps: float, delta: float, bounded_range: bool
) -> None:
    small = Budget(min(eps0, eps))
    big = Budget(min(eps0 * grow, eps))
    total = Budget(eps, delta)
    n_small = max_compositions(small, total, bounded_range=bounded_range)
    n_big = max_compositions(big, total, bounded_range=bounded_range)
    assert n_big.count <= n_small.count
    assert all(n_big.counts[b] <= n_small.counts[b] for b in n_small.counts)
    larger_total = max_compositions(small, Budget(eps * grow, delta), bounded_range=bounded_range)
    assert larger_total.count >= n_small.count


@settings(max_examples=15, deadline=None)
@given(eps0=steps, delta=deltas, count=st.integers(1, 3000), bound=st.sampled_from(BOUNDS))
def test_fewer_steps_always_fit_when_more_do(
    eps0: float, delta: float, count: int, bound: str
) -> None:
    step, total = Budget(eps0), Budget(20.0, delta)
    if composition_fits(bound, step, count, total):
        assert composition_fits(bound, step, max(1, count // 2), total)
        assert composition_fits(bound, step, max(1, count - 1), total)


@pytest.mark.parametrize("eps0", sorted(PINNED))
def test_max_rdp_compositions_is_the_rdp_search_for_any_curve(eps0: float) -> None:
    assert max_rdp_compositions(pure_dp_rdp(eps0, DEFAULT_ORDERS), TOTAL) == PINNED[eps0]["rdp"]
    br = bounded_range_rdp(eps0, DEFAULT_ORDERS)
    assert max_rdp_compositions(br, TOTAL) == PINNED[eps0]["bounded_range_rdp"]
    assert max_rdp_compositions(br, Budget(10.0)) == 0  # no pure guarantee from RDP


def test_max_rdp_compositions_rejects_a_curve_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="curve must hold one value >= 0 per order"):
        max_rdp_compositions(np.ones(3), TOTAL)
