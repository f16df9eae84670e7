"""AboveThreshold (SVT): exact first-above law, audit on the worst-case pair, mutations."""

from __future__ import annotations

import numpy as np
from scipy import stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms.sparse_vector import AboveThreshold, AboveThresholdBatch

TRIALS = 200_000
EPSILON = 1.0
THRESHOLD = 1.0
# Worst-case pair (each query has sensitivity 1): the witness is "first above at index 4".
Q_D = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
Q_D_PRIME = np.array([1.0, 1.0, 1.0, 1.0, 0.0])


def first_above(answers: np.ndarray) -> np.ndarray:
    """Index of the first "above" per run (rows = runs), -1 when none."""
    return np.where(answers.any(axis=1), answers.argmax(axis=1), -1)


def svt_sampler(queries: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
    svt = AboveThresholdBatch(
        threshold=THRESHOLD, epsilon=EPSILON, sensitivity=1.0, runs=n, rng=gen
    )
    return first_above(np.stack([svt.test(q) for q in queries], axis=1))


def first_above_law(
    queries: np.ndarray, *, threshold_scale: float, query_scale: float
) -> np.ndarray:
    """Exact P[first above = i] (last entry: none), by integrating over the threshold noise."""
    t = np.linspace(THRESHOLD - 80 * threshold_scale, THRESHOLD + 80 * threshold_scale, 100_001)
    density = stats.laplace(loc=THRESHOLD, scale=threshold_scale).pdf(t)
    all_below, law = np.ones_like(t), []
    for q in queries:
        below = stats.laplace(loc=q, scale=query_scale).cdf(t)  # q + ν < t
        law.append(np.trapezoid(density * all_below * (1 - below), t))
        all_below = all_below * below
    law.append(np.trapezoid(density * all_below, t))
    assert abs(sum(law) - 1) < 1e-5  # integration accuracy
    return np.array(law) / sum(law)


def test_first_above_law_matches_exact_integral() -> None:
    draws = svt_sampler(Q_D, TRIALS, np.random.default_rng(50))
    law = first_above_law(Q_D, threshold_scale=2 / EPSILON, query_scale=4 / EPSILON)
    observed = [np.sum(draws == i) for i in range(len(Q_D))] + [np.sum(draws == -1)]
    assert stats.chisquare(observed, law * TRIALS).pvalue > 1e-3
    # power: the law with half the query noise is rejected
    wrong = first_above_law(Q_D, threshold_scale=2 / EPSILON, query_scale=2 / EPSILON)
    assert stats.chisquare(observed, wrong * TRIALS).pvalue < 1e-6


def test_threshold_is_redrawn_after_above_only() -> None:
    svt = AboveThresholdBatch(
        threshold=0.0, epsilon=1.0, sensitivity=1.0, runs=4, rng=np.random.default_rng(0)
    )
    before = svt._noisy_threshold.copy()
    assert not svt.test(-1e6).any()
    assert np.array_equal(svt._noisy_threshold, before)  # "below" keeps the threshold
    assert svt.test(1e6).all()
    assert not np.any(svt._noisy_threshold == before)  # every "above" re-draws it
    assert svt.above_counts.tolist() == [1, 1, 1, 1]


def test_public_class_counts_and_hides_state() -> None:
    svt = AboveThreshold(threshold=3.0, epsilon=0.5, sensitivity=2.0, rng=1)
    answers = [svt.test(v) for v in (-1e6, 1e6, -1e6, 1e6, 1e6)]
    assert answers == [False, True, False, True, True]
    assert svt.above_count == 3
    noisy = float(svt._core._noisy_threshold[0])
    assert repr(noisy) not in repr(svt) and "above_count=3" in repr(svt)


def test_audit_above_threshold() -> None:
    result = run_audit(svt_sampler, Q_D, Q_D_PRIME, trials=TRIALS, rng=51)
    assert result.epsilon_lower_bound <= EPSILON  # exact worst ratio: 0.77


def broken_sampler(*, query_scale: float, reuse_query_noise: bool):
    """MUTATIONS: smaller query noise, or one query-noise draw reused for every query."""

    def sample(queries: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        noisy_threshold = THRESHOLD + gen.laplace(0, 2 / EPSILON, n)
        shared = gen.laplace(0, query_scale, n)
        answers = []
        for q in queries:
            noise = shared if reuse_query_noise else gen.laplace(0, query_scale, n)
            answers.append(q + noise >= noisy_threshold)
        return first_above(np.stack(answers, axis=1))

    return sample


def test_mutation_half_query_noise_fails() -> None:
    broken = broken_sampler(query_scale=2 / EPSILON, reuse_query_noise=False)
    result = run_audit(broken, Q_D, Q_D_PRIME, trials=TRIALS, rng=51)
    assert result.epsilon_lower_bound > EPSILON  # exact: 1.28


def test_mutation_reused_query_noise_fails() -> None:
    broken = broken_sampler(query_scale=4 / EPSILON, reuse_query_noise=True)
    result = run_audit(broken, Q_D, Q_D_PRIME, trials=TRIALS, rng=51)
    assert result.epsilon_lower_bound > EPSILON  # "first above at 4" is impossible on D'
