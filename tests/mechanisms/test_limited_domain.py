"""LimitedDomain top-1: exact threshold and distribution, audits on worst-case pairs, mutations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms.limited_domain import (
    BOTTOM,
    LimitedDomainCandidates,
    _top_k,
    limited_domain_candidates,
    limited_domain_sample,
    limited_domain_top1,
)

TRIALS = 200_000
EPSILON, DELTA = 1.0, 0.05  # a large δ makes the δ-part of the claim testable


def test_threshold_formula_monotone() -> None:
    counts = [9, 0, 4, 7, 4, 1]
    prep = limited_domain_candidates(
        counts, epsilon=2.0, delta=1e-5, k_bar=3, max_changed=2, monotone=True
    )
    assert sorted(prep.indices.tolist()) == [0, 2, 3]  # 9, 7, and the lower-index 4
    assert prep.h_bottom == 4 + 1 + math.log(2 / 1e-5) / 2.0
    assert prep.scale == 0.5


def test_threshold_formula_non_monotone_and_padding() -> None:
    prep = limited_domain_candidates(
        [3, 5], epsilon=2.0, delta=1e-3, k_bar=4, max_changed=None, monotone=False
    )
    assert sorted(prep.indices.tolist()) == [0, 1]  # fewer than k̄ items: all of them, h[k̄+1] = 0
    assert prep.h_bottom == 0 + 2 + (2 / 2.0) * math.log(4 / 1e-3)
    assert prep.scale == 1.0


def test_top_k_ties_go_to_lower_index() -> None:
    idx, nxt = _top_k(np.array([1.0, 3.0, 3.0, 3.0, 0.0]), 2)
    assert idx.tolist() == [1, 2] and nxt == 3.0


def test_vocab_sized_histogram() -> None:
    counts = np.zeros(50_000)
    counts[[17, 31_337, 49_999]] = [3, 40, 2]
    assert limited_domain_top1(counts, epsilon=1.0, delta=1e-5, k_bar=40, rng=0) == 31_337
    assert limited_domain_top1(np.zeros(50_000), epsilon=1.0, delta=1e-5, k_bar=40, rng=0) is None


def test_distribution_is_gumbel_max_over_counts_and_bottom() -> None:
    counts = np.array([2.0, 3.0, 0.0])
    prep = limited_domain_candidates(
        counts, epsilon=1.0, delta=0.3, k_bar=3, max_changed=1, monotone=True
    )
    draws = limited_domain_sample(prep, size=TRIALS, rng=np.random.default_rng(40))
    logits = np.append(prep.counts, prep.h_bottom) / prep.scale
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    observed = [np.sum(draws == i) for i in prep.indices] + [np.sum(draws == BOTTOM)]
    assert stats.chisquare(observed, probs * TRIALS).pvalue > 1e-3


def ld_sampler(*, monotone: bool, epsilon: float = EPSILON, k_bar: int = 1):
    def sample(counts: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        prep = limited_domain_candidates(
            counts, epsilon=epsilon, delta=DELTA, k_bar=k_bar, max_changed=None, monotone=monotone
        )
        return limited_domain_sample(prep, size=n, rng=gen)

    return sample


def broken_ld_sampler(*, offset: float, log_scale: float, scale: float):
    """MUTATION: h⊥ = h[k̄+1] + offset + log_scale·ln(1/δ) with k̄ = 1 and Gumbel(scale) noise."""

    def sample(counts: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        good = limited_domain_candidates(
            counts, epsilon=1.0, delta=DELTA, k_bar=1, max_changed=None, monotone=True
        )
        h_bottom = float(np.sort(counts)[-2]) + offset + log_scale * math.log(1 / DELTA)
        broken = LimitedDomainCandidates(good.indices, good.counts, h_bottom, scale)
        return limited_domain_sample(broken, size=n, rng=gen)

    return sample


# Monotone pair (one unit adds a vote to item 0): D = [0, 1], D' = [1, 1]; with k̄ = 1
# item 1 is the top of D but not of D' (tie to the lower index): only δ protects it.
D_MONO, D_MONO_PRIME = np.array([0.0, 1.0]), np.array([1.0, 1.0])
# Non-monotone pair (one vote moves from item 1 to item 0): item 1 exceeds h[k̄+1] by 2.
D_SUB, D_SUB_PRIME = np.array([0.0, 2.0]), np.array([1.0, 1.0])
EPS_SUB = 2.0


def test_audit_limited_domain_monotone() -> None:
    result = run_audit(
        ld_sampler(monotone=True), D_MONO, D_MONO_PRIME, trials=TRIALS, delta=DELTA, rng=41
    )
    assert result.epsilon_lower_bound <= EPSILON


def test_mutation_limited_domain_without_threshold_term_fails() -> None:
    broken = broken_ld_sampler(offset=0.0, log_scale=0.0, scale=1 / EPSILON)  # h⊥ = h[k̄+1]
    result = run_audit(broken, D_MONO, D_MONO_PRIME, trials=TRIALS, delta=DELTA, rng=41)
    assert result.epsilon_lower_bound > EPSILON


def test_audit_limited_domain_non_monotone() -> None:
    sampler = ld_sampler(monotone=False, epsilon=EPS_SUB)
    result = run_audit(sampler, D_SUB, D_SUB_PRIME, trials=TRIALS, delta=DELTA, rng=42)
    assert result.epsilon_lower_bound <= EPS_SUB


@pytest.mark.parametrize(
    ("offset", "log_scale"),
    [(1.0, 1 / EPS_SUB), (1.0, 2 / EPS_SUB)],
    ids=["monotone-formula-with-doubled-noise", "plus-one-offset-only"],
)
def test_mutation_non_monotone_with_plus_one_offset_fails(offset: float, log_scale: float) -> None:
    broken = broken_ld_sampler(offset=offset, log_scale=log_scale, scale=2 / EPS_SUB)
    result = run_audit(broken, D_SUB, D_SUB_PRIME, trials=TRIALS, delta=DELTA, rng=42)
    assert result.epsilon_lower_bound > EPS_SUB


# ε-part: item 0 stays the top-1 while one vote moves from it to item 1 (which sets h[k̄+1]);
# the witness is ⊥, whose odds against item 0 move by two counts.
D_EPS, D_EPS_PRIME = np.array([11.0, 0.0]), np.array([10.0, 1.0])
DELTA_EPS = 1e-3


def eps_part_sampler(*, monotone: bool):
    def sample(counts: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        prep = limited_domain_candidates(
            counts, epsilon=EPSILON, delta=DELTA_EPS, k_bar=1, max_changed=2, monotone=monotone
        )
        return limited_domain_sample(prep, size=n, rng=gen)

    return sample


def test_audit_limited_domain_epsilon_part() -> None:
    sampler = eps_part_sampler(monotone=False)
    result = run_audit(sampler, D_EPS, D_EPS_PRIME, trials=TRIALS, delta=DELTA_EPS, rng=43)
    assert result.epsilon_lower_bound <= EPSILON


def test_mutation_monotone_noise_on_non_monotone_pair_fails() -> None:
    sampler = eps_part_sampler(monotone=True)  # Gumbel(1/ε) where 2/ε is needed
    result = run_audit(sampler, D_EPS, D_EPS_PRIME, trials=TRIALS, delta=DELTA_EPS, rng=43)
    assert result.epsilon_lower_bound > EPSILON
