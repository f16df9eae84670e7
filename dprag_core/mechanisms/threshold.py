"""DP similarity threshold: a continuous exponential mechanism (Grislain 2024, "Privacy Unit
Preserving Document Retrieval").

Instead of a top-k, which one document can shift, sample a threshold τ with DP
and keep every document scoring above it. τ ranges over a **public grid** of
``grid`` points (default 2³²) inside the public interval [s_lo, s_hi]: point i
is g_i = s_lo + (i + ½)·(s_hi − s_lo)/grid. Scores are clipped into the
interval. Between consecutive sorted scores the utility is constant, so the
grid points fall into n + 1 runs of equal utility: pick a run with probability
∝ (grid points in it)·exp(ε·u/(2Δ)) (Gumbel-max over log-weights, so nothing
underflows even at ε = 1000 or with 10⁵ scores; runs without a grid point, e.g.
between tied scores, get log-weight −inf, never NaN), then a grid point
uniformly inside it. This is exactly the exponential mechanism over the grid
points (P[g_i] ∝ exp(ε·u(g_i)/(2Δ))).

Why a grid: the released τ is g_i, computed from the integer i and the public
bounds only. Drawing τ = left + U·(right − left) between two private scores in
floating point instead would let the low-order bits of τ depend on those scores
(Mironov 2012's attack on floating-point Laplace, in another guise).

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
score per unit (McSherry & Talwar 2007, the exponential mechanism over the
finite public grid; it is also ε-bounded-range). τ is the DP output. The
documents above τ are still private data: they may only feed a DP mechanism
(DP-ICL), which then relies on neighbouring corpora selecting sets that differ
by the one unit (two under substitution).

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

from dprag_core.mechanisms.exponential import gumbel_max
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import finite, nonnegative_finite, positive_finite, positive_int

__all__ = [
    "GRID_POINTS",
    "ThresholdIntervals",
    "Utility",
    "dp_threshold",
    "grid_below",
    "grid_points",
    "threshold_intervals",
    "top_k_utility",
    "top_p_utility",
    "top_p_weights",
    "utility_sensitivity",
    "validate_bounds",
]

Utility = Literal["top_k", "top_p"]

GRID_POINTS = 2**32
"""Default number of public grid points τ is drawn from."""


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


def grid_points(
    index: ArrayLike, *, bounds: tuple[float, float], grid: int = GRID_POINTS
) -> NDArray[np.float64]:
    """The public grid points g_i = s_lo + (i + ½)·(s_hi − s_lo)/grid for indices ``index``.

    >>> grid_points([0, 3], bounds=(0.0, 1.0), grid=4).tolist()
    [0.125, 0.875]
    """
    lo, hi = bounds
    step = (hi - lo) / grid
    return np.asarray(lo + (np.asarray(index, dtype=np.float64) + 0.5) * step, dtype=np.float64)


def grid_below(
    values: ArrayLike, *, bounds: tuple[float, float], grid: int = GRID_POINTS
) -> NDArray[np.int64]:
    """For each value x, the number of grid points g_i < x (exact, with float rounding fixed).

    >>> grid_below([0.0, 0.125, 0.2, 1.0], bounds=(0.0, 1.0), grid=4).tolist()
    [0, 0, 1, 4]
    """
    lo, hi = bounds
    x = np.asarray(values, dtype=np.float64)
    guess = np.ceil((x - lo) / ((hi - lo) / grid) - 0.5)
    i = np.clip(np.nan_to_num(guess), 0, grid).astype(np.int64)
    while True:  # the guess is off by at most a rounding step: move to the exact count
        down = (i > 0) & (grid_points(i - 1, bounds=bounds, grid=grid) >= x)
        up = (i < grid) & (grid_points(i, bounds=bounds, grid=grid) < x)
        if not (down.any() or up.any()):
            return np.asarray(i, dtype=np.int64)
        i = i - down + up


@dataclass(frozen=True)
class ThresholdIntervals:
    """The exact output law of :func:`dp_threshold`.

    Run j holds the grid points in [edges[j], edges[j+1]) (the last run also
    holds s_hi); τ is uniform over its ``counts[j]`` grid points w.p. probs[j].
    ``utilities[j]`` is u there and ``selected[j]`` the number of scores above
    any τ inside it. ``first[j]`` is the index of the run's first grid point.

    >>> threshold_intervals([0.5], epsilon=1.0, bounds=(0.0, 1.0), k=1).edges.tolist()
    [0.0, 0.5, 1.0]
    """

    edges: NDArray[np.float64]
    utilities: NDArray[np.float64]
    selected: NDArray[np.int64]
    log_weights: NDArray[np.float64]
    first: NDArray[np.int64]
    counts: NDArray[np.int64]
    bounds: tuple[float, float]
    grid: int

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
    grid: int = GRID_POINTS,
) -> ThresholdIntervals:
    """The n + 1 runs of grid points between the sorted clipped scores, with their law.

    log-weight = log(grid points in the run) + ε·u/(2Δ); runs without a grid
    point (ties, scores at a bound, runs narrower than the grid step) get −inf.

    >>> law = threshold_intervals([0.5], epsilon=2.0, bounds=(0.0, 1.0), k=1, grid=4)
    >>> law.selected.tolist(), law.counts.tolist(), law.probs.round(4).tolist()
    ([1, 0], [2, 2], [0.7311, 0.2689])
    """
    eps = positive_finite("epsilon", epsilon)
    size = positive_int("grid", grid)
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
    below = grid_below(edges, bounds=(lo, hi), grid=size)
    below[-1] = size  # the last run ends at s_hi and holds every remaining grid point
    counts = np.diff(below)
    with np.errstate(divide="ignore"):
        log_w = np.log(counts.astype(np.float64)) + eps * u / (2.0 * delta_u)
    return ThresholdIntervals(
        edges=edges,
        utilities=u,
        selected=above,
        log_weights=log_w,
        first=below[:-1],
        counts=counts,
        bounds=(lo, hi),
        grid=size,
    )


def _sample_tau(
    law: ThresholdIntervals, *, size: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """``size`` independent thresholds from ``law`` (Gumbel-max run, then a uniform grid point)."""
    j = gumbel_max(law.log_weights, size=size, rng=rng)
    index = law.first[j] + rng.integers(0, law.counts[j])
    return grid_points(index, bounds=law.bounds, grid=law.grid)


def dp_threshold(
    scores: ArrayLike,
    *,
    epsilon: float,
    bounds: tuple[float, float],
    utility: Utility = "top_k",
    k: int | None = None,
    p: float | None = None,
    alpha: float = 1.0,
    grid: int = GRID_POINTS,
    rng: RngLike = None,
) -> float:
    """Sample a DP similarity threshold τ, a point of the public grid (ε-DP, module docstring).

    ``scores``: one score per privacy unit; ``bounds``: the public (s_lo, s_hi);
    ``grid``: the number of public grid points. Keep the units with score > τ.

    >>> tau = dp_threshold([0.3] * 5, epsilon=1.0, bounds=(-1.0, 1.0), k=2, rng=3)
    >>> -1.0 <= tau <= 1.0
    True
    """
    law = threshold_intervals(
        scores, epsilon=epsilon, bounds=bounds, utility=utility, k=k, p=p, alpha=alpha, grid=grid
    )
    return float(_sample_tau(law, size=1, rng=make_rng(rng))[0])
