"""DP similarity threshold: a continuous exponential mechanism (Grislain 2024, "Privacy Unit
Preserving Document Retrieval").

Instead of a top-k, which one document can shift, sample a threshold τ with DP
and keep every document scoring above it. τ ranges over the **public** interval
[s_lo, s_hi]; scores are clipped into it. Between consecutive sorted scores the
utility is constant, so the density ∝ exp(ε·u(τ)/(2Δ)) is piecewise constant:
pick an interval with probability ∝ width·exp(ε·u/(2Δ)) (Gumbel-max over
log-weights, so nothing underflows even at ε = 1000 or with 10⁵ scores; tied
scores make zero-width intervals whose log-weight is −inf, never NaN), then draw
τ uniformly inside it.

Utilities (n_>(τ) = #{i : s_i > τ}):

- ``"top_k"``: u(τ) = −|n_>(τ) − k|. It peaks on the interval where exactly k
  scores lie above τ (the reference code's peaks at k − 2: not copied).
  Adding or removing one document changes n_>(τ) by 0 or 1: **Δ = 1**.
- ``"top_p"``: u(τ) = −|Σ_{s_i>τ} w(s_i) − p·Σ_i w(s_i)| with
  w(s) = exp(α(s − s_hi)/(s_hi − s_lo)) ∈ [e^{−α}, 1] computed with the
  **public** bounds. Adding a document of weight w changes the inner quantity by
  (1 − p)·w (score above τ) or −p·w (below): max(p, 1 − p) under add/remove.
  Substituting one document (what a data-dependent top-N candidate list turns
  add/remove into) moves it by (1 − p)·w_new + p·w_old ≤ 1. We use **Δ = 1**,
  valid for both relations. (With the data-dependent s_max, s_min of the paper
  one document rescales every weight and Δ is not bounded by 1.)

**Claim: ε-DP** for add/remove (or substitution) of one privacy unit with one
score per unit (McSherry & Talwar 2007 on the continuous range with the base
measure Lebesgue on [s_lo, s_hi]; the EM is also ε-bounded-range). τ is the DP
output. The documents above τ are still private data: they may only feed a DP
mechanism (DP-ICL), which then relies on neighbouring corpora selecting sets
that differ by the one unit (two under substitution).

>>> tau = dp_threshold([0.9, 0.8, 0.1], epsilon=50.0, bounds=(0.0, 1.0), k=2, rng=0)
>>> 0.1 < tau < 0.8
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from dprag_core._validation import finite, nonnegative_finite, positive_finite, positive_int
from dprag_core.mechanisms._rng import RngLike, make_rng
from dprag_core.mechanisms.exponential import gumbel_max

__all__ = [
    "ThresholdIntervals",
    "Utility",
    "dp_threshold",
    "threshold_intervals",
    "top_k_utility",
    "top_p_utility",
    "top_p_weights",
    "utility_sensitivity",
    "validate_bounds",
]

Utility = Literal["top_k", "top_p"]


def validate_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    """Check the public score range (s_lo, s_hi): finite numbers with s_lo < s_hi.

    >>> validate_bounds((-1, 1))
    (-1.0, 1.0)
    """
    try:
        lo_raw, hi_raw = bounds
    except (TypeError, ValueError):
        raise TypeError("bounds must be a pair (s_lo, s_hi) of finite numbers") from None
    lo, hi = finite("bounds[0]", lo_raw), finite("bounds[1]", hi_raw)
    if not lo < hi:
        raise ValueError(f"bounds must satisfy s_lo < s_hi, got ({lo!r}, {hi!r})")
    return lo, hi


def _clipped_sorted(scores: ArrayLike, lo: float, hi: float) -> NDArray[np.float64]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if np.isnan(s).any():
        raise ValueError("scores must not contain NaN")
    return np.sort(np.clip(s, lo, hi))


def top_p_weights(
    scores: ArrayLike, *, bounds: tuple[float, float], alpha: float
) -> NDArray[np.float64]:
    """w(s) = exp(α(s − s_hi)/(s_hi − s_lo)) on clipped scores, with the PUBLIC bounds.

    >>> top_p_weights([1.0, 0.0], bounds=(0.0, 1.0), alpha=1.0).round(4).tolist()
    [1.0, 0.3679]
    """
    lo, hi = validate_bounds(bounds)
    a = nonnegative_finite("alpha", alpha)
    s = np.clip(np.asarray(scores, dtype=np.float64), lo, hi)
    return np.asarray(np.exp(a * (s - hi) / (hi - lo)), dtype=np.float64)


def top_k_utility(scores: ArrayLike, tau: float, *, k: int) -> float:
    """u(τ) = −|#{s_i > τ} − k| (Δ = 1).

    >>> top_k_utility([0.9, 0.8, 0.1], 0.5, k=2)
    0.0
    """
    kk = positive_int("k", k)
    count = int(np.count_nonzero(np.asarray(scores, dtype=np.float64) > tau))
    return float(-abs(count - kk))


def top_p_utility(
    scores: ArrayLike, tau: float, *, p: float, bounds: tuple[float, float], alpha: float
) -> float:
    """u(τ) = −|Σ_{s_i>τ} w(s_i) − p·Σ_i w(s_i)| with public-bound weights (Δ ≤ 1).

    >>> top_p_utility([1.0, 1.0], 0.5, p=0.5, bounds=(0.0, 1.0), alpha=1.0)
    -1.0
    """
    pp = _top_p(p)
    s = np.asarray(scores, dtype=np.float64)
    w = top_p_weights(s, bounds=bounds, alpha=alpha)
    return -float(abs(w[np.clip(s, *validate_bounds(bounds)) > tau].sum() - pp * w.sum()))


def _top_p(p: float) -> float:
    x = finite("p", p)
    if not 0.0 < x < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    return x


def utility_sensitivity(utility: Utility, *, p: float | None = None) -> float:
    """Δ of the utility under add/remove or substitution of one document: 1 for both.

    (top_p under add/remove alone would allow max(p, 1 − p); see the module docstring.)

    >>> utility_sensitivity("top_p", p=0.25)
    1.0
    """
    if utility == "top_k":
        return 1.0
    if utility == "top_p":
        if p is None:
            raise ValueError("p is required for utility='top_p'")
        _top_p(p)
        return 1.0
    raise ValueError(f"utility must be 'top_k' or 'top_p', got {utility!r}")


@dataclass(frozen=True)
class ThresholdIntervals:
    """The exact output law of :func:`dp_threshold`: τ is uniform on interval j w.p. probs[j].

    Interval j is (edges[j], edges[j+1]); ``utilities[j]`` is u there and
    ``selected[j]`` the number of scores above any τ inside it.

    >>> threshold_intervals([0.5], epsilon=1.0, bounds=(0.0, 1.0), k=1).edges.tolist()
    [0.0, 0.5, 1.0]
    """

    edges: NDArray[np.float64]
    utilities: NDArray[np.float64]
    selected: NDArray[np.int64]
    log_weights: NDArray[np.float64]

    @property
    def probs(self) -> NDArray[np.float64]:
        """Interval probabilities (softmax of the log-weights)."""
        return np.asarray(np.exp(self.log_weights - logsumexp(self.log_weights)))


def threshold_intervals(
    scores: ArrayLike,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    utility: Utility = "top_k",
    k: int | None = None,
    p: float | None = None,
    alpha: float = 1.0,
) -> ThresholdIntervals:
    """The n + 1 intervals between the sorted clipped scores, with their utilities and log-weights.

    log-weight = log(width) + ε·u/(2Δ); zero-width intervals (ties, scores at a
    bound) get −inf.

    >>> law = threshold_intervals([0.5], epsilon=2.0, bounds=(0.0, 1.0), k=1)
    >>> law.selected.tolist(), law.probs.round(4).tolist()
    ([1, 0], [0.7311, 0.2689])
    """
    eps = positive_finite("epsilon", epsilon)
    lo, hi = validate_bounds(bounds)
    s = _clipped_sorted(scores, lo, hi)
    n = s.size
    edges = np.concatenate([[lo], s, [hi]])
    above = np.arange(n, -1, -1, dtype=np.int64)  # interval j: scores s_(j+1..n) lie above τ
    if utility == "top_k":
        if k is None:
            raise ValueError("k is required for utility='top_k'")
        u = -np.abs(above - positive_int("k", k)).astype(np.float64)
    elif utility == "top_p":
        if p is None:
            raise ValueError("p is required for utility='top_p'")
        pp = _top_p(p)
        w = top_p_weights(s, bounds=(lo, hi), alpha=alpha)
        # Σ_{s_i>τ} w for τ in interval j = sum of w over sorted indices >= j (suffix sums).
        suffix = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])
        u = -np.abs(suffix - pp * w.sum())
    else:
        raise ValueError(f"utility must be 'top_k' or 'top_p', got {utility!r}")
    delta_u = utility_sensitivity(utility, p=p)
    widths = np.diff(edges)
    with np.errstate(divide="ignore"):
        log_w = np.log(widths) + eps * u / (2.0 * delta_u)
    return ThresholdIntervals(edges=edges, utilities=u, selected=above, log_weights=log_w)


def _sample_tau(
    law: ThresholdIntervals, *, size: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """``size`` independent thresholds from ``law`` (Gumbel-max interval, then uniform)."""
    j = gumbel_max(law.log_weights, size=size, rng=rng)
    left, right = law.edges[j], law.edges[j + 1]
    return np.asarray(left + rng.random(size) * (right - left), dtype=np.float64)


def dp_threshold(
    scores: ArrayLike,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    utility: Utility = "top_k",
    k: int | None = None,
    p: float | None = None,
    alpha: float = 1.0,
    rng: RngLike = None,
) -> float:
    """Sample a DP similarity threshold τ ∈ [s_lo, s_hi] (ε-DP, module docstring).

    ``scores``: one score per privacy unit; ``bounds``: the public (s_lo, s_hi).
    Keep the units with score > τ.

    >>> tau = dp_threshold([0.3] * 5, epsilon=1.0, bounds=(-1.0, 1.0), k=2, rng=3)
    >>> -1.0 <= tau <= 1.0
    True
    """
    law = threshold_intervals(
        scores, epsilon=epsilon, bounds=bounds, utility=utility, k=k, p=p, alpha=alpha
    )
    return float(_sample_tau(law, size=1, rng=make_rng(rng))[0])
