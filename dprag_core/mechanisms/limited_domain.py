"""LimitedDomain top-1 (Durfee & Rogers 2019, "Practical differentially private top-k
selection with pay-what-you-get composition", Alg. "LimitedDomain" with k = 1), as used
for the token vote of Koga et al. (DPVoteRAG Alg. 2, DPSparseVoteRAG Alg. 3).

Only the true top-k̄ counts are looked at (a dense vocabulary-sized histogram
costs O(V); a sparse vote histogram, :func:`limited_domain_candidates_sparse`,
O(m log m + k̄)); the rest of the domain is represented by one threshold

    h⊥ = h[k̄+1] + Δ∞ + b·ln(min(Δ0, k̄)/δ),

where h[k̄+1] is the (k̄+1)-th largest count (0 past the end of the histogram),
Δ0 = ``max_changed`` is the number of counts one privacy unit can change, and b is
the Gumbel noise scale. Gumbel(b) noise is added to each of the k̄ counts and to h⊥;
the index of the best noisy count is returned if it beats noisy h⊥, else None (⊥).

Claim: (ε, δ)-DP under add/remove of one privacy unit, for counts with L∞
sensitivity 1 that change in at most Δ0 positions, with

- ``monotone=True`` (all counts move in the same direction, e.g. one unit adds a
  vote to each of ≤ Δ0 items): b = 1/ε and Δ∞ = 1 — exactly Durfee & Rogers'
  h⊥ = h[k̄+1] + 1 + ln(min(Δ0, k̄)/δ)/ε.
- ``monotone=False`` (counts may move in opposite directions, e.g. Koga's
  substitution of one voter's vote from token a to token b): b = 2/ε and Δ∞ = 2.
  Both are needed: with Gumbel(2/ε) the ln term must scale with b, and an item in
  the top-k̄ of D but not of D' can exceed h[k̄+1] by 2 (its count drops by one
  while another rises by one), so the "+1" of the monotone case would let it
  through with probability ≈ δ·e^{ε/2} > δ (the audit in
  tests/mechanisms/test_limited_domain.py shows the "+1" variant failing).

Proof sketch: if the top-k̄ sets of D and D' agree, the output is a Gumbel-max over
k̄ + 1 values (k̄ counts and h⊥, which moves with h[k̄+1]) that each move by ≤ 1 —
an exponential mechanism with scale b, ε-DP. An item in top-k̄(D) \\ top-k̄(D') has
count ≤ h[k̄+1] + Δ∞, so it beats noisy h⊥ with probability ≤ δ/min(Δ0, k̄); at most
min(Δ0, k̄) items are in that set.
Ties are broken towards the lower index.

>>> limited_domain_top1([0, 40, 3], epsilon=1.0, delta=1e-5, k_bar=2, rng=0)
1
>>> limited_domain_top1([0, 0, 0], epsilon=1.0, delta=1e-5, k_bar=2, rng=0) is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprag_core.mechanisms.histogram import SparseCounts, missing_positions
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite, positive_int, probability

__all__ = [
    "BOTTOM",
    "LimitedDomainCandidates",
    "limited_domain_candidates",
    "limited_domain_candidates_sparse",
    "limited_domain_sample",
    "limited_domain_top1",
]

BOTTOM = -1
"""What :func:`limited_domain_sample` returns for ⊥."""


@dataclass(frozen=True)
class LimitedDomainCandidates:
    """The data-dependent part of LimitedDomain: the top-k̄ candidates and the threshold h⊥.

    Built by :func:`limited_domain_candidates`; private (holds true counts): pass
    it only to :func:`limited_domain_sample`, whose output carries the claim.

    >>> c = limited_domain_candidates([4, 9], epsilon=1.0, delta=0.5, k_bar=1)
    >>> c.indices.tolist(), c.counts.tolist(), c.scale
    ([1], [9.0], 1.0)
    """

    indices: NDArray[np.intp]  # the top-k̄ items (positions in the histogram)
    counts: NDArray[np.float64]  # their true counts
    h_bottom: float  # h⊥
    scale: float  # Gumbel noise scale b


def _top_k(counts: NDArray[np.float64], k: int) -> tuple[NDArray[np.intp], float]:
    """Indices of the k largest counts (ties to the lower index) and the (k+1)-th largest."""
    n = counts.size
    if k >= n:
        return np.arange(n), 0.0
    ordered = np.partition(counts, (n - k - 1, n - k))
    kth, next_value = ordered[n - k], float(ordered[n - k - 1])
    above = np.flatnonzero(counts > kth)
    tied = np.flatnonzero(counts == kth)[: k - above.size]
    return np.concatenate([above, tied]), next_value


def _threshold(
    *,
    epsilon: float,
    delta: float,
    k_bar: int,
    max_changed: int | None,
    monotone: bool,
) -> tuple[int, float, float, float]:
    """Validated k̄, Gumbel scale b, Δ∞ and b·ln(min(Δ0, k̄)/δ): h⊥ = h[k̄+1] + Δ∞ + that."""
    eps = positive_finite("epsilon", epsilon)
    dlt = probability("delta", delta, allow_zero=False)
    k = positive_int("k_bar", k_bar)
    changed = k if max_changed is None else positive_int("max_changed", max_changed)
    scale, offset = (1.0 / eps, 1.0) if monotone else (2.0 / eps, 2.0)
    return k, scale, offset, scale * math.log(min(changed, k) / dlt)


def limited_domain_candidates(
    counts: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    k_bar: int,
    max_changed: int | None = None,
    monotone: bool = True,
) -> LimitedDomainCandidates:
    """Validate the parameters and compute the top-k̄ candidates and h⊥ (module docstring).

    Together with :func:`limited_domain_sample` this is :func:`limited_domain_top1`
    split in two, so that many independent runs on one histogram (DPSparseVote's
    batched rule, vectorised audits) execute the production code; each run is
    (ε, δ)-DP as claimed in the module docstring.

    >>> c = limited_domain_candidates([0, 5, 3], epsilon=1.0, delta=0.5, k_bar=2)
    >>> sorted(c.indices.tolist()), round(c.h_bottom, 4)  # h[3] = 0, + 1 + ln(2/0.5)
    ([1, 2], 2.3863)
    """
    k, scale, offset, log_term = _threshold(
        epsilon=epsilon, delta=delta, k_bar=k_bar, max_changed=max_changed, monotone=monotone
    )
    h = np.asarray(counts, dtype=np.float64)
    if h.ndim != 1 or h.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {h.shape}")
    if not np.all(np.isfinite(h)) or np.any(h < 0):
        raise ValueError("counts must be finite and >= 0")
    indices, next_value = _top_k(h, k)
    return LimitedDomainCandidates(indices, h[indices], next_value + offset + log_term, scale)


def _top_k_sparse(
    hist: SparseCounts, k: int
) -> tuple[NDArray[np.intp], NDArray[np.float64], float]:
    """:func:`_top_k` of ``hist.dense()`` (same indices, same order) in O(nnz log nnz + k)."""
    if k >= hist.size:
        dense = hist.dense()
        return np.arange(hist.size), dense.astype(np.float64), 0.0
    desc = np.sort(hist.counts)[::-1]
    kth = int(desc[k - 1]) if hist.nnz >= k else 0
    next_value = float(desc[k]) if hist.nnz > k else 0.0
    above = hist.counts > kth
    need = k - int(above.sum())
    if kth > 0:
        tied = hist.indices[hist.counts == kth][:need]
    else:  # the lowest-id zero-count items fill the candidate list
        tied = missing_positions(hist.indices, np.arange(need, dtype=np.int64))
    indices = np.concatenate([hist.indices[above], tied]).astype(np.intp)
    values = np.concatenate([hist.counts[above], np.full(need, kth)]).astype(np.float64)
    return indices, values, next_value


def limited_domain_candidates_sparse(
    hist: SparseCounts,
    *,
    epsilon: float,
    delta: float,
    k_bar: int,
    max_changed: int | None = None,
    monotone: bool = True,
) -> LimitedDomainCandidates:
    """:func:`limited_domain_candidates` of ``hist.dense()``, in O(nnz log nnz + k̄).

    Returns the identical candidates (same indices in the same order, same counts,
    same h⊥), so :func:`limited_domain_sample` draws the same outputs from the
    same generator: the same mechanism and the same (ε, δ) claim (module
    docstring). Only the top k̄ + 1 counts are read; zero-count items enter the
    candidates (lowest ids first) only when fewer than k̄ counts are non-zero.

    >>> from dprag_core.mechanisms.histogram import SparseCounts
    >>> h = SparseCounts.from_votes([9, 9, 4], size=50_000)
    >>> limited_domain_candidates_sparse(h, epsilon=1.0, delta=0.5, k_bar=3).indices.tolist()
    [4, 9, 0]
    """
    k, scale, offset, log_term = _threshold(
        epsilon=epsilon, delta=delta, k_bar=k_bar, max_changed=max_changed, monotone=monotone
    )
    indices, values, next_value = _top_k_sparse(hist, k)
    return LimitedDomainCandidates(indices, values, next_value + offset + log_term, scale)


def limited_domain_sample(
    candidates: LimitedDomainCandidates, *, size: int = 1, rng: RngLike = None
) -> NDArray[np.intp]:
    """``size`` independent LimitedDomain runs: histogram positions, :data:`BOTTOM` for ⊥.

    Each run is (ε, δ)-DP (module docstring) for the parameters ``candidates`` was built with.

    >>> c = limited_domain_candidates([0, 40, 3], epsilon=1.0, delta=1e-5, k_bar=2)
    >>> limited_domain_sample(c, size=2, rng=0).tolist()
    [1, 1]
    """
    n = positive_int("size", size)
    gen = make_rng(rng)
    c = candidates
    noisy = c.counts[np.newaxis, :] + gen.gumbel(0.0, c.scale, (n, c.counts.size))
    noisy_bottom = c.h_bottom + gen.gumbel(0.0, c.scale, n)
    best = np.argmax(noisy, axis=1)
    wins = noisy[np.arange(n), best] > noisy_bottom
    return np.where(wins, c.indices[best], BOTTOM)


def limited_domain_top1(
    counts: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    k_bar: int,
    max_changed: int | None = None,
    monotone: bool = True,
    rng: RngLike = None,
) -> int | None:
    """Index of the privately chosen top count, or None (⊥); (ε, δ)-DP (module docstring).

    ``counts`` is a non-negative histogram (e.g. votes over the vocabulary);
    ``max_changed`` (Δ0, default ``k_bar``) bounds how many counts one unit changes.

    >>> limited_domain_top1([5, 0, 30, 1], epsilon=2.0, delta=1e-6, k_bar=3, rng=1)
    2
    """
    candidates = limited_domain_candidates(
        counts,
        epsilon=epsilon,
        delta=delta,
        k_bar=k_bar,
        max_changed=max_changed,
        monotone=monotone,
    )
    choice = int(limited_domain_sample(candidates, rng=rng)[0])
    return None if choice == BOTTOM else choice
