"""Noise samplers: exact distribution checks, audits of the additive mechanisms, mutations
(the audits and laws through the kit's suites, dprag_core.testing.mechanisms)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from dprag_core.mechanisms.noise import discrete_laplace, gaussian, gumbel, laplace
from dprag_core.testing.mechanisms import ExactLaw, WorstCaseAudit, chi_square_pvalue

TRIALS = 200_000
EPSILON = 1.0


def discrete_laplace_pmf(values: np.ndarray, scale: float) -> np.ndarray:
    """P[X = x] = (1 - r)/(1 + r) · r^|x| with r = exp(-1/scale)."""
    r = math.exp(-1 / scale)
    return (1 - r) / (1 + r) * r ** np.abs(values)


def test_scalar_and_array_types() -> None:
    assert isinstance(laplace(1.0, rng=0), float)
    assert isinstance(gaussian(1.0, rng=0), float)
    assert isinstance(gumbel(rng=0), float)
    assert isinstance(discrete_laplace(1.0, rng=0), int)
    assert discrete_laplace(3.0, size=(2, 5), rng=0).dtype == np.int64
    assert laplace(1.0, size=4, rng=0).shape == (4,)


def test_discrete_laplace_pmf_matches_by_chi_square() -> None:
    scale = 2.0
    samples = discrete_laplace(scale, size=TRIALS, rng=10)
    support = np.arange(-12, 13)

    def law(s: float) -> dict[int, float]:
        return dict(zip(support.tolist(), discrete_laplace_pmf(support, s).tolist(), strict=True))

    assert chi_square_pvalue(samples, law(scale)) > 1e-3
    # power: the same test rejects a 10% wrong scale
    assert chi_square_pvalue(samples, law(scale * 1.1)) < 1e-6


def test_discrete_laplace_tiny_and_huge_scales() -> None:
    assert np.all(discrete_laplace(1e-9, size=100, rng=0) == 0)
    big = discrete_laplace(1e6, size=20_000, rng=0)
    assert abs(big.std() / (math.sqrt(2) * 1e6) - 1) < 0.05  # var ≈ 2·scale² for large scale


def test_continuous_samplers_match_their_laws() -> None:
    gen = np.random.default_rng(11)
    assert (
        stats.kstest(laplace(2.0, size=50_000, rng=gen), stats.laplace(scale=2.0).cdf).pvalue > 1e-3
    )
    assert (
        stats.kstest(gaussian(3.0, size=50_000, rng=gen), stats.norm(scale=3.0).cdf).pvalue > 1e-3
    )
    assert (
        stats.kstest(gumbel(0.5, size=50_000, rng=gen), stats.gumbel_r(scale=0.5).cdf).pvalue > 1e-3
    )


# --- audits: a counting query f(D) = 0, f(D') = 1 (sensitivity 1), noise added --------------
# Each class runs the kit's suites (dprag_core.testing.mechanisms): the mechanism is a
# noise sampler, the mutant the same sampler with too little noise.

Noise = Callable[[int, np.random.Generator], np.ndarray]


class TestDiscreteLaplace(ExactLaw[float, int], WorstCaseAudit[float, int]):
    """value + DiscreteLaplace(1/ε): ε-DP; the mutant's scale is half that."""

    epsilon = EPSILON
    trials = TRIALS
    seed = 20
    power = 0.8

    def mechanism(self) -> float:
        return 1 / EPSILON

    def mutant(self) -> float:
        return 0.5 / EPSILON

    def pair(self) -> tuple[int, int]:
        return 0, 1

    def sample(self, scale: float, value: int, trials: int, gen: np.random.Generator) -> np.ndarray:
        return value + discrete_laplace(scale, size=trials, rng=gen)

    def law(self, scale: float, value: int) -> dict[int, float]:
        support = np.arange(value - 40, value + 41)
        return dict(
            zip(
                support.tolist(), discrete_laplace_pmf(support - value, scale).tolist(), strict=True
            )
        )


class _BinnedRelease(WorstCaseAudit[Noise, float]):
    """Continuous outputs binned to integers (post-processing) and clipped to [-4, 5]."""

    trials = TRIALS

    def pair(self) -> tuple[float, float]:
        return 0.0, 1.0

    def sample(
        self, noise: Noise, value: float, trials: int, gen: np.random.Generator
    ) -> np.ndarray:
        return np.clip(np.floor(value + noise(trials, gen)), -4, 5).astype(np.int64)


class TestLaplace(_BinnedRelease):
    epsilon = EPSILON
    seed = 21
    power = 0.8

    def mechanism(self) -> Noise:
        return lambda n, gen: laplace(1 / EPSILON, size=n, rng=gen)

    def mutant(self) -> Noise:
        return lambda n, gen: laplace(0.5 / EPSILON, size=n, rng=gen)


GAUSS_EPS, GAUSS_DELTA = 0.99, 1e-2
GAUSS_SIGMA = math.sqrt(2 * math.log(1.25 / GAUSS_DELTA)) / GAUSS_EPS  # Dwork & Roth Thm A.1


class TestGaussian(_BinnedRelease):
    epsilon = GAUSS_EPS
    delta = GAUSS_DELTA
    seed = 22

    def mechanism(self) -> Noise:
        return lambda n, gen: gaussian(GAUSS_SIGMA, size=n, rng=gen)

    def mutant(self) -> Noise:
        return lambda n, gen: gaussian(GAUSS_SIGMA / 4, size=n, rng=gen)


@pytest.mark.parametrize("sampler", [laplace, gaussian, gumbel, discrete_laplace])
def test_seeded_draws_are_reproducible(sampler) -> None:
    assert np.array_equal(sampler(1.0, size=5, rng=3), sampler(1.0, size=5, rng=3))
