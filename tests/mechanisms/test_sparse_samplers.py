"""The O(m) samplers against the O(V) ones: exact distributions, seeded identity, audits.

- Exponential mechanism: the sparse sampler's computed probabilities equal the
  dense softmax exactly (to float precision); its draws match the dense exact
  distribution (chi-square) and the dense sampler's draws (total variation);
  a variant that forgets the ln n₀ shift of the zero block fails the same test.
- LimitedDomain: the sparse candidates are *identical* to the dense ones (same
  indices in the same order, counts, h⊥), so seeded draws are identical too.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

import dprag_core.mechanisms.sparse_exponential as sparse_em
from dprag_core.audit import run_audit
from dprag_core.mechanisms.exponential import (
    exponential_logits,
    exponential_probabilities,
    gumbel_max,
)
from dprag_core.mechanisms.histogram import SparseCounts, missing_positions
from dprag_core.mechanisms.limited_domain import (
    limited_domain_candidates,
    limited_domain_candidates_sparse,
    limited_domain_sample,
)
from dprag_core.mechanisms.sparse_exponential import (
    sparse_exponential_probabilities,
    sparse_exponential_sample,
)

DRAWS = 200_000


def _random_hist(gen: np.random.Generator, size: int, voters: int) -> SparseCounts:
    return SparseCounts.from_votes(gen.integers(0, min(size, 3 * voters), voters), size=size)


def _dense_probs(hist: SparseCounts, domain: np.ndarray | None, **kw: float) -> np.ndarray:
    u = hist.dense().astype(np.float64)
    if domain is not None:
        outside = np.ones(hist.size, dtype=bool)
        outside[domain] = False
        u[outside] = -np.inf
    return exponential_probabilities(u, **kw)


def _expand(hist: SparseCounts, domain: np.ndarray | None, **kw: float) -> np.ndarray:
    items, probs, each_zero = sparse_exponential_probabilities(hist, domain=domain, **kw)
    out = np.zeros(hist.size)
    inside = np.arange(hist.size) if domain is None else domain
    out[inside] = each_zero
    out[items] = probs
    return out


def test_missing_positions_matches_brute_force() -> None:
    gen = np.random.default_rng(0)
    for _ in range(200):
        taken = np.unique(gen.integers(0, 30, gen.integers(0, 12)))
        free = [x for x in range(60) if x not in set(taken.tolist())]
        ranks = np.arange(20)
        assert missing_positions(taken, ranks).tolist() == free[:20]


def test_sparse_counts_round_trip_and_validation() -> None:
    h = SparseCounts.from_votes([4, 1, 4, 4], size=6)
    assert h.dense().tolist() == [0, 1, 0, 0, 3, 0] and h.nnz == 2
    back = SparseCounts.from_dense(h.dense())
    assert back.indices.tolist() == [1, 4] and back.counts.tolist() == [1, 3] and back.size == 6
    assert h.count(4) == 3 and h.count(0) == 0
    with pytest.raises(ValueError, match=r"votes must be item ids in \[0, 6\)"):
        SparseCounts.from_votes([6], size=6)
    with pytest.raises(ValueError, match="counts must be finite non-negative integers"):
        SparseCounts.from_dense([1.5, 0.0])
    with pytest.raises(ValueError, match="indices must be sorted"):
        SparseCounts(np.array([3, 1]), np.array([1, 1]), 5)
    with pytest.raises(ValueError, match="counts must be >= 1"):
        SparseCounts(np.array([1]), np.array([0]), 5)
    with pytest.raises(ValueError, match="size must be"):
        SparseCounts.from_votes([], size=0)
    with pytest.raises(ValueError, match=r"index must be in \[0, 6\)"):
        h.count(6)


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("with_domain", [False, True])
def test_exponential_probabilities_equal_dense(monotone: bool, with_domain: bool) -> None:
    gen = np.random.default_rng(1)
    for _ in range(100):
        size = int(gen.integers(1, 60))
        hist = _random_hist(gen, size, int(gen.integers(0, 12)))
        domain = None
        if with_domain:
            domain = np.flatnonzero(gen.random(size) < 0.7)
            if domain.size == 0:
                continue
        kw = {"epsilon": float(gen.uniform(0.1, 5)), "sensitivity": float(gen.uniform(0.5, 2))}
        dense = _dense_probs(hist, domain, monotone=monotone, **kw)
        np.testing.assert_allclose(
            _expand(hist, domain, monotone=monotone, **kw), dense, rtol=1e-12, atol=1e-300
        )


def test_sampler_matches_exact_dense_distribution() -> None:
    """Chi-square of the O(m) sampler's draws against the dense softmax, every token."""
    hist = SparseCounts.from_votes([3, 3, 3, 7, 7, 11], size=20)
    draws = sparse_exponential_sample(hist, epsilon=1.5, size=DRAWS, rng=2)
    exact = exponential_probabilities(hist.dense(), epsilon=1.5)
    observed = np.bincount(draws, minlength=20)
    assert stats.chisquare(observed, exact * DRAWS).pvalue > 1e-4


