"""FindBestK and TopKWithPTR: exact laws, audits on worst-case pairs, and mutations that fail
(FindBestK through the kit's suites, dprag_core.testing.mechanisms)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import special, stats

from dprag_core.accounting.rdp import DEFAULT_ORDERS, gaussian_rdp, rdp_to_dp
from dprag_core.audit import run_audit
from dprag_core.mechanisms import ksa
from dprag_core.mechanisms.ksa import (
    _find_best_k_batch,
    _ptr_batch,
    find_best_k,
    find_best_k_probabilities,
    gaps,
    ptr_pass_probability,
    top_k_with_ptr,
)
from dprag_core.testing.mechanisms import ExactLaw, WorstCaseAudit

TRIALS = 100_000
EPSILON = 1.0
# Substituting a response {b} by {a, c}: H(1) +1, H(2) −1, H(3) +1, so d_1 rises by 2 and
# d_2 falls by 2 — the worst case for FindBestK on k in {1, 2} (d_2 dominates).
H_D = [10, 10]
H_D_PRIME = [11, 9, 1]


def test_gaps_sorted_and_zero_padded() -> None:
    assert gaps([1, 5, 3], k_min=1, k_max=5).tolist() == [2.0, 2.0, 1.0, 0.0, 0.0]
    assert gaps([], k_min=2, k_max=3).tolist() == [0.0, 0.0]
    assert gaps([4, 4, 4], k_min=3, k_max=3).tolist() == [4.0]


def test_worst_pair_is_a_substitution_with_gap_changes_of_two() -> None:
    d, d_prime = gaps(H_D, k_min=1, k_max=2), gaps(H_D_PRIME, k_min=1, k_max=2)
    assert (d_prime - d).tolist() == [2.0, -2.0]


def test_probabilities_are_softmax_with_sensitivity_two() -> None:
    h = [30, 12, 11, 3]
    d = np.array([18.0, 1.0, 8.0, 3.0])
    for eps in (0.5, 1.0, 7.0):
        expected = special.softmax(eps * d / 4.0)
        got = find_best_k_probabilities(h, epsilon=eps, k_min=1, k_max=4)
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_sampler_matches_exact_law() -> None:
    h = [20, 14, 13, 5, 1]
    probs = find_best_k_probabilities(h, epsilon=2.0, k_min=2, k_max=5)
    draws = _find_best_k_batch(
        h, epsilon=2.0, k_min=2, k_max=5, size=TRIALS, rng=np.random.default_rng(1)
    )
    counts = np.bincount(draws - 2, minlength=4)
    assert stats.chisquare(counts, probs * TRIALS).pvalue > 1e-4


def test_range_is_public_and_respected() -> None:
    picks = {find_best_k([100, 1], epsilon=0.1, k_min=3, k_max=6, rng=s) for s in range(300)}
    assert picks <= {3, 4, 5, 6} and len(picks) == 4  # k=1 (gap 99) is outside the range
    assert find_best_k([1, 1], epsilon=1.0, rng=0) in range(1, ksa.DEFAULT_K_MAX + 1)


def test_find_best_k_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        find_best_k([1, 2], epsilon=-1.0)
    with pytest.raises(ValueError, match="k_max"):
        find_best_k([1, 2], epsilon=1.0, k_min=4, k_max=2)
    with pytest.raises(ValueError, match="histogram"):
        find_best_k([1, -2], epsilon=1.0)
    with pytest.raises(ValueError, match="histogram"):
        find_best_k([1, np.nan], epsilon=1.0)


Sampler = Callable[[list[int], int, np.random.Generator], np.ndarray]


def _find_best_k_sampler(h: list[int], n: int, gen: np.random.Generator) -> np.ndarray:
    return _find_best_k_batch(h, epsilon=EPSILON, k_min=1, k_max=2, size=n, rng=gen)


def _gumbel_two_over_epsilon(h: list[int], n: int, gen: np.random.Generator) -> np.ndarray:
    """Mutation: the paper's Alg. 3 literally prints Gumbel(2/ε): that is Δ = 1, i.e. 2ε spent."""
    saved, ksa.GAP_SENSITIVITY = ksa.GAP_SENSITIVITY, 1.0
    try:
        return _find_best_k_sampler(h, n, gen)
    finally:
        ksa.GAP_SENSITIVITY = saved


class TestFindBestK(ExactLaw[Sampler, list[int]], WorstCaseAudit[Sampler, list[int]]):
    """The kit's suites on the worst-case substitution pair (the pair has power: > 0.5)."""

    epsilon = EPSILON
    trials = TRIALS
    seed = 2
    power = 0.5

    def mechanism(self) -> Sampler:
        return _find_best_k_sampler

    def mutant(self) -> Sampler:
        return _gumbel_two_over_epsilon

    def pair(self) -> tuple[list[int], list[int]]:
        return H_D, H_D_PRIME

    def sample(
        self, sampler: Sampler, h: list[int], trials: int, gen: np.random.Generator
    ) -> np.ndarray:
        return sampler(h, trials, gen)

    def law(self, sampler: Sampler, h: list[int]) -> dict[int, float]:
        probabilities = find_best_k_probabilities(h, epsilon=EPSILON, k_min=1, k_max=2)
        return dict(enumerate(probabilities.tolist(), start=1))


