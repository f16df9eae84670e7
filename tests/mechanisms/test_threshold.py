"""DP similarity threshold: exact interval law, numerics (ties, 1e5 scores, ε=1000), audits."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms import threshold as th
from dprag_core.mechanisms.threshold import (
    _sample_tau,
    dp_threshold,
    threshold_intervals,
    top_k_utility,
    top_p_utility,
    top_p_weights,
    utility_sensitivity,
)

TRIALS = 100_000
EPSILON = 1.0
BOUNDS = (0.0, 1.0)


def test_top_k_law_by_hand() -> None:
    # grid of 10 points 0.05, 0.15, ..., 0.95: 2 below 0.2, 4 in [0.2, 0.6), 4 above
    law = threshold_intervals([0.2, 0.6], epsilon=2.0, bounds=BOUNDS, k=1, grid=10)
    assert law.edges.tolist() == [0.0, 0.2, 0.6, 1.0]
    assert law.selected.tolist() == [2, 1, 0]
    assert law.utilities.tolist() == [-1.0, 0.0, -1.0]
    assert law.counts.tolist() == [2, 4, 4] and law.first.tolist() == [0, 2, 6]
    weights = np.array([2 * np.exp(-1.0), 4, 4 * np.exp(-1.0)])  # points · e^{εu/2}
    np.testing.assert_allclose(law.probs, weights / weights.sum(), rtol=1e-12)
    taus = _sample_tau(law, size=1000, rng=np.random.default_rng(0))
    assert set(np.round(taus, 12)) <= {round(0.05 + 0.1 * i, 12) for i in range(10)}


def test_grid_below_is_exact() -> None:
    rng = np.random.default_rng(7)
    for lo, hi, grid in [(-1.0, 1.0, 2**32), (0.0, 1.0, 10), (0.3, 0.7, 1000), (-5.0, 2.0, 3)]:
        points = th.grid_points(np.arange(min(grid, 2000)), bounds=(lo, hi), grid=grid)
        values = np.concatenate([rng.uniform(lo, hi, 500), points, [lo, hi]])
        below = th.grid_below(values, bounds=(lo, hi), grid=grid)
        inside = (below > 0) & (below < grid)
        assert np.all(th.grid_points(below[inside] - 1, bounds=(lo, hi), grid=grid)
                      < values[inside])  # fmt: skip
        assert np.all(th.grid_points(below[below < grid], bounds=(lo, hi), grid=grid)
                      >= values[below < grid])  # fmt: skip


def test_released_tau_is_a_grid_point_whatever_the_scores() -> None:
    # the low-order bits of τ come from the public grid, never from a private score
    grid = set(th.grid_points(np.arange(1000), bounds=BOUNDS, grid=1000).tolist())
    for scores in ([0.123456789, 0.87654321], [0.1234567891234, 0.8765432198765]):
        taus = {dp_threshold(scores, epsilon=1.0, bounds=BOUNDS, k=1, grid=1000, rng=s)
                for s in range(200)}  # fmt: skip
        assert len(taus) > 50 and taus <= grid


def test_utilities_match_the_utility_functions_at_midpoints() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.uniform(-0.5, 1.5, 25), 2)  # some outside the bounds, some ties
    for utility, kwargs in [("top_k", {"k": 4}), ("top_p", {"p": 0.3, "alpha": 2.0})]:
        law = threshold_intervals(scores, epsilon=1.0, bounds=BOUNDS, utility=utility, **kwargs)
        clipped = np.clip(scores, *BOUNDS)
        for j in np.nonzero(np.diff(law.edges) > 0)[0]:
            mid = 0.5 * (law.edges[j] + law.edges[j + 1])
            if utility == "top_k":
                u = top_k_utility(clipped, mid, k=4)
            else:
                u = top_p_utility(scores, mid, p=0.3, bounds=BOUNDS, alpha=2.0)
            assert law.utilities[j] == pytest.approx(u, abs=1e-12)
            assert law.selected[j] == np.count_nonzero(clipped > mid)


def test_sampler_matches_interval_probabilities() -> None:
    law = threshold_intervals([0.1, 0.3, 0.35, 0.8], epsilon=3.0, bounds=BOUNDS, k=2)
    taus = _sample_tau(law, size=TRIALS, rng=np.random.default_rng(1))
    assert np.all((taus >= 0.0) & (taus <= 1.0))
    counts = np.histogram(taus, bins=law.edges)[0]
    assert stats.chisquare(counts, law.probs * TRIALS).pvalue > 1e-4
    inside = taus[(taus > 0.35) & (taus < 0.8)]  # uniform inside its interval
    assert stats.kstest((inside - 0.35) / 0.45, "uniform").pvalue > 1e-4


def test_ties_and_equal_scores_give_no_nan() -> None:
    for scores in ([0.5] * 7, [0.0] * 4, [1.0] * 4, [0.0, 1.0, 1.0], [], [-3.0, 7.0]):
        for utility, kw in [("top_k", {"k": 2}), ("top_p", {"p": 0.5})]:
            law = threshold_intervals(scores, epsilon=5.0, bounds=BOUNDS, utility=utility, **kw)
            probs = law.probs
            assert np.all(np.isfinite(probs)) and probs.sum() == pytest.approx(1.0)
            assert np.all(probs[np.diff(law.edges) == 0] == 0.0)
            tau = dp_threshold(scores, epsilon=5.0, bounds=BOUNDS, utility=utility, rng=0, **kw)
            assert 0.0 <= tau <= 1.0


def test_huge_input_and_huge_epsilon_select_exactly_k() -> None:
    rng = np.random.default_rng(2)
    scores = rng.uniform(-1.0, 1.0, 100_000)
    for k in (1, 5, 50):
        law = threshold_intervals(scores, epsilon=1000.0, bounds=(-1.0, 1.0), k=k)
        assert np.all(np.isfinite(law.probs))
        for seed in range(5):
            tau = dp_threshold(scores, epsilon=1000.0, bounds=(-1.0, 1.0), k=k, rng=seed)
            assert np.count_nonzero(scores > tau) == k  # peaks at k, not k - 2


def test_top_k_at_large_epsilon_with_few_scores() -> None:
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    for k in range(1, 6):
        tau = dp_threshold(scores, epsilon=1000.0, bounds=BOUNDS, k=k, rng=k)
        assert sum(s > tau for s in scores) == k


def test_top_p_weights_use_public_bounds_and_sensitivity() -> None:
    w = top_p_weights([1.0, 0.5, 0.0, 2.0], bounds=BOUNDS, alpha=2.0)
    np.testing.assert_allclose(w, [1.0, np.exp(-1.0), np.exp(-2.0), 1.0])
    assert utility_sensitivity("top_p", p=0.2) == utility_sensitivity("top_k") == 1.0
    # Adding one document moves the top-p utility by at most max(p, 1 - p); substituting
    # one (a top-N candidate list) by at most 1.
    rng = np.random.default_rng(3)
    worst_sub = 0.0
    for _ in range(2000):
        scores = list(rng.uniform(0, 1, 6))
        extra, tau, p = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.95)
        u = top_p_utility(scores, tau, p=p, bounds=BOUNDS, alpha=0.01)
        u_add = top_p_utility([*scores, extra], tau, p=p, bounds=BOUNDS, alpha=0.01)
        u_sub = top_p_utility([*scores[1:], extra], tau, p=p, bounds=BOUNDS, alpha=0.01)
        assert abs(u - u_add) <= max(p, 1 - p) + 1e-12
        assert abs(u - u_sub) <= 1.0 + 1e-12
        worst_sub = max(worst_sub, abs(u - u_sub) / max(p, 1 - p))
    assert worst_sub > 1.2  # max(p, 1 - p) would be wrong under substitution


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="bounds"):
        dp_threshold([0.1], epsilon=1.0, bounds=(1.0, 0.0), k=1)
    with pytest.raises(ValueError, match="k is required"):
        dp_threshold([0.1], epsilon=1.0, bounds=BOUNDS)
    with pytest.raises(ValueError, match="p must be"):
        dp_threshold([0.1], epsilon=1.0, bounds=BOUNDS, utility="top_p", p=1.5)
    with pytest.raises(ValueError, match="utility"):
        dp_threshold([0.1], epsilon=1.0, bounds=BOUNDS, utility="top_q", k=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        dp_threshold([0.1], epsilon=0.0, bounds=BOUNDS, k=1)
    with pytest.raises(ValueError, match="NaN"):
        dp_threshold([np.nan], epsilon=1.0, bounds=BOUNDS, k=1)


# --- audits -----------------------------------------------------------------------------
# D' = D + one document at 0.95. Under D most mass sits on τ > 0.05 (u = −1 almost
# everywhere), under D' it moves to (0.05, 0.95) (u = 0): the small bin [0, 0.05) loses
# ε/2 in the numerator and ε/2 through the normaliser.
PAIR_D = [0.05]
PAIR_D_PRIME = [0.05, 0.95]
BINS = np.array([0.0, 0.05, 0.95, 1.0])


def _binned_sampler(utility: str, kw: dict[str, float]):  # type: ignore[no-untyped-def]
    def sample(scores: list[float], n: int, gen: np.random.Generator) -> np.ndarray:
        law = threshold_intervals(scores, epsilon=EPSILON, bounds=BOUNDS, utility=utility, **kw)
        return np.digitize(_sample_tau(law, size=n, rng=gen), BINS[1:-1])

    return sample


def _exact_bin_loss(utility: str, kw: dict[str, float]) -> float:
    def bin_probs(scores: list[float]) -> np.ndarray:
        # exact on the grid: run j puts probs[j]/counts[j] on each of its grid points
        law = threshold_intervals(scores, epsilon=EPSILON, bounds=BOUNDS, utility=utility, **kw)
        cuts = th.grid_below(BINS[1:-1], bounds=BOUNDS, grid=law.grid)
        mass = np.zeros(3)
        for j in np.nonzero(law.counts)[0]:
            start, stop = law.first[j], law.first[j] + law.counts[j]
            ranges = zip([0, *cuts], [*cuts, law.grid], strict=True)
            for b, (lo, hi) in enumerate(ranges):
                mass[b] += law.probs[j] * max(0, min(stop, hi) - max(start, lo)) / law.counts[j]
        return mass

    p, q = bin_probs(PAIR_D), bin_probs(PAIR_D_PRIME)
    return float(np.max(np.abs(np.log(p / q))))


def test_top_k_exact_loss_within_claim() -> None:
    loss = _exact_bin_loss("top_k", {"k": 1})
    assert 0.8 < loss <= EPSILON


def test_top_k_audit() -> None:
    result = run_audit(
        _binned_sampler("top_k", {"k": 1}), PAIR_D, PAIR_D_PRIME, trials=TRIALS, rng=4
    )
    assert 0.5 < result.epsilon_lower_bound <= EPSILON


def test_top_p_audit() -> None:
    kw = {"p": 0.5, "alpha": 1.0}
    assert _exact_bin_loss("top_p", kw) <= EPSILON
    result = run_audit(_binned_sampler("top_p", kw), PAIR_D, PAIR_D_PRIME, trials=TRIALS, rng=5)
    assert result.epsilon_lower_bound <= EPSILON


def test_top_k_mutation_halved_sensitivity_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(th, "utility_sensitivity", lambda utility, p=None: 0.5)
    result = run_audit(
        _binned_sampler("top_k", {"k": 1}), PAIR_D, PAIR_D_PRIME, trials=TRIALS, rng=6
    )
    assert result.epsilon_lower_bound > EPSILON


def test_reference_code_weights_are_not_sensitivity_one() -> None:
    # With data-dependent s_max/s_min (as the paper writes w), one added document rescales
    # every weight: the utility moves by far more than 1.
    def sarus_utility(scores: list[float], tau: float, p: float) -> float:
        s = np.asarray(scores)
        w = np.exp(5.0 * (s - s.max()) / (s.max() - s.min()))
        return -abs(w[s > tau].sum() - p * w.sum())

    base = [0.50, 0.49, 0.48, 0.47, 0.46, 0.45, 0.44, 0.43, 0.42, 0.0]
    moved = abs(sarus_utility(base, 0.455, 0.1) - sarus_utility([*base, 1.0], 0.455, 0.1))
    assert moved > 1.0
    ours = abs(
        top_p_utility(base, 0.455, p=0.1, bounds=BOUNDS, alpha=5.0)
        - top_p_utility([*base, 1.0], 0.455, p=0.1, bounds=BOUNDS, alpha=5.0)
    )
    assert ours <= 0.9 + 1e-12
