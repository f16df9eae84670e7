"""The exponential mechanism over a sparse histogram, exact in O(nnz) instead of O(V).

Utilities are the counts of a :class:`~dprag_core.mechanisms.histogram.SparseCounts`
(0 for every item not stored), restricted to a public ``domain`` (default: all
``size`` items). The mechanism and its claim are exactly those of
:mod:`~dprag_core.mechanisms.exponential` on the dense utilities (ε-DP for
utilities of sensitivity Δ, ε²/8-zCDP; ``monotone`` as there): only the sampling
is organised differently.

Exactness. Gumbel-max on the dense logits ℓ_i = ε·u_i/(2Δ) takes the argmax of
ℓ_i + G_i over the domain. The n₀ items with count 0 share ℓ = 0; the maximum of
n₀ i.i.d. standard Gumbels is distributed as one standard Gumbel shifted by
ln n₀, and which of the n₀ attains it is uniform and independent of its value.
So one Gumbel-max over the nnz stored logits plus one "zero block" logit ln n₀,
followed by a uniform choice inside the block when it wins, has exactly the
dense output distribution softmax(ℓ): P(i) = e^{ℓ_i}/(Σ_stored e^{ℓ_j} + n₀).
Cost per draw: nnz + 1 Gumbels and at most one integer, O(nnz log V) in all
(the domain lookup); nothing is O(V).

>>> from dprag_core.mechanisms.histogram import SparseCounts
>>> h = SparseCounts.from_votes([5, 5, 5], size=100_000)
>>> sparse_exponential_sample(h, epsilon=40.0, size=3, rng=0).tolist()
[5, 5, 5]
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from dprag_core.mechanisms.histogram import SparseCounts, missing_positions
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite, positive_int

__all__ = ["sparse_exponential_probabilities", "sparse_exponential_sample"]


def _stored_in_domain(
    hist: SparseCounts, domain: NDArray[np.intp] | None
) -> tuple[NDArray[np.intp], NDArray[np.int64], NDArray[np.intp], int]:
    """Stored items inside the domain, their counts, their positions in it, the domain size."""
    if domain is None:
        return hist.indices, hist.counts, hist.indices, hist.size
    pos = np.searchsorted(domain, hist.indices)
    inside = pos < domain.size
    inside[inside] = domain[pos[inside]] == hist.indices[inside]
    return hist.indices[inside], hist.counts[inside], pos[inside], int(domain.size)


def _check_domain(domain: NDArray[np.intp] | None, size: int) -> NDArray[np.intp] | None:
    if domain is None:
        return None
    d = np.asarray(domain, dtype=np.intp)
    if d.ndim != 1 or (d.size and (d[0] < 0 or d[-1] >= size or np.any(np.diff(d) <= 0))):
        raise ValueError(f"domain must be sorted, unique item ids in [0, {size})")
    return d


def _logits(
    hist: SparseCounts,
    *,
    epsilon: float,
    sensitivity: float,
    monotone: bool,
    domain: NDArray[np.intp] | None,
) -> tuple[NDArray[np.intp], NDArray[np.float64], NDArray[np.intp], int, NDArray[np.intp] | None]:
    eps = positive_finite("epsilon", epsilon)
    delta_u = positive_finite("sensitivity", sensitivity)
    dom = _check_domain(domain, hist.size)
    items, counts, positions, n_domain = _stored_in_domain(hist, dom)
    n_zero = n_domain - items.size
    if n_domain == 0:
        raise ValueError("domain must hold at least one item")
    factor = eps / delta_u if monotone else eps / (2.0 * delta_u)
    return items, counts.astype(np.float64) * factor, positions, n_zero, dom


def sparse_exponential_sample(
    hist: SparseCounts,
    *,
    epsilon: float,
    sensitivity: float = 1.0,
    monotone: bool = False,
    size: int = 1,
    domain: NDArray[np.intp] | None = None,
    rng: RngLike = None,
) -> NDArray[np.intp]:
    """``size`` independent exponential-mechanism draws over ``hist``'s counts, in O(nnz).

    Each draw is distributed exactly as
    ``gumbel_max(exponential_logits(hist.dense(), ...))`` with items outside
    ``domain`` (public, sorted ids; None = all) at utility -inf: ε-DP and
    ε²/8-zCDP as claimed in :mod:`~dprag_core.mechanisms.exponential` (module
    docstring for the proof of exactness).

    >>> h = SparseCounts.from_votes([], size=10)
    >>> bool(np.all(sparse_exponential_sample(h, epsilon=1.0, size=50, domain=np.arange(3),
    ...                                       rng=0) < 3))
    True
    """
    n = positive_int("size", size)
    items, logits, positions, n_zero, dom = _logits(
        hist, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone, domain=domain
    )
    gen = make_rng(rng)
    block = math.log(n_zero) if n_zero else -math.inf
    noisy = np.append(logits, block)[np.newaxis, :] + gen.gumbel(size=(n, items.size + 1))
    best = np.argmax(noisy, axis=1)
    out = np.empty(n, dtype=np.intp)
    stored = best < items.size
    out[stored] = items[best[stored]]
    n_block = int(n - stored.sum())
    if n_block:
        ranks = gen.integers(0, n_zero, size=n_block)
        picked = missing_positions(positions, ranks)
        out[~stored] = picked if dom is None else dom[picked]
    return out


def sparse_exponential_probabilities(
    hist: SparseCounts,
    *,
    epsilon: float,
    sensitivity: float = 1.0,
    monotone: bool = False,
    domain: NDArray[np.intp] | None = None,
) -> tuple[NDArray[np.intp], NDArray[np.float64], float]:
    """The exact output distribution in O(nnz): (stored items in the domain, their
    probabilities, the probability of each zero-count item of the domain).

    The same numbers as :func:`~dprag_core.mechanisms.exponential.exponential_probabilities`
    on the dense utilities, computed with logsumexp.

    >>> h = SparseCounts.from_votes([1], size=3)
    >>> items, probs, each_zero = sparse_exponential_probabilities(h, epsilon=2.0)
    >>> items.tolist(), round(float(probs[0] / each_zero), 6) == round(float(np.e), 6)
    ([1], True)
    """
    items, logits, _, n_zero, _ = _logits(
        hist, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone, domain=domain
    )
    top = max(float(logits.max(initial=-math.inf)), 0.0 if n_zero else -math.inf)
    norm = float(np.exp(logits - top).sum()) + n_zero * math.exp(-top)
    return items, np.exp(logits - top) / norm, math.exp(-top) / norm
