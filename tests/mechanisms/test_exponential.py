"""Exponential mechanism: exact softmax, Gumbel-max goodness of fit, audits and mutations
(the worst-case pair through the kit's suites, dprag_core.testing.mechanisms)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import special, stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms.exponential import (
    exponential_logits,
    exponential_mechanism,
    exponential_probabilities,
    gumbel_max,
)
from dprag_core.testing.mechanisms import ExactLaw, WorstCaseAudit

TRIALS = 200_000
EPSILON = 1.0
N_ITEMS = 10
# Worst-case non-monotone pair (Δ = 1): utility of item 0 drops by 1, all others rise by 1.
U_D = np.array([1.0] + [0.0] * (N_ITEMS - 1))
U_D_NONMONO = np.array([0.0] + [1.0] * (N_ITEMS - 1))
# Monotone pair: every utility moves up (or stays).
U_D_MONO = np.ones(N_ITEMS)


def test_probabilities_are_softmax() -> None:
    u = np.array([0.3, -2.0, 5.0, 5.0, 1.5])
    for eps, sens, mono, factor in [
        (1.0, 1.0, False, 0.5),
        (2.0, 3.0, False, 1 / 3),
        (1.0, 2.0, True, 0.5),
    ]:
        expected = special.softmax(u * factor)
        got = exponential_probabilities(u, epsilon=eps, sensitivity=sens, monotone=mono)
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_probabilities_log_space_and_minus_inf() -> None:
    probs = exponential_probabilities([1e6, 1e6 - 2.0, -np.inf], epsilon=1.0)
    np.testing.assert_allclose(probs, [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0.0])
    assert all(
        exponential_mechanism([0.0, -np.inf, 0.0], epsilon=1.0, rng=s) != 1 for s in range(200)
    )


def test_gumbel_max_matches_softmax_by_chi_square() -> None:
    u = np.array([0.0, 1.0, 2.0, 2.5, -1.0, 0.5])
    probs = exponential_probabilities(u, epsilon=1.0)
    draws = gumbel_max(
        exponential_logits(u, epsilon=1.0, sensitivity=1.0, monotone=False),
        size=TRIALS,
        rng=np.random.default_rng(5),
    )
    counts = np.bincount(draws, minlength=u.size)
    assert stats.chisquare(counts, probs * TRIALS).pvalue > 1e-3
    # power: the same test rejects the distribution of a 10% larger epsilon
    wrong = exponential_probabilities(u, epsilon=1.1)
    assert stats.chisquare(counts, wrong * TRIALS).pvalue < 1e-6


def test_public_function_returns_python_int_in_range() -> None:
    choice = exponential_mechanism(np.arange(5.0), epsilon=0.1, rng=0)
    assert isinstance(choice, int) and 0 <= choice < 5


Sampler = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]


def em_sampler(*, monotone: bool) -> Sampler:
    def sample(u: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        logits = exponential_logits(u, epsilon=EPSILON, sensitivity=1.0, monotone=monotone)
        return gumbel_max(logits, size=n, rng=gen)

    return sample


def broken_em_sampler(u: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
    """MUTATION: factor ε/Δ (the monotone scaling) on a non-monotone utility."""
    return np.argmax(u * EPSILON + gen.gumbel(size=(n, u.size)), axis=1)


class TestNonMonotonePair(ExactLaw[Sampler, np.ndarray], WorstCaseAudit[Sampler, np.ndarray]):
    """The kit's suites on the worst-case non-monotone pair (exact worst ratio: ln 2.45 = 0.90;
    the mutant's: 1.78)."""

    epsilon = EPSILON
    trials = TRIALS
    seed = 30
    power = 0.75

    def mechanism(self) -> Sampler:
        return em_sampler(monotone=False)

    def mutant(self) -> Sampler:
        return broken_em_sampler

    def pair(self) -> tuple[np.ndarray, np.ndarray]:
        return U_D, U_D_NONMONO

    def sample(
        self, em: Sampler, u: np.ndarray, trials: int, gen: np.random.Generator
    ) -> np.ndarray:
        return em(u, trials, gen)

    def law(self, em: Sampler, u: np.ndarray) -> dict[int, float]:
        return dict(enumerate(exponential_probabilities(u, epsilon=EPSILON).tolist()))


def test_audit_exponential_mechanism_monotone_pair() -> None:
    result = run_audit(em_sampler(monotone=True), U_D, U_D_MONO, trials=TRIALS, rng=31)
    assert 0.7 < result.epsilon_lower_bound <= EPSILON  # exact: ln(10e/(e+9)) = 0.84


def test_the_monotone_path_misused_on_a_non_monotone_pair_fails() -> None:
    """The package's own monotone=True path is the mutant's bug when misused: the claim needs it."""
    misused = run_audit(em_sampler(monotone=True), U_D, U_D_NONMONO, trials=TRIALS, rng=30)
    assert misused.epsilon_lower_bound > EPSILON


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [np.nan, 1.0], [np.inf], [-np.inf, -np.inf]])
def test_bad_utilities(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="utilities"):
        exponential_mechanism(bad, epsilon=1.0, rng=0)