def test_sampler_matches_dense_sampler() -> None:
    """Two-sample comparison with the O(V) Gumbel-max sampler: chi-square and TV distance."""
    hist = SparseCounts.from_votes([0, 5, 5, 9], size=30)
    domain = np.arange(2, 30)  # 0 and 1 forbidden (e.g. padded rows)
    sparse = sparse_exponential_sample(hist, epsilon=2.0, size=DRAWS, domain=domain, rng=3)
    u = hist.dense().astype(np.float64)
    u[:2] = -np.inf
    dense = gumbel_max(exponential_logits(u, epsilon=2.0), size=DRAWS, rng=4)
    a, b = np.bincount(sparse, minlength=30), np.bincount(dense, minlength=30)
    assert a[:2].sum() == 0 and b[:2].sum() == 0
    keep = (a + b) > 0
    assert stats.chi2_contingency(np.stack([a[keep], b[keep]])).pvalue > 1e-4
    assert 0.5 * np.abs(a - b).sum() / DRAWS < 0.01


def test_mutation_without_block_shift_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same chi-square rejects a zero block that forgets its ln n₀ shift."""
    broken = SimpleNamespace(log=lambda x: 0.0, inf=math.inf, exp=math.exp)
    monkeypatch.setattr(sparse_em, "math", broken)
    hist = SparseCounts.from_votes([3, 3, 3, 7, 7, 11], size=20)
    draws = sparse_exponential_sample(hist, epsilon=1.5, size=DRAWS, rng=2)
    exact = exponential_probabilities(hist.dense(), epsilon=1.5)
    observed = np.bincount(draws, minlength=20)
    assert stats.chisquare(observed, exact * DRAWS).pvalue < 1e-12


def test_vocabulary_sized_draws_are_uniform_over_zero_tokens() -> None:
    hist = SparseCounts.from_votes([17, 31_337, 31_337], size=128_256)
    draws = sparse_exponential_sample(hist, epsilon=0.01, size=50_000, rng=5)
    each_zero = sparse_exponential_probabilities(hist, epsilon=0.01)[2]
    zero = draws[(draws != 17) & (draws != 31_337)]
    assert zero.size / draws.size == pytest.approx(each_zero * (128_256 - 2), abs=0.01)
    bins = np.bincount(zero * 16 // 128_256, minlength=16)  # 16 equal id ranges
    assert stats.chisquare(bins).pvalue > 1e-4


def test_audit_sparse_exponential_on_vote_substitution() -> None:
    """Worst-case pair: one vote moves from token 3 to token 8 (V = 1000): claim ε."""
    d, d_prime = np.zeros(1000), np.zeros(1000)
    d[3], d_prime[3], d_prime[8] = 2, 1, 1

    def sample(counts: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        draws = sparse_exponential_sample(
            SparseCounts.from_dense(counts), epsilon=2.0, size=n, rng=gen
        )
        return np.where(np.isin(draws, [3, 8]), draws, -1)  # zero tokens: one output

    result = run_audit(sample, d, d_prime, trials=DRAWS, delta=0.0, rng=6)
    assert 0.5 < result.epsilon_lower_bound <= 2.0, result


def test_exponential_errors_name_the_parameter() -> None:
    hist = SparseCounts.from_votes([1], size=4)
    with pytest.raises(ValueError, match="epsilon"):
        sparse_exponential_sample(hist, epsilon=0.0)
    with pytest.raises(ValueError, match="domain must be sorted"):
        sparse_exponential_sample(hist, epsilon=1.0, domain=np.array([2, 1]))
    with pytest.raises(ValueError, match="domain must hold at least one item"):
        sparse_exponential_sample(hist, epsilon=1.0, domain=np.array([], dtype=np.intp))
    with pytest.raises(ValueError, match="size"):
        sparse_exponential_sample(hist, epsilon=1.0, size=0)


@pytest.mark.parametrize("monotone", [False, True])
def test_limited_domain_sparse_candidates_identical_to_dense(monotone: bool) -> None:
    gen = np.random.default_rng(7)
    for _ in range(300):
        size = int(gen.integers(1, 80))
        voters = int(gen.integers(0, 50))
        hist = _random_hist(gen, size, voters)
        k_bar = int(gen.choice([1, 2, max(voters, 1), size, size + 3, int(gen.integers(1, 60))]))
        kw = {"epsilon": 1.3, "delta": 1e-5, "k_bar": k_bar, "max_changed": 2, "monotone": monotone}
        dense = limited_domain_candidates(hist.dense(), **kw)
        sparse = limited_domain_candidates_sparse(hist, **kw)
        np.testing.assert_array_equal(sparse.indices, dense.indices)
        np.testing.assert_array_equal(sparse.counts, dense.counts)
        assert sparse.h_bottom == dense.h_bottom and sparse.scale == dense.scale
        seed = int(gen.integers(1 << 30))
        np.testing.assert_array_equal(
            limited_domain_sample(sparse, size=20, rng=seed),
            limited_domain_sample(dense, size=20, rng=seed),
        )


def test_limited_domain_sparse_reads_only_the_top_counts() -> None:
    """V = 128k, 40 voters on 3 tokens, k̄ = 40: the 37 padding candidates are the lowest
    unvoted ids (as in the dense top-k̄), and h[k̄+1] = 0."""
    votes = np.array([5] * 30 + [2] * 6 + [90_000] * 4)
    hist = SparseCounts.from_votes(votes, size=128_256)
    c = limited_domain_candidates_sparse(hist, epsilon=1.0, delta=1e-5, k_bar=40, max_changed=2)
    assert c.indices[:3].tolist() == [2, 5, 90_000]
    assert c.indices[3:].tolist() == [0, 1, 3, 4, *range(6, 39)]
    assert c.counts[:3].tolist() == [6.0, 30.0, 4.0] and not c.counts[3:].any()
    assert c.h_bottom == 0 + 1 + 1.0 * math.log(2 / 1e-5)