def test_the_find_best_k_pair_is_tight() -> None:
    p = find_best_k_probabilities(H_D, epsilon=EPSILON, k_min=1, k_max=2)
    q = find_best_k_probabilities(H_D_PRIME, epsilon=EPSILON, k_min=1, k_max=2)
    assert 0.8 < float(np.max(np.abs(np.log(p / q)))) <= EPSILON


# --- TopKWithPTR -----------------------------------------------------------------------

SIGMA = 1.0
DELTA_PTR = 0.01  # large, so that the audit has power at 1e5 trials
DELTA_CONV = 1e-3
PTR_EPSILON = rdp_to_dp(gaussian_rdp(SIGMA, DEFAULT_ORDERS), DEFAULT_ORDERS, delta=DELTA_CONV)


def test_pass_probability_is_delta_when_unstable_and_exact_otherwise() -> None:
    for gap in (0.0, 1.0, 2.0):
        assert ptr_pass_probability(gap, sigma=SIGMA, delta=DELTA_PTR) == DELTA_PTR
    for gap in (2.0, 6.0, 12.0):
        draws = _ptr_batch(
            gap, sigma=SIGMA, delta=DELTA_PTR, size=TRIALS, rng=np.random.default_rng(4)
        )
        expected = ptr_pass_probability(gap, sigma=SIGMA, delta=DELTA_PTR)
        assert abs(draws.mean() - expected) < 5 * np.sqrt(expected * (1 - expected) / TRIALS) + 1e-4
    assert ptr_pass_probability(12.0, sigma=SIGMA, delta=DELTA_PTR) > 0.99


def test_top_k_with_ptr_reads_the_gap_at_k() -> None:
    h = [60, 58, 2, 1]
    assert top_k_with_ptr(h, 2, sigma=1.0, delta=1e-6, rng=0)
    assert not top_k_with_ptr(h, 1, sigma=1.0, delta=1e-6, rng=0)
    with pytest.raises(ValueError, match="delta"):
        top_k_with_ptr(h, 1, sigma=1.0, delta=0.0)
    with pytest.raises(ValueError, match="sigma"):
        top_k_with_ptr(h, 1, sigma=0.0, delta=1e-6)


def _ptr_release_sampler(histogram: dict[str, int], n: int, gen: np.random.Generator) -> np.ndarray:
    """TopKWithPTR for k = 1 followed by the release: 0 = nothing, 1 = {a}, 2 = {b}."""
    counts = list(histogram.values())
    passed = _ptr_batch(
        float(gaps(counts, k_min=1, k_max=1)[0]), sigma=SIGMA, delta=DELTA_PTR, size=n, rng=gen
    )
    top = max(histogram, key=lambda kw: (histogram[kw], kw))
    return np.where(passed, 1 if top == "a" else 2, 0)


# Unstable pair: the top-1 keyword flips between neighbours (d_1 = 1 on both sides).
UNSTABLE_D = {"a": 3, "b": 2}
UNSTABLE_D_PRIME = {"a": 2, "b": 3}
# Stable pair: same top-1, the gap moves from 2 to 4 (the Gaussian part of PTR).
STABLE_D = {"a": 5, "b": 3}
STABLE_D_PRIME = {"a": 6, "b": 2}


def test_ptr_audit_unstable_pair_within_delta() -> None:
    result = run_audit(
        _ptr_release_sampler,
        UNSTABLE_D,
        UNSTABLE_D_PRIME,
        trials=TRIALS,
        delta=DELTA_PTR + DELTA_CONV,
        rng=5,
    )
    assert result.epsilon_lower_bound <= PTR_EPSILON


def test_ptr_audit_stable_pair_within_gaussian_claim() -> None:
    result = run_audit(
        _ptr_release_sampler,
        STABLE_D,
        STABLE_D_PRIME,
        trials=TRIALS,
        delta=DELTA_PTR + DELTA_CONV,
        rng=6,
    )
    assert 0.5 < result.epsilon_lower_bound <= PTR_EPSILON


def test_ptr_mutation_without_quantile_offset_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # Releasing whenever max(2, d) + noise > 2 (no Φ⁻¹(1 − δ₁) offset): an unstable top-k
    # is released half of the time, far beyond δ.
    monkeypatch.setattr(ksa, "_ptr_offset", lambda sigma, delta: 0.0)
    result = run_audit(
        _ptr_release_sampler,
        UNSTABLE_D,
        UNSTABLE_D_PRIME,
        trials=TRIALS,
        delta=DELTA_PTR + DELTA_CONV,
        rng=7,
    )
    assert result.epsilon_lower_bound > PTR_EPSILON
