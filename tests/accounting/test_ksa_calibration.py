"""DP-KSA accounting (pinned against dp_accounting) and calibration (≤ target, within 1%);
DP-ICL per-token calibration."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters
from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

from dprag_core.accounting.icl import calibrate_icl, icl_epsilon
from dprag_core.accounting.ksa import (
    KSAParameters,
    calibrate_ksa,
    ksa_epsilons,
    ksa_guarantee,
    ksa_rdp,
    required_gap,
)
from dprag_core.accounting.rdp import DEFAULT_ORDERS, bounded_range_rdp
from dprag_core.budget import Budget

ORDERS = DEFAULT_ORDERS


def test_gaussian_part_matches_dp_accounting() -> None:
    for sigma in (0.5, 1.0, 3.7):
        acc = rdp_acc.RdpAccountant(list(ORDERS))
        acc.compose(dp_event.GaussianDpEvent(noise_multiplier=sigma))
        gaussian = np.asarray(acc._rdp)  # α/(2σ²): sensitivity 2 at std 2σ
        ours = ksa_rdp(0.3, sigma, ORDERS) - bounded_range_rdp(0.3, ORDERS)
        np.testing.assert_allclose(ours, gaussian, rtol=1e-12)


def dp_accounting_pld_epsilon(epsilon_k: float, sigma: float, delta: float) -> float:
    """dp_accounting's PLD of randomized response (ε_k) composed with the Gaussian (σ)."""
    step = 1e-5
    rr = pld.from_privacy_parameters(
        DifferentialPrivacyParameters(epsilon_k, 0.0), value_discretization_interval=step
    )
    gauss = pld.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, value_discretization_interval=step
    )
    return float(rr.compose(gauss).get_epsilon_for_delta(delta))


CASES = [(1.0, 2.0, 5e-5, 5e-5), (0.2, 6.0, 1e-6, 1e-5), (4.0, 1.0, 5e-5, 5e-5)]


@pytest.mark.parametrize(("eps_k", "sigma", "d1", "d"), CASES)
def test_each_bound_matches_dp_accounting(eps_k: float, sigma: float, d1: float, d: float) -> None:
    eps = ksa_epsilons(eps_k, sigma, delta=d)
    ref, _ = rdp_acc.compute_epsilon(list(ORDERS), list(ksa_rdp(eps_k, sigma, ORDERS)), d)
    assert eps["rdp"] == pytest.approx(ref, rel=1e-12)
    # exact vs dp_accounting's pessimistic discretisation: never above it, and close
    ref_pld = dp_accounting_pld_epsilon(eps_k, sigma, d)
    assert ref_pld - 1e-4 <= eps["pld"] <= ref_pld + 1e-8
    ours = ksa_guarantee(eps_k, sigma, delta_ptr=d1, delta=d)
    assert ours.epsilon == min(eps.values())
    assert ours.delta == pytest.approx(d + d1)


@pytest.mark.parametrize("epsilon", [2.0, 5.0, 10.0, 20.0])
def test_pld_is_tighter_for_the_calibrated_noise(epsilon: float) -> None:
    # the independent computation: 3-7% smaller ε for the same noise
    p = calibrate_ksa(Budget(epsilon, 1e-4))
    eps = ksa_epsilons(p.epsilon_k, p.sigma, delta=1e-4 - p.delta_ptr)
    assert p.bound == "pld"
    assert 0.93 <= eps["pld"] / eps["rdp"] <= 0.97
    assert p.achieved.epsilon == eps["pld"]


