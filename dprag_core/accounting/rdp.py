"""Rényi-DP curves of the mechanisms we compose, and the RDP → (ε, δ) conversion.

Every curve is vectorised over the Rényi orders α (a 1-D array, all α > 1) and
returns one RDP value per order. Curves of steps that are composed add up
order by order; :func:`rdp_to_dp` turns the sum into an (ε, δ) guarantee.

- :func:`pure_dp_rdp`: the exact, tight RDP curve of an ε-DP mechanism (its
  worst case, randomized response),
  RR(ε, α) = log((e^{αε} + e^{(1−α)ε}) / (1 + e^ε)) / (α − 1)
  (Bun & Steinke 2016 Prop. 3.3; DP-KSA, Tang et al., Theorem A.9, written with
  sinh). Computed as (log cosh((α − ½)ε) − log cosh(ε/2)) / (α − 1), which is
  the same quantity, stable for ε → 0 and for α = 1e6, ε = 10.
- :func:`bounded_range_rdp`: an ε-bounded-range mechanism (the exponential
  mechanism with ε, report-noisy-max with Gumbel noise) is ε²/8-zCDP
  (Cesar & Rogers 2021) and ε-DP: min(αε²/8, RR(ε, α)).
- :func:`gaussian_rdp`: the Gaussian mechanism, αΔ²/(2σ²) (Mironov 2017).
- :func:`rdp_to_dp`: the improved conversion of Canonne, Kamath & Steinke 2020
  (Prop. 12) / Asoodeh et al. 2021, the one ``dp_accounting``'s ``RdpAccountant``
  uses: ε = min_α rdp(α) + log1p(−1/α) − (log δ + log α)/(α − 1).
- :func:`approximate_rdp_to_dp`: a curve that holds only δ₁-approximately (the
  mixture sense of Bun & Steinke 2016, Def. 8.1: with probability ≥ 1 − δ₁ the
  pair of output distributions is the good pair; e.g. PTR, or c steps that are
  (ε₀, δ₀)-DP, δ₁ = c·δ₀) converts to (ε, δ + δ₁).

>>> rr = pure_dp_rdp(0.1, DEFAULT_ORDERS)
>>> round(rdp_to_dp(313 * rr, DEFAULT_ORDERS, delta=1e-6), 3)
9.985
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprag_core.budget import Budget
from dprag_core.validation import positive_finite, probability

__all__ = [
    "DEFAULT_ORDERS",
    "approximate_rdp_to_dp",
    "bounded_range_rdp",
    "gaussian_rdp",
    "pure_dp_rdp",
    "rdp_to_dp",
]

FloatArray = NDArray[np.float64]

#: Rényi orders used by default: fine steps where small orders matter (many
#: composed steps, small ε) and a geometric tail up to 1e6, which the tight
#: conversion of a pure-DP curve needs when few steps are composed.
DEFAULT_ORDERS: FloatArray = np.unique(
    np.concatenate(
        [
            np.round(np.arange(1.01, 2.0, 0.01), 2),
            np.round(np.arange(2.0, 10.0, 0.05), 2),
            np.round(np.arange(10.0, 100.0, 0.5), 1),
            np.arange(100.0, 1000.0, 5.0),
            np.geomspace(1e3, 1e6, 201),
        ]
    )
)
DEFAULT_ORDERS.setflags(write=False)


def _orders(orders: ArrayLike) -> FloatArray:
    try:
        a = np.asarray(orders, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("orders must be a 1-D array of numbers > 1") from None
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 1):
        raise ValueError(
            f"orders must be a non-empty 1-D array of finite numbers > 1, got shape {a.shape}"
            + (f" and minimum {float(np.min(a))!r}" if a.size else "")
        )
    return a


def _log_cosh(x: FloatArray) -> FloatArray:
    """log(cosh(x)), accurate for tiny |x| and finite for huge |x|."""
    ax = np.abs(x)
    small = ax < 20.0
    out = np.empty_like(ax)
    out[small] = np.log1p(2.0 * np.sinh(ax[small] / 2.0) ** 2)
    big = ax[~small]
    out[~small] = big + np.log1p(np.exp(-2.0 * big)) - math.log(2.0)
    return out


def pure_dp_rdp(epsilon: float, orders: ArrayLike = DEFAULT_ORDERS) -> FloatArray:
    """The exact RDP curve of an ε-DP mechanism (tight: randomized response attains it).

    RR(ε, α) = log((e^{αε} + e^{(1−α)ε}) / (1 + e^ε)) / (α − 1) ≤ min(ε, αε²/2).

    >>> round(float(pure_dp_rdp(1.0, [2.0])[0]), 4)  # log((e^2 + e^-1) / (1 + e))
    0.7353
    """
    eps = positive_finite("epsilon", epsilon)
    a = _orders(orders)
    return (_log_cosh((a - 0.5) * eps) - _log_cosh(np.array([eps / 2.0]))) / (a - 1.0)


def bounded_range_rdp(epsilon: float, orders: ArrayLike = DEFAULT_ORDERS) -> FloatArray:
    """RDP curve of an ε-bounded-range mechanism (exponential mechanism with ε).

    min(αε²/8, RR(ε, α)): ε²/8-zCDP (Cesar & Rogers 2021) and ε-DP.

    >>> float(bounded_range_rdp(0.1, [10.0])[0])  # 10 * 0.01 / 8
    0.0125
    """
    a = _orders(orders)
    eps = positive_finite("epsilon", epsilon)
    with np.errstate(over="ignore"):  # ε² past float range: that term is +inf, the min is RR
        return np.minimum(a * eps * eps / 8.0, pure_dp_rdp(eps, a))


def gaussian_rdp(
    sigma: float, orders: ArrayLike = DEFAULT_ORDERS, *, sensitivity: float = 1.0
) -> FloatArray:
    """RDP curve of the Gaussian mechanism N(0, σ²) with L2 sensitivity Δ: αΔ²/(2σ²).

    >>> float(gaussian_rdp(2.0, [3.0], sensitivity=2.0)[0])
    1.5
    """
    s = positive_finite("sigma", sigma)
    d = positive_finite("sensitivity", sensitivity)
    return _orders(orders) * d * d / (2.0 * s * s)


def rdp_to_dp(rdp: ArrayLike, orders: ArrayLike = DEFAULT_ORDERS, *, delta: float) -> float:
    """The smallest ε over the orders such that the RDP curve implies (ε, δ)-DP.

    Improved conversion (Canonne, Kamath & Steinke 2020, Prop. 12), identical to
    ``dp_accounting.rdp.compute_epsilon`` including its shortcut to ε = 0 when
    δ² + expm1(−rdp) > 0 (total variation below δ).

    >>> round(rdp_to_dp(gaussian_rdp(1.0), delta=1e-5), 4)
    4.7284
    """
    a = _orders(orders)
    d = probability("delta", delta, allow_zero=False)
    try:
        r = np.asarray(rdp, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("rdp must be an array of numbers >= 0") from None
    if r.shape != a.shape:
        raise ValueError(f"rdp must have the shape of orders {a.shape}, got {r.shape}")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError("rdp must hold numbers >= 0 (inf allowed), got NaN or a negative value")
    with np.errstate(over="ignore", invalid="ignore"):
        eps = r + np.log1p(-1.0 / a) - (math.log(d) + np.log(a)) / (a - 1.0)
    eps = np.where(d * d + np.expm1(-r) > 0, 0.0, eps)
    return float(max(0.0, float(np.min(eps))))


def approximate_rdp_to_dp(
    rdp: ArrayLike,
    orders: ArrayLike = DEFAULT_ORDERS,
    *,
    delta: float,
    approximate_delta: float,
) -> Budget:
    """(ε, δ + δ₁) for a curve that holds δ₁-approximately (δ₁ = ``approximate_delta``).

    With probability ≥ 1 − δ₁ (over a mixture decomposition of both output
    distributions, Bun & Steinke 2016 Def. 8.1) the RDP curve holds; converting
    that part with ``delta`` and adding δ₁ for the rest gives (ε, δ + δ₁)-DP.
    Used for PTR (DP-KSA Theorem A.10) and for composed (ε₀, δ₀)-DP steps.

    >>> b = approximate_rdp_to_dp(gaussian_rdp(1.0), delta=1e-5, approximate_delta=1e-6)
    >>> b.delta == 1e-5 + 1e-6
    True
    """
    d1 = probability("approximate_delta", approximate_delta)
    eps = rdp_to_dp(rdp, orders, delta=delta)
    total = delta + d1
    if total >= 1:
        raise ValueError(f"delta + approximate_delta must be < 1, got {total!r}")
    return Budget(max(eps, 1e-300), total)
