"""FindBestK and TopKWithPTR: DP-KSA's private keyword release (Tang et al. 2026, Alg. 2–3).

Both work on a keyword histogram H: for each keyword, the number of responses
that contain it (a response counts a keyword at most once). Only the counts
matter here; :mod:`dprag_core.algorithms.ksa` maps the chosen ranks back to
keywords. H(1) ≥ H(2) ≥ ... are the sorted counts, padded with zeros, and the
gap d_k = H(k) − H(k+1).

Neighbouring relation. DP-KSA answers from the top-N retrieved documents, one
response per document. Adding or removing one document of the corpus changes
the retrieved set by at most one document *substituted* (the removed one is
replaced by the next in rank) or one added/removed (corpus smaller than N), so
at most one response changes. Each count then moves by at most 1, hence every
*sorted* count H(k) moves by at most 1 (sorting is 1-Lipschitz in the ∞-norm),
and every gap d_k by at most 2: **sensitivity Δ = 2** (Zhu & Wang 2022). The gaps
are not monotone under this relation (H(k) and H(k+1) can move in opposite
directions).

- :func:`find_best_k` (Alg. 3) is the exponential mechanism over the public range
  k ∈ [k_min, k_max] with utility d_k: argmax_k(d_k + Gumbel(2Δ/ε)) =
  argmax_k(d_k + Gumbel(4/ε)). **Claim: ε-DP and ε-bounded-range** (ε²/8-zCDP).
  The paper's Alg. 3 prints Gumbel(2/ε), which is the scale for Δ = 1 and would
  spend 2ε; we use 4/ε.
- :func:`top_k_with_ptr` (Alg. 2, propose-test-release): d̂ = max(2, d_k) +
  N(0, (2σ)²) − Φ⁻¹(1 − δ₁)·2σ; "pass" iff d̂ > 2. **Claim: the noisy gap is the
  Gaussian mechanism on max(2, d_k) (sensitivity 2, std 2σ), i.e. RDP
  α·2²/(2·(2σ)²) = α/(2σ²); releasing the exact top-k set on "pass" adds δ₁**
  (App. A, Thm A.10): if d_k > 2 (so d_k ≥ 3, counts being integers) every
  neighbour has the same top-k *set*, which is then a function of public
  things; if the top-k sets of a neighbouring pair differ, both have d_k ≤ 2, the
  noisy gaps are identically distributed and "pass" has probability exactly δ₁.
  Only the *set* is stable: the order inside the top-k is not, so callers must
  release the keywords in a data-independent order (DP-KSA sorts them
  alphabetically).

The total (ε, δ) of the pair is computed in :mod:`dprag_core.accounting.ksa`.

>>> find_best_k([50, 48, 10, 9], epsilon=50.0, k_min=1, k_max=3, rng=0)
2
>>> top_k_with_ptr([50, 48, 10, 9], 2, sigma=1.0, delta=1e-5, rng=0)
True
>>> top_k_with_ptr([50, 48, 47, 9], 1, sigma=1.0, delta=1e-5, rng=0)
False
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import norm

from dprag_core.mechanisms.exponential import exponential_probabilities
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite, positive_int, probability

__all__ = [
    "DEFAULT_K_MAX",
    "GAP_SENSITIVITY",
    "find_best_k",
    "find_best_k_probabilities",
    "gaps",
    "ptr_pass_probability",
    "sorted_counts",
    "top_k_with_ptr",
]

GAP_SENSITIVITY = 2.0
"""Sensitivity of every gap d_k under the substitution of one response (module docstring)."""

DEFAULT_K_MAX = 20
"""Public upper end of the k range when ``k_max`` is not given."""


def sorted_counts(histogram: ArrayLike) -> NDArray[np.float64]:
    """The keyword counts sorted in decreasing order (validated: finite, >= 0, 1-D).

    >>> sorted_counts([1, 3, 2]).tolist()
    [3.0, 2.0, 1.0]
    """
    h = np.asarray(histogram, dtype=np.float64)
    if h.ndim != 1:
        raise ValueError(f"histogram must be a 1-D array of counts, got shape {h.shape}")
    if not np.all(np.isfinite(h)) or np.any(h < 0):
        raise ValueError("histogram must hold finite counts >= 0")
    return np.sort(h)[::-1]


def _k_range(k_min: int, k_max: int | None) -> tuple[int, int]:
    lo = positive_int("k_min", k_min)
    hi = DEFAULT_K_MAX if k_max is None else positive_int("k_max", k_max)
    if hi < lo:
        raise ValueError(f"k_max must be an integer >= k_min={lo}, got {hi}")
    return lo, hi


def gaps(histogram: ArrayLike, *, k_min: int = 1, k_max: int | None = None) -> NDArray[np.float64]:
    """d_k = H(k) − H(k+1) for k = k_min..k_max (H sorted, zero-padded).

    >>> gaps([5, 1, 3], k_min=1, k_max=4).tolist()
    [2.0, 2.0, 1.0, 0.0]
    """
    lo, hi = _k_range(k_min, k_max)
    h = sorted_counts(histogram)
    padded = np.zeros(hi + 1, dtype=np.float64)
    n = min(h.size, hi + 1)
    padded[:n] = h[:n]
    return padded[lo - 1 : hi] - padded[lo : hi + 1]


def find_best_k_probabilities(
    histogram: ArrayLike, *, epsilon: float, k_min: int = 1, k_max: int | None = None
) -> NDArray[np.float64]:
    """Exact P[find_best_k = k] for k = k_min..k_max: softmax(ε·d_k/(2·2)).

    >>> find_best_k_probabilities([4, 4], epsilon=1.0, k_min=1, k_max=2).round(3).tolist()
    [0.269, 0.731]
    """
    return exponential_probabilities(
        gaps(histogram, k_min=k_min, k_max=k_max),
        epsilon=epsilon,
        sensitivity=GAP_SENSITIVITY,
    )


def _find_best_k_batch(
    histogram: ArrayLike,
    *,
    epsilon: float,
    k_min: int,
    k_max: int | None,
    size: int,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """``size`` independent draws of FindBestK (vectorised; used by the audits)."""
    eps = positive_finite("epsilon", epsilon)
    lo, _ = _k_range(k_min, k_max)
    d = gaps(histogram, k_min=k_min, k_max=k_max)
    scale = 2.0 * GAP_SENSITIVITY / eps
    noisy = d[np.newaxis, :] + rng.gumbel(0.0, scale, size=(size, d.size))
    return np.asarray(np.argmax(noisy, axis=1) + lo, dtype=np.int64)


def find_best_k(
    histogram: ArrayLike,
    *,
    epsilon: float,
    k_min: int = 1,
    k_max: int | None = None,
    rng: RngLike = None,
) -> int:
    """FindBestK (Tang et al. Alg. 3): k̂ = argmax_{k_min≤k≤k_max} d_k + Gumbel(4/ε).

    ε-DP (and ε-bounded-range) for the substitution of one response, Δ(d_k) = 2
    (module docstring). ``[k_min, k_max]`` must be public (``k_max=None`` uses
    :data:`DEFAULT_K_MAX`); H is zero-padded so that every k in the range is a
    candidate whatever the data.

    >>> find_best_k([9, 9, 9, 1], epsilon=100.0, k_max=5, rng=1)
    3
    """
    gen = make_rng(rng)
    return int(
        _find_best_k_batch(histogram, epsilon=epsilon, k_min=k_min, k_max=k_max, size=1, rng=gen)[0]
    )


def _ptr_offset(sigma: float, delta: float) -> float:
    """Φ⁻¹(1 − δ₁; 0, 2σ): the (1 − δ₁)-quantile of the N(0, (2σ)²) noise."""
    return float(norm.isf(delta) * 2.0 * sigma)


def _ptr_params(sigma: float, delta: float) -> tuple[float, float]:
    s = positive_finite("sigma", sigma)
    d = probability("delta", delta, allow_zero=False)
    return s, d


def ptr_pass_probability(gap: float, *, sigma: float, delta: float) -> float:
    """Exact P[d̂ > 2] for a true gap d_k (equals δ₁ whenever d_k <= 2).

    >>> ptr_pass_probability(1.0, sigma=1.0, delta=1e-3) == 1e-3
    True
    """
    s, d = _ptr_params(sigma, delta)
    margin = max(2.0, float(gap)) - 2.0
    if margin == 0.0:
        return d
    # d̂ > 2  <=>  N(0, (2σ)²) > offset − margin
    return float(norm.sf((_ptr_offset(s, d) - margin) / (2.0 * s)))


def _ptr_batch(
    gap: float, *, sigma: float, delta: float, size: int, rng: np.random.Generator
) -> NDArray[np.bool_]:
    """``size`` independent PTR tests of one gap (vectorised; used by the audits)."""
    s, d = _ptr_params(sigma, delta)
    noisy = max(2.0, float(gap)) + rng.normal(0.0, 2.0 * s, size=size) - _ptr_offset(s, d)
    return np.asarray(noisy > 2.0)


def top_k_with_ptr(
    histogram: ArrayLike, k: int, *, sigma: float, delta: float, rng: RngLike = None
) -> bool:
    """TopKWithPTR (Tang et al. Alg. 2): may the exact top-``k`` keyword *set* be released?

    Tests d̂ = max(2, d_k) + N(0, 4σ²) − Φ⁻¹(1 − δ₁; 0, 2σ) > 2 with δ₁ = ``delta``.
    Claim: RDP α/(2σ²) plus δ₁ for releasing the set (module docstring); the
    caller releases the top-``k`` keywords (as a set, in a public order) iff this
    returns True, and nothing otherwise.

    >>> top_k_with_ptr([80, 3, 2], 1, sigma=2.0, delta=1e-6, rng=0)
    True
    """
    kk = positive_int("k", k)
    d_k = float(gaps(histogram, k_min=kk, k_max=kk)[0])
    return bool(_ptr_batch(d_k, sigma=sigma, delta=delta, size=1, rng=make_rng(rng))[0])
