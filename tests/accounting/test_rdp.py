"""RDP curves and the RDP → (ε, δ) conversion, pinned against closed forms and dp_accounting."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dprag_core.accounting.rdp import (
    DEFAULT_ORDERS,
    approximate_rdp_to_dp,
    bounded_range_rdp,
    gaussian_rdp,
    pure_dp_rdp,
    rdp_to_dp,
)
from dprag_core.budget import Budget

EPSILONS = [1e-6, 1e-3, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]


def sinh_form(eps: float, alpha: float) -> float:
    """DP-KSA (Tang et al.) Theorem A.9: log((sinh(αε) − sinh((α−1)ε)) / sinh(ε)) / (α − 1)."""
    mpmath.mp.dps = 60
    e, a = mpmath.mpf(eps), mpmath.mpf(alpha)
    ratio = (mpmath.sinh(a * e) - mpmath.sinh((a - 1) * e)) / mpmath.sinh(e)
    return float(mpmath.log(ratio) / (a - 1))


def randomized_response_form(eps: float, alpha: float) -> float:
    mpmath.mp.dps = 60
    e, a = mpmath.mpf(eps), mpmath.mpf(alpha)
    ratio = (mpmath.exp(a * e) + mpmath.exp((1 - a) * e)) / (1 + mpmath.exp(e))
    return float(mpmath.log(ratio) / (a - 1))


@pytest.mark.parametrize("eps", EPSILONS)
def test_pure_dp_rdp_equals_the_sinh_form_of_dp_ksa(eps: float) -> None:
    orders = np.array([1.01, 1.25, 1.5, 2.0, 3.7, 10.0, 64.0, 1e3, 1e4, 1e6])
    ours = pure_dp_rdp(eps, orders)
    ref = np.array([sinh_form(eps, a) for a in orders])
    rr = np.array([randomized_response_form(eps, a) for a in orders])
    np.testing.assert_allclose(ref, rr, rtol=1e-14)  # the two closed forms agree
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


def test_pure_dp_rdp_is_finite_at_extreme_orders() -> None:
    values = pure_dp_rdp(10.0, [1e4, 1e6])
    assert np.all(np.isfinite(values))
    assert values[0] == pytest.approx(sinh_form(10.0, 1e4), rel=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_pure_dp_rdp_below_epsilon_and_zcdp_bound(eps: float) -> None:
    rr = pure_dp_rdp(eps, DEFAULT_ORDERS)
    bound = np.minimum(eps, DEFAULT_ORDERS * eps * eps / 2)
    assert np.all(rr <= bound * (1 + 1e-12))
    assert np.all(rr > 0)
    assert np.all(np.diff(rr) >= -1e-15 * eps)  # Rényi divergence is non-decreasing in α
    assert rr[-1] > 0.99 * eps or eps < 1e-5  # tends to ε as α → ∞


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_pure_dp_rdp_dominates_the_laplace_mechanism(eps: float) -> None:
    # RR is the worst case over ε-DP mechanisms; Laplace (b = 1/ε) has
    # D_α = log(α/(2α−1) e^{(α−1)ε} + (α−1)/(2α−1) e^{−αε}) / (α − 1) (Mironov 2017).
    a = DEFAULT_ORDERS[DEFAULT_ORDERS < 200]
    laplace = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * eps, np.log((a - 1) / (2 * a - 1)) - a * eps
    ) / (a - 1)
    assert np.all(pure_dp_rdp(eps, a) >= laplace - 1e-12)


def test_bounded_range_curve_is_the_minimum_of_zcdp_and_pure() -> None:
    a = DEFAULT_ORDERS
    for eps in (0.01, 0.1, 1.0, 8.0):
        np.testing.assert_allclose(
            bounded_range_rdp(eps, a), np.minimum(a * eps**2 / 8, pure_dp_rdp(eps, a)), rtol=1e-14
        )
    # small ε: the zCDP part wins (about 4x below RR ≈ αε²/2); large α: RR (≤ ε) wins
    assert bounded_range_rdp(0.1, [2.0])[0] == pytest.approx(2 * 0.01 / 8)
    assert bounded_range_rdp(1.0, [1e4])[0] == pytest.approx(pure_dp_rdp(1.0, [1e4])[0])


def test_gaussian_rdp_closed_form() -> None:
    np.testing.assert_allclose(gaussian_rdp(2.0, [1.5, 4.0], sensitivity=3.0), [1.6875, 4.5])


@pytest.mark.parametrize("orders", [DEFAULT_ORDERS, np.array(rdp_acc.DEFAULT_RDP_ORDERS, float)])
@pytest.mark.parametrize(
    ("sigma", "count", "delta"),
    [(0.7, 1, 1e-5), (1.0, 10, 1e-6), (3.0, 100, 1e-8), (20.0, 1000, 1e-9)],
)
def test_gaussian_matches_dp_accounting_rdp_accountant(
    orders: np.ndarray, sigma: float, count: int, delta: float
) -> None:
    acc = rdp_acc.RdpAccountant(orders=list(orders))
    acc.compose(dp_event.GaussianDpEvent(sigma), count)
    ours = rdp_to_dp(count * gaussian_rdp(sigma, orders), orders, delta=delta)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-12)


def test_rdp_to_dp_matches_compute_epsilon_on_arbitrary_curves() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        curve = rng.uniform(0, 3) * DEFAULT_ORDERS ** rng.uniform(0.0, 1.0)
        delta = 10 ** rng.uniform(-12, -2)
        ref, _ = rdp_acc.compute_epsilon(DEFAULT_ORDERS, curve, delta)
        assert rdp_to_dp(curve, delta=delta) == pytest.approx(ref, rel=1e-12, abs=1e-15)


def test_tiny_rdp_converts_to_zero_epsilon() -> None:
    assert rdp_to_dp(np.full(3, 1e-14), [2.0, 3.0, 4.0], delta=1e-5) == 0.0


@pytest.mark.parametrize(
    ("eps0", "count"), [(0.1, 313), (0.5, 20), (1.0, 10), (0.05, 1000), (0.2, 50), (2.0, 3)]
)
def test_pure_dp_rdp_is_above_but_close_to_the_tight_pld(eps0: float, count: int) -> None:
    delta = 1e-6
    ours = rdp_to_dp(count * pure_dp_rdp(eps0), delta=delta)
    tight = (
        pld.from_privacy_parameters(DifferentialPrivacyParameters(eps0, 0.0))
        .self_compose(count)
        .get_epsilon_for_delta(delta)
    )
    assert tight <= ours * (1 + 1e-9)  # PLD is tight: no valid bound beats it
    assert ours <= 1.08 * tight


def test_approximate_rdp_adds_the_approximation_delta() -> None:
    curve = 5 * pure_dp_rdp(0.5)
    b = approximate_rdp_to_dp(curve, delta=1e-6, approximate_delta=3e-7)
    assert b == Budget(rdp_to_dp(curve, delta=1e-6), 1e-6 + 3e-7)


def test_default_orders_grid() -> None:
    a = DEFAULT_ORDERS
    assert np.all(np.diff(a) > 0) and a[0] > 1 and a[-1] >= 1e4
    assert np.any((a > 1.2) & (a < 1.3)) and np.any(np.abs(a - 2.55) < 1e-12)
    assert not a.flags.writeable
    assert math.isclose(a[-1], 1e6)
