"""Noise samplers: exact distribution checks, audits of the additive mechanisms, mutations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms.noise import discrete_laplace, gaussian, gumbel, laplace

TRIALS = 200_000
EPSILON = 1.0


def discrete_laplace_pmf(values: np.ndarray, scale: float) -> np.ndarray:
    """P[X = x] = (1 - r)/(1 + r) · r^|x| with r = exp(-1/scale)."""
    r = math.exp(-1 / scale)
    return (1 - r) / (1 + r) * r ** np.abs(values)


def chi_square_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """Goodness of fit on ``support``, with everything outside it pooled into one tail bin."""
    counts = np.array([(samples == v).sum() for v in support] + [0])
    counts[-1] = samples.size - counts[:-1].sum()
    expected = np.append(pmf, max(1.0 - pmf.sum(), 0.0)) * samples.size
    return float(stats.chisquare(counts, expected).pvalue)


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
    assert chi_square_pvalue(samples, support, discrete_laplace_pmf(support, scale)) > 1e-3
    # power: the same test rejects a 10% wrong scale
    wrong = discrete_laplace_pmf(support, scale * 1.1)
    assert chi_square_pvalue(samples, support, wrong) < 1e-6


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


def discrete_release(scale: float):
    def sample(value: int, n: int, gen: np.random.Generator) -> np.ndarray:
        return value + discrete_laplace(scale, size=n, rng=gen)

    return sample


def binned_release(noise):
    """Continuous outputs binned to integers (post-processing) and clipped to [-4, 5]."""

    def sample(value: float, n: int, gen: np.random.Generator) -> np.ndarray:
        return np.clip(np.floor(value + noise(n, gen)), -4, 5).astype(np.int64)

    return sample


def test_audit_discrete_laplace() -> None:
    result = run_audit(discrete_release(1 / EPSILON), 0, 1, trials=TRIALS, rng=20)
    assert 0.8 * EPSILON < result.epsilon_lower_bound <= EPSILON


def test_mutation_discrete_laplace_half_scale_fails() -> None:
    result = run_audit(discrete_release(0.5 / EPSILON), 0, 1, trials=TRIALS, rng=20)
    assert result.epsilon_lower_bound > EPSILON


def test_audit_laplace() -> None:
    sampler = binned_release(lambda n, gen: laplace(1 / EPSILON, size=n, rng=gen))
    result = run_audit(sampler, 0.0, 1.0, trials=TRIALS, rng=21)
    assert 0.8 * EPSILON < result.epsilon_lower_bound <= EPSILON


def test_mutation_laplace_half_scale_fails() -> None:
    sampler = binned_release(lambda n, gen: laplace(0.5 / EPSILON, size=n, rng=gen))
    result = run_audit(sampler, 0.0, 1.0, trials=TRIALS, rng=21)
    assert result.epsilon_lower_bound > EPSILON


GAUSS_EPS, GAUSS_DELTA = 0.99, 1e-2
GAUSS_SIGMA = math.sqrt(2 * math.log(1.25 / GAUSS_DELTA)) / GAUSS_EPS  # Dwork & Roth Thm A.1


def test_audit_gaussian() -> None:
    sampler = binned_release(lambda n, gen: gaussian(GAUSS_SIGMA, size=n, rng=gen))
    result = run_audit(sampler, 0.0, 1.0, trials=TRIALS, delta=GAUSS_DELTA, rng=22)
    assert result.epsilon_lower_bound <= GAUSS_EPS


def test_mutation_gaussian_quarter_sigma_fails() -> None:
    sampler = binned_release(lambda n, gen: gaussian(GAUSS_SIGMA / 4, size=n, rng=gen))
    result = run_audit(sampler, 0.0, 1.0, trials=TRIALS, delta=GAUSS_DELTA, rng=22)
    assert result.epsilon_lower_bound > GAUSS_EPS


@pytest.mark.parametrize("sampler", [laplace, gaussian, gumbel, discrete_laplace])
def test_seeded_draws_are_reproducible(sampler) -> None:
    assert np.array_equal(sampler(1.0, size=5, rng=3), sampler(1.0, size=5, rng=3))