def test_calibration_reports_the_bound_that_won() -> None:
    # at ε = 1 with few k candidates FindBestK gets a large share: its bounded-range
    # curve (RDP only) matters more than PLD's gain
    p = calibrate_ksa(Budget(1.0, 1e-4), k_candidates=5)
    eps = ksa_epsilons(p.epsilon_k, p.sigma, delta=1e-4 - p.delta_ptr)
    assert p.bound == "rdp" and eps["rdp"] < eps["pld"]


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 5.0, 10.0])
@pytest.mark.parametrize("delta", [1e-4, 1e-6])
def test_calibration_meets_target_within_one_percent(epsilon: float, delta: float) -> None:
    params = calibrate_ksa(Budget(epsilon, delta))
    assert 0.99 * epsilon <= params.achieved.epsilon <= epsilon
    assert params.achieved.delta <= delta * (1 + 1e-12)
    again = ksa_guarantee(
        params.epsilon_k, params.sigma, delta_ptr=params.delta_ptr, delta=delta - params.delta_ptr
    )
    assert again.epsilon == pytest.approx(params.achieved.epsilon, rel=1e-12)


def test_explicit_share_and_monotonicity() -> None:
    p = calibrate_ksa(Budget(2.0, 1e-4), epsilon_share=0.5)
    assert (p.epsilon_k, p.delta_ptr) == (1.0, 5e-5)
    sigmas = [calibrate_ksa(Budget(e, 1e-4), epsilon_share=0.3).sigma for e in (1.0, 2.0, 5.0)]
    assert sigmas[0] > sigmas[1] > sigmas[2]
    auto = calibrate_ksa(Budget(2.0, 1e-4))
    fixed = [calibrate_ksa(Budget(2.0, 1e-4), epsilon_share=s) for s in (0.1, 0.5, 0.9)]
    assert all(required_gap(auto) <= required_gap(f) for f in fixed)


def test_calibration_bad_input() -> None:
    with pytest.raises(ValueError, match="delta"):
        calibrate_ksa(Budget(1.0, 0.0))
    with pytest.raises(ValueError, match="epsilon_share"):
        calibrate_ksa(Budget(1.0, 1e-4), epsilon_share=1.5)
    with pytest.raises(TypeError, match="Budget"):
        calibrate_ksa((1.0, 1e-4))  # type: ignore[arg-type]
    assert isinstance(calibrate_ksa(Budget(1.0, 1e-4), epsilon_share=0.99), KSAParameters)


# --- DP-ICL -----------------------------------------------------------------------------


def test_icl_pld_matches_dp_accounting() -> None:
    sel = pld.from_privacy_parameters(DifferentialPrivacyParameters(0.5, 0.0))
    tok = pld.from_privacy_parameters(DifferentialPrivacyParameters(0.2, 0.0)).self_compose(10)
    ref = sel.compose(tok).get_epsilon_for_delta(1e-6)
    ours = icl_epsilon("pld", epsilon_token=0.2, selection_epsilon=0.5, tokens=10, delta=1e-6)
    assert ref * (1 - 1e-9) <= ours <= ref * 1.01  # coarser pessimistic grid: never below


@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_icl_calibration_fits(tokens: int) -> None:
    total = Budget(4.0, 1e-6)
    p = calibrate_icl(total, max_new_tokens=tokens, selection_epsilon=0.4)
    assert total.covers(p.achieved)
    assert p.epsilon_token >= 3.6 / tokens  # at least the sequential split
    eps = icl_epsilon(
        p.bound, epsilon_token=p.epsilon_token, selection_epsilon=0.4, tokens=tokens, delta=1e-6
    )
    assert eps <= 4.0 * (1 + 1e-12)
    if tokens == 64:
        assert p.bound == "bounded_range_rdp" and p.epsilon_token > 2 * 3.6 / tokens


def test_icl_pure_budget_is_sequential() -> None:
    p = calibrate_icl(Budget(2.0), max_new_tokens=10, selection_epsilon=1.0)
    assert (p.epsilon_token, p.bound, p.achieved) == (0.1, "sequential", Budget(2.0))
    with pytest.raises(ValueError, match="selection_epsilon"):
        calibrate_icl(Budget(1.0), max_new_tokens=4, selection_epsilon=1.0)
