"""SparseVoteRule (DPSparseVote's per-token rule): exact law of two steps, LD-path audit, mutations.

One step is "public token free" with probability P(SVT does not fire), else a
private selection (LimitedDomain or exponential) with ε_token/2. The SVT test
``−count + ν ≥ −τ + ρ`` with ν ~ Lap(4/ε_half), ρ ~ Lap(2/ε_half) fires when
ν − ρ ≥ count − τ; the difference of two Laplace variables (scales a ≠ b) has the
closed-form tail P(ν − ρ ≥ t) = (a²e^{−t/a} − b²e^{−t/b}) / (2(a² − b²)) for t ≥ 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import integrate, special, stats

from dprag_core.audit import audit_epsilon
from dprag_core.mechanisms.sparse_vector import AboveThresholdBatch
from dprag_core.mechanisms.sparse_vote import SparseVoteRule

RUNS = 200_000
EPS_TOKEN, DELTA_LD = 4.0, 0.1  # ε_half = 2: Gumbel scale 2/ε_half = 1 for LimitedDomain
HALF = EPS_TOKEN / 2
QUERY_SCALE, THRESHOLD_SCALE = 4 / HALF, 2 / HALF
TAU, M, PUBLIC = 2.0, 4, 0
# Two steps over tokens [public, x, y] (m = 4 voters): the public token has 1 vote, then 3.
STEP_COUNTS = (np.array([1, 3, 0]), np.array([3, 1, 0]))


def fire_probability(count: float) -> float:
    """P(SVT fires) on a fresh threshold: P(ν − ρ ≥ count − τ), closed form (module docstring)."""
    a, b = QUERY_SCALE, THRESHOLD_SCALE

    def tail(t: float) -> float:
        return (a * a * math.exp(-t / a) - b * b * math.exp(-t / b)) / (2 * (a * a - b * b))

    t = count - TAU
    return tail(t) if t >= 0 else 1.0 - tail(-t)


def selection_law(counts: np.ndarray, selection: str) -> np.ndarray:
    """Exact P(⊥), P(token 0), P(token 1), … of one private selection with ε_half."""
    if selection == "exponential":  # softmax(ε_half · count / 2), no ⊥
        return np.append(0.0, special.softmax(HALF * counts / 2)).astype(np.float64)
    # LimitedDomain, k̄ = m ≥ vocabulary: every token is a candidate, h[k̄+1] = 0, and
    # h⊥ = 0 + 2 + (2/ε_half)·ln(min(2, k̄)/δ) (not monotone, two counts change).
    scale = 2 / HALF
    h_bottom = 2 + scale * math.log(min(2, M) / DELTA_LD)
    return np.asarray(special.softmax(np.append(h_bottom, counts) / scale), dtype=np.float64)


def step_outcomes(counts: np.ndarray, selection: str) -> np.ndarray:
    """Outcome law of a step on a fresh threshold: [free, spend→⊥, spend→token 0, …]."""
    fire = fire_probability(counts[PUBLIC])
    return np.append(1 - fire, fire * selection_law(counts, selection))


def two_step_law(selection: str) -> np.ndarray:
    """Joint law of (step 1 outcome, step 2 outcome), flattened row-major.

    After a spend the threshold is re-drawn (step 2 is fresh); after a free step it
    is kept, so "free, then free/spend" integrates over the shared threshold noise ρ.
    """
    first, second = (step_outcomes(c, selection) for c in STEP_COUNTS)
    law = np.outer(first, second)
    threshold = stats.laplace(scale=THRESHOLD_SCALE)
    query = stats.laplace(scale=QUERY_SCALE)

    def free_free(rho: float) -> float:
        below = [query.cdf(c[PUBLIC] - TAU + rho) for c in STEP_COUNTS]
        return float(threshold.pdf(rho) * below[0] * below[1])

    both_free, _ = integrate.quad(free_free, -np.inf, np.inf, epsabs=1e-12)
    free_then_spend = (1 - fire_probability(STEP_COUNTS[0][PUBLIC])) - both_free
    law[0] = np.append(both_free, free_then_spend * selection_law(STEP_COUNTS[1], selection))
    assert abs(law.sum() - 1) < 1e-9
    return law.ravel()


def rule(cls: type[SparseVoteRule], selection: str, **kw: Any) -> SparseVoteRule:
    return cls(
        epsilon_token=kw.pop("epsilon_token", EPS_TOKEN),
        delta_token=kw.pop("delta_token", 0.0 if selection == "exponential" else DELTA_LD),
        threshold=kw.pop("threshold", TAU),
        m=kw.pop("m", M),
        selection=selection,  # type: ignore[arg-type]
        runs=RUNS,
        **kw,
    )


def observed_two_steps(cls: type[SparseVoteRule], selection: str, seed: int) -> np.ndarray:
    """Counts of each joint outcome over RUNS runs of the production rule."""
    r = rule(cls, selection, rng=seed)
    codes = []
    for counts in STEP_COUNTS:
        tokens, spent = r.decide(counts, public=PUBLIC)
        codes.append(np.where(spent, tokens + 2, 0))  # 0 free, 1 ⊥, 2 + token
    width = STEP_COUNTS[0].size + 2
    return np.bincount(codes[0] * width + codes[1], minlength=width * width)


def chisquare_pvalue(observed: np.ndarray, law: np.ndarray) -> float:
    """Pearson's test of counts against a law; outcomes expected < 5 times are pooled."""
    expected = law * observed.sum()
    rare = expected < 5
    pooled_obs = np.append(observed[~rare], observed[rare].sum())
    pooled_exp = np.append(expected[~rare], expected[rare].sum())
    keep = pooled_exp > 0
    return float(stats.chisquare(pooled_obs[keep], pooled_exp[keep]).pvalue)


