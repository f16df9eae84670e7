"""DP-ICL token step: exact softmax(εU/(2C)), clipping, full vocabulary, audits and mutations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from dprag_core.audit import run_audit
from dprag_core.mechanisms import icl
from dprag_core.mechanisms.exponential import gumbel_max
from dprag_core.mechanisms.icl import (
    clipped_contributions,
    dp_icl_logits,
    dp_icl_probabilities,
    dp_icl_token,
    icl_utility,
)

TRIALS = 100_000
EPSILON = 1.0
CLIP = 0.1


def _reference_utility(lp: np.ndarray, pub: np.ndarray, alpha: float, clip: float, theta: float):  # type: ignore[no-untyped-def]
    """The docs/design.md §4 formula written out row by row."""
    total = theta * pub
    for row in lp:
        n = (np.exp(alpha * (row - row.max())) - 1.0) / alpha
        c = n - (n.max() + n.min()) / 2.0
        c = c * min(1.0, clip / np.abs(c).max()) if np.abs(c).max() > 0 else c
        total = total + c
    return total


def test_probabilities_are_softmax_of_the_formula() -> None:
    rng = np.random.default_rng(0)
    lp = np.log(rng.dirichlet(np.ones(7), size=4))
    pub = np.log(rng.dirichlet(np.ones(7)))
    for eps, alpha, clip, theta in [
        (1.0, 1.0, 0.2, 0.5),
        (3.0, 0.3, 1.0, 0.0),
        (0.2, 5.0, 0.05, 2.0),
    ]:
        u = _reference_utility(lp, pub, alpha, clip, theta)
        np.testing.assert_allclose(
            icl_utility(lp, pub, alpha=alpha, clip=clip, theta=theta), u, rtol=1e-10
        )
        expected = special.softmax(eps * u / (2 * clip))
        got = dp_icl_probabilities(lp, pub, epsilon=eps, alpha=alpha, clip=clip, theta=theta)
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_sampler_matches_probabilities() -> None:
    rng = np.random.default_rng(1)
    lp = np.log(rng.dirichlet(np.ones(5), size=3))
    pub = np.log(rng.dirichlet(np.ones(5)))
    kw = {"epsilon": 2.0, "alpha": 1.0, "clip": 0.3, "theta": 1.0}
    probs = dp_icl_probabilities(lp, pub, **kw)
    draws = gumbel_max(dp_icl_logits(lp, pub, **kw), size=TRIALS, rng=np.random.default_rng(2))
    assert stats.chisquare(np.bincount(draws, minlength=5), probs * TRIALS).pvalue > 1e-4


def test_clipping_bounds_every_entry() -> None:
    rng = np.random.default_rng(3)
    lp = np.log(rng.dirichlet(np.full(50, 0.1), size=20))
    lp[0, :10] = -np.inf
    for alpha in (0.0, 0.5, 1.0, 30.0):
        c = clipped_contributions(lp, alpha=alpha, clip=0.25)
        assert np.all(np.isfinite(c)) and np.abs(c).max() <= 0.25
        # centred: max = -min on every clipped row
        np.testing.assert_allclose(c.max(axis=1), -c.min(axis=1), atol=1e-12)
    # alpha = 1: n = p / p_max - 1
    row = np.log([[0.5, 0.25, 0.25]])
    np.testing.assert_allclose(
        clipped_contributions(row, alpha=1.0, clip=10.0), [[0.25, -0.25, -0.25]]
    )


def test_full_vocabulary_and_public_minus_inf() -> None:
    rng = np.random.default_rng(4)
    lp = np.log(rng.dirichlet(np.ones(200), size=3))
    pub = np.log(rng.dirichlet(np.ones(200)))
    probs = dp_icl_probabilities(lp, pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=1.0)
    assert np.all(probs > 0)  # no top-k/top-p warper: every token keeps positive mass
    pub[:150] = -np.inf  # tokens the public model forbids (e.g. padded vocabulary rows)
    probs = dp_icl_probabilities(lp, pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=1.0)
    assert np.all(probs[:150] == 0) and probs.sum() == pytest.approx(1.0)
    assert all(
        dp_icl_token(lp, pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=1.0, rng=s) >= 150
        for s in range(100)
    )


def test_no_voters_is_public_prior_only() -> None:
    pub = np.log([0.7, 0.2, 0.1])
    probs = dp_icl_probabilities(np.zeros((0, 3)), pub, epsilon=2.0, alpha=1.0, clip=1.0, theta=1.0)
    np.testing.assert_allclose(probs, [0.7, 0.2, 0.1])  # ε·θ/(2C) = 1: temperature 1


def test_large_values_do_not_overflow() -> None:
    lp = np.log(np.array([[0.999, 0.0005, 0.0005]]))
    pub = np.array([0.0, -1e6, -1e6])
    probs = dp_icl_probabilities(lp, pub, epsilon=1000.0, alpha=1.0, clip=0.01, theta=10.0)
    assert np.all(np.isfinite(probs)) and probs[0] == 1.0


def test_bad_input() -> None:
    pub = np.zeros(3)
    with pytest.raises(ValueError, match="shape"):
        dp_icl_token(np.zeros((2, 4)), pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=1.0)
    with pytest.raises(ValueError, match="NaN"):
        dp_icl_token(np.full((1, 3), np.nan), pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=1.0)
    with pytest.raises(ValueError, match="clip"):
        dp_icl_token(np.zeros((1, 3)), pub, epsilon=1.0, alpha=1.0, clip=0.0, theta=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        dp_icl_token(np.zeros((1, 3)), pub, epsilon=-1.0, alpha=1.0, clip=1.0, theta=1.0)
    with pytest.raises(ValueError, match="theta"):
        dp_icl_token(np.zeros((1, 3)), pub, epsilon=1.0, alpha=1.0, clip=1.0, theta=-1.0)


# --- audits -----------------------------------------------------------------------------
# D: one row mildly against token 0 (inside the clip); D' adds a row strongly for token 0
# (clipped to [+C, −C, −C]). Token 0 gains ε/2 directly and ε/2 through the normaliser.
MILD = np.log(np.array([0.9, 1.0, 1.0]) / 2.9)
STRONG = np.log(np.array([1.0, 0.5, 0.5]) / 2.0)
ROWS_D = np.stack([MILD])
ROWS_D_PRIME = np.stack([MILD, STRONG])
PUBLIC = np.log(np.full(3, 1 / 3))


def _token_sampler(rows: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
    logits = icl.dp_icl_logits(rows, PUBLIC, epsilon=EPSILON, alpha=1.0, clip=CLIP, theta=0.0)
    return icl.gumbel_max(logits, size=n, rng=gen)


def test_exact_loss_within_claim() -> None:
    kw = {"epsilon": EPSILON, "alpha": 1.0, "clip": CLIP, "theta": 0.0}
    p = dp_icl_probabilities(ROWS_D, PUBLIC, **kw)
    q = dp_icl_probabilities(ROWS_D_PRIME, PUBLIC, **kw)
    assert 0.6 < float(np.max(np.abs(np.log(p / q)))) <= EPSILON


def test_token_audit() -> None:
    result = run_audit(_token_sampler, ROWS_D, ROWS_D_PRIME, trials=TRIALS, rng=5)
    assert 0.4 < result.epsilon_lower_bound <= EPSILON


def test_mutation_without_clipping_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = icl.clipped_contributions
    monkeypatch.setattr(
        icl, "clipped_contributions", lambda lp, *, alpha, clip: real(lp, alpha=alpha, clip=1e9)
    )
    result = run_audit(_token_sampler, ROWS_D, ROWS_D_PRIME, trials=TRIALS, rng=6)
    assert result.epsilon_lower_bound > EPSILON


def test_mutation_top_k_warper_after_dp_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reference code's bug: HF's default top_k warper runs after the DP logits, so the
    # support becomes data-dependent (here top-2 of 3 tokens): token 0 is impossible under D.
    real = icl.gumbel_max

    def warped(logits: np.ndarray, *, size: int, rng: np.random.Generator) -> np.ndarray:
        keep = np.argsort(-logits, kind="stable")[:2]
        masked = np.full_like(logits, -np.inf)
        masked[keep] = logits[keep]
        return real(masked, size=size, rng=rng)

    monkeypatch.setattr(icl, "gumbel_max", warped)
    result = run_audit(_token_sampler, ROWS_D, ROWS_D_PRIME, trials=TRIALS, rng=7)
    assert result.epsilon_lower_bound > EPSILON