class _ThresholdRedrawnEveryStep(SparseVoteRule):
    """Broken: a fresh SVT per step (free steps would then each cost a run)."""

    def decide(self, counts: Any, *, public: int) -> tuple[np.ndarray, np.ndarray]:
        self._svt = AboveThresholdBatch(
            threshold=self._svt._threshold,
            epsilon=self._half,
            runs=self._runs,
            rng=self._rng,
        )
        return super().decide(counts, public=public)


@pytest.mark.parametrize("selection", ["limited_domain", "exponential"])
def test_two_steps_match_the_exact_law(selection: str) -> None:
    law = two_step_law(selection)
    observed = observed_two_steps(SparseVoteRule, selection, seed=60)
    assert observed[law == 0].sum() == 0  # exponential: ⊥ has probability 0
    assert chisquare_pvalue(observed, law) > 1e-3


@pytest.mark.parametrize("selection", ["limited_domain", "exponential"])
def test_mutation_threshold_redrawn_every_step_is_rejected(selection: str) -> None:
    law = two_step_law(selection)
    observed = observed_two_steps(_ThresholdRedrawnEveryStep, selection, seed=60)
    assert chisquare_pvalue(observed, law) < 1e-6


# LimitedDomain-path audit of one spend (claim: (ε_token, δ_token)). One voter of m = 76
# moves between the public token and token x: before the spend step it votes public in D
# (SVT stays below) and x in D'; at the spend step the reverse. At that step the public
# token (40 or 41 votes) dominates LimitedDomain's normaliser above h⊥ ≈ 28, so the
# witness "x at the spend step" gains from both the SVT run and the selection.
AUDIT_RUNS, AUDIT_STEPS, AUDIT_EPS, AUDIT_DELTA = 400_000, 6, 2.0, 1e-6
LD_M, LD_PUBLIC_VOTES = 76, 40


def _ld_pair() -> tuple[list[np.ndarray], list[np.ndarray]]:
    before = np.array([LD_PUBLIC_VOTES + 1, LD_M - LD_PUBLIC_VOTES - 1])
    at = np.array([LD_PUBLIC_VOTES, LD_M - LD_PUBLIC_VOTES])
    steps = AUDIT_STEPS - 1
    return [before] * steps + [at], [at] * steps + [before]


def _first_spend(histograms: list[np.ndarray], cls: type[SparseVoteRule], seed: int) -> np.ndarray:
    """Per run: 100·(step of the first spend) + token + 1 (⊥ → 100·step), or -1 for never."""
    r = cls(
        epsilon_token=AUDIT_EPS,
        delta_token=AUDIT_DELTA,
        threshold=float(LD_PUBLIC_VOTES),
        m=LD_M,
        selection="limited_domain",
        runs=AUDIT_RUNS,
        rng=seed,
    )
    out = np.full(AUDIT_RUNS, -1, dtype=np.int64)
    done = np.zeros(AUDIT_RUNS, dtype=bool)
    for step, counts in enumerate(histograms):
        tokens, spent = r.decide(counts, public=PUBLIC)
        new = spent & ~done
        out[new] = 100 * step + tokens[new] + 1
        done |= spent
    return out


def _audit_ld(cls: type[SparseVoteRule]) -> Any:
    d, d_prime = _ld_pair()
    return audit_epsilon(
        _first_spend(d, cls, 11), _first_spend(d_prime, cls, 12), delta=AUDIT_DELTA
    )


class _HalfSensitivitySVT(SparseVoteRule):
    """Broken: the SVT is calibrated to sensitivity 0.5 (its run then costs ε_token, not ε/2)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._svt = AboveThresholdBatch(
            threshold=-kw["threshold"],
            epsilon=self._half,
            sensitivity=0.5,
            runs=self._runs,
            rng=self._rng,
        )


def test_limited_domain_spend_within_claim() -> None:
    result = _audit_ld(SparseVoteRule)
    witness = 100 * (AUDIT_STEPS - 1) + 1 + 1  # token x at the spend step
    assert result.worst_output == witness, result
    assert 1.0 < result.epsilon_lower_bound <= AUDIT_EPS, result


def test_mutation_half_svt_sensitivity_exceeds_claim() -> None:
    result = _audit_ld(_HalfSensitivitySVT)
    assert result.epsilon_lower_bound > AUDIT_EPS, result
