"""Accounting and calibration of DP-KSA: FindBestK + TopKWithPTR (Tang et al. 2026, App. A).

One DP-KSA query composes

- FindBestK, an exponential mechanism with ε_k: ε_k-bounded-range, RDP
  min(αε_k²/8, RR(ε_k, α)) (tighter than the paper's Theorem A.9, which uses the
  pure-DP curve min(αε²/2, RR));
- the PTR test, the Gaussian mechanism on max(2, d_k) with sensitivity 2 and
  noise std 2σ: RDP α·2²/(2(2σ)²) = α/(2σ²) (Theorem A.10);
- the release of the exact top-k̂ set, which holds δ₁-approximately (probability
  δ₁ of passing when the set is unstable).

Two valid bounds give the ε at the conversion δ_conv of the first two steps
(the release's δ₁ is then added: with probability ≥ 1 − δ₁ the pair of output
distributions is the good pair, so any (ε, δ_conv) bound of the good pair gives
(ε, δ_conv + δ₁)):

- ``"rdp"``: the curves add up (Theorem A.3) and convert with the improved RDP
  conversion (:func:`dprag_core.accounting.rdp.approximate_rdp_to_dp`);
- ``"pld"``: the exact privacy-loss distribution of a dominating pair. FindBestK is
  ε_k-DP, so randomized response with ε_k dominates it (privacy loss ±ε_k); the
  PTR Gaussian is dominated by N(0, 1) vs N(1/σ, 1) (loss N(μ, 2μ), μ = 1/(2σ²));
  dominating pairs compose, adaptively too (Zhu, Dong & Wang 2022, Thm. 10), and
  the composed hockey-stick divergence is in closed form,
  δ(ε) = p·δ_G(ε − ε_k) + (1 − p)·δ_G(ε + ε_k), p = e^{ε_k}/(1 + e^{ε_k}),
  δ_G(x) = Φ(r/2 − x/r) − e^x·Φ(−r/2 − x/r), r = 1/σ (:func:`ksa_pld_epsilon`).

The smaller ε wins (``KSAParameters.bound`` says which): PLD where the Gaussian
dominates (3–7% smaller ε for the same noise), RDP where FindBestK's
bounded-range curve (which the PLD's pure-DP pair does not use) matters most.
The final answer is post-processing of (k̂, pass, keyword set).

:func:`calibrate_ksa` inverts this: for a target (ε, δ) it splits δ into δ₁ and
δ_conv, picks the share of ε given to FindBestK, and finds the smallest σ whose
ε is ≤ the target (the calibration search,
:func:`~dprag_core.accounting.search.boundary`: never over the target).

>>> p = calibrate_ksa(Budget(5.0, 1e-4))
>>> p.achieved.epsilon <= 5.0 and p.achieved.epsilon >= 0.99 * 5.0
True
>>> p.achieved.delta <= 1e-4
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq
from scipy.special import expit, log_ndtr
from scipy.stats import norm

from dprag_core.accounting.rdp import (
    DEFAULT_ORDERS,
    bounded_range_rdp,
    gaussian_rdp,
    rdp_to_dp,
)
from dprag_core.accounting.search import boundary
from dprag_core.budget import Budget, positive_budget
from dprag_core.validation import positive_finite, positive_int, probability

__all__ = [
    "KSA_BOUNDS",
    "KSAParameters",
    "calibrate_ksa",
    "ksa_epsilons",
    "ksa_guarantee",
    "ksa_pld_epsilon",
    "ksa_rdp",
    "required_gap",
]

#: The valid bounds on one query's ε, in the order ties are broken.
KSA_BOUNDS = ("rdp", "pld")

_SHARES = tuple(round(0.05 * i, 2) for i in range(1, 19))  # 0.05 .. 0.90


@dataclass(frozen=True)
class KSAParameters:
    """Calibrated DP-KSA noise: FindBestK's ε_k, PTR's σ and δ₁, the achieved guarantee
    and the bound (one of :data:`KSA_BOUNDS`) that certified it.

    >>> KSAParameters(1.0, 2.0, 1e-5, Budget(2.0, 2e-5)).sigma
    2.0
    """

    epsilon_k: float
    sigma: float
    delta_ptr: float
    achieved: Budget
    bound: str = "rdp"


def ksa_rdp(
    epsilon_k: float, sigma: float, orders: ArrayLike = DEFAULT_ORDERS
) -> NDArray[np.float64]:
    """RDP curve of FindBestK (ε_k, bounded range) composed with the PTR Gaussian (σ).

    >>> float(ksa_rdp(0.1, 1.0, [2.0])[0])  # min(2·0.01/8, RR) + 2/(2·1)
    1.0025
    """
    eps_k = positive_finite("epsilon_k", epsilon_k)
    s = positive_finite("sigma", sigma)
    # Gaussian with std 2σ on a sensitivity-2 statistic == sensitivity 1 at std σ.
    return bounded_range_rdp(eps_k, orders) + gaussian_rdp(2.0 * s, orders, sensitivity=2.0)


def _pld_delta(epsilon: float, epsilon_k: float, ratio: float) -> float:
    """Hockey-stick divergence at ``epsilon`` of RR(ε_k) ⊗ Gaussian(ratio = Δ/std)."""
    total = 0.0
    for weight, shift in ((expit(epsilon_k), -epsilon_k), (expit(-epsilon_k), epsilon_k)):
        x = epsilon + shift
        a = math.exp(float(log_ndtr(ratio / 2 - x / ratio)))
        b = math.exp(x + float(log_ndtr(-ratio / 2 - x / ratio)))
        total += weight * (a - b)
    return total


def ksa_pld_epsilon(epsilon_k: float, sigma: float, *, delta: float) -> float:
    """The smallest ε (to 1e-9, rounded up) with δ(ε) ≤ ``delta`` for FindBestK (ε_k) + PTR (σ).

    Exact for the dominating pair of the module docstring (``"pld"``), without δ₁.

    >>> round(ksa_pld_epsilon(1.0, 2.0, delta=5e-5), 3)
    2.75
    """
    eps_k = positive_finite("epsilon_k", epsilon_k)
    ratio = 1.0 / positive_finite("sigma", sigma)
    d = probability("delta", delta, allow_zero=False)

    def excess(epsilon: float) -> float:
        return _pld_delta(epsilon, eps_k, ratio) - d

    if excess(0.0) <= 0:
        return 0.0
    hi = eps_k + ratio * ratio + 1.0
    while excess(hi) > 0:
        hi *= 2.0
    root = float(brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-12))
    up = root + 1e-9 * max(1.0, root)
    while excess(up) > 0:  # pragma: no cover - brentq brackets the root to 1e-12
        up += 1e-9 * max(1.0, up)
    return up


def ksa_epsilons(
    epsilon_k: float, sigma: float, *, delta: float, orders: ArrayLike = DEFAULT_ORDERS
) -> dict[str, float]:
    """Each valid bound's ε of FindBestK (ε_k) + PTR (σ) at conversion δ (δ₁ not included).

    >>> e = ksa_epsilons(1.0, 2.0, delta=5e-5)
    >>> round(e["rdp"], 3), round(e["pld"], 3)
    (2.917, 2.75)
    """
    return {
        "rdp": rdp_to_dp(ksa_rdp(epsilon_k, sigma, orders), orders, delta=delta),
        "pld": ksa_pld_epsilon(epsilon_k, sigma, delta=delta),
    }


def _tightest(
    epsilon_k: float, sigma: float, delta_ptr: float, delta: float, orders: ArrayLike
) -> tuple[Budget, str]:
    d1 = probability("delta_ptr", delta_ptr, allow_zero=False)
    eps = ksa_epsilons(epsilon_k, sigma, delta=delta, orders=orders)
    bound = min(KSA_BOUNDS, key=lambda b: eps[b])  # first minimal bound wins a tie
    total = delta + d1
    if total >= 1:
        raise ValueError(f"delta + delta_ptr must be < 1, got {total!r}")
    return Budget(max(eps[bound], 1e-300), total), bound


def ksa_guarantee(
    epsilon_k: float,
    sigma: float,
    *,
    delta_ptr: float,
    delta: float,
    orders: ArrayLike = DEFAULT_ORDERS,
) -> Budget:
    """The (ε, δ + δ₁) of one DP-KSA query under the tightest valid bound;
    ``delta`` is the conversion δ, ``delta_ptr`` = δ₁.

    >>> g = ksa_guarantee(1.0, 2.0, delta_ptr=5e-5, delta=5e-5)
    >>> round(g.epsilon, 3), g.delta
    (2.75, 0.0001)
    """
    return _tightest(epsilon_k, sigma, delta_ptr, delta, orders)[0]


def required_gap(params: KSAParameters, *, k_candidates: int = 20) -> float:
    """A rough gap d_k that DP-KSA needs to succeed about half of the time.

    max(PTR: 2 + 2σ·Φ⁻¹(1 − δ₁), FindBestK: (4/ε_k)·ln(2·k_candidates)): the
    PTR test passes with probability 1/2 at the first value; the second makes the
    best gap beat ``k_candidates`` zero-gap competitors with probability ≈ 1/2.
    Used only to choose the ε split (utility, not privacy).

    >>> round(required_gap(KSAParameters(1.0, 1.0, 1e-4, Budget(1.0))), 2)
    14.76
    """
    n = positive_int("k_candidates", k_candidates)
    ptr = 2.0 + 2.0 * params.sigma * float(norm.isf(params.delta_ptr))
    em = 4.0 / params.epsilon_k * math.log(2.0 * n)
    return max(ptr, em)


def _sigma_for(
    target: Budget, epsilon_k: float, delta_ptr: float, orders: NDArray[np.float64]
) -> tuple[float, Budget, str] | None:
    """The smallest σ for which a bound certifies ε ≤ target (the calibration search);
    None if FindBestK alone exceeds the target."""
    conv = target.delta - delta_ptr
    find_best_k = bounded_range_rdp(epsilon_k, orders)  # the same for every σ

    def fits(sigma: float) -> bool:
        """Some bound certifies ε ≤ target (PLD: δ(target) ≤ δ_conv, exact, no root finding)."""
        curve = find_best_k + orders / (2.0 * sigma * sigma)  # + PTR, as in ksa_rdp
        rdp = rdp_to_dp(curve, orders, delta=conv)
        return rdp <= target.epsilon or _pld_delta(target.epsilon, epsilon_k, 1.0 / sigma) <= conv

    hi = 1.0
    while not fits(hi):
        hi *= 2.0
        if hi > 1e8:
            return None
    sigma = boundary(fits, good=hi, bad=1e-3, geometric=True)

    def reported(s: float) -> bool:  # the ε reported (its PLD root rounded up) fits too
        return _tightest(epsilon_k, s, delta_ptr, conv, orders)[0].epsilon <= target.epsilon

    if not reported(sigma):  # rare: only the root's rounding is over; a little more noise
        more = sigma * (1 + 1e-6)
        while not reported(more):
            more = sigma + 2 * (more - sigma)
        sigma = boundary(reported, good=more, bad=sigma, geometric=True)
    got, bound = _tightest(epsilon_k, sigma, delta_ptr, conv, orders)
    return sigma, got, bound


def calibrate_ksa(
    total: Budget,
    *,
    epsilon_share: float | None = None,
    delta_share: float = 0.5,
    k_candidates: int = 20,
    orders: ArrayLike = DEFAULT_ORDERS,
) -> KSAParameters:
    """FindBestK's ε_k and PTR's (σ, δ₁) such that one DP-KSA query is ``total``-DP.

    δ₁ = ``delta_share``·δ; the remaining δ goes to the RDP conversion.
    ε_k = ``epsilon_share``·ε; with ``None`` the share (0.05 … 0.90) minimising
    :func:`required_gap` over ``k_candidates`` values of k is chosen (a public,
    data-independent choice). σ is then the smallest that keeps the achieved ε
    ≤ ``total.epsilon`` (the calibration search); ``achieved.delta`` = δ.

    >>> p = calibrate_ksa(Budget(2.0, 1e-4), epsilon_share=0.5)
    >>> p.epsilon_k, p.delta_ptr
    (1.0, 5e-05)
    """
    total = positive_budget("total", total)
    if total.delta <= 0:
        raise ValueError("total.delta must be > 0 for DP-KSA (PTR needs a failure probability)")
    ds = probability("delta_share", delta_share, allow_zero=False)
    n = positive_int("k_candidates", k_candidates)
    grid = np.asarray(orders, dtype=np.float64)
    if epsilon_share is None:
        shares: tuple[float, ...] = _SHARES
    else:
        share = probability("epsilon_share", epsilon_share, allow_zero=False)
        shares = (share,)
    delta_ptr = ds * total.delta
    best: KSAParameters | None = None
    for share in shares:
        found = _sigma_for(total, share * total.epsilon, delta_ptr, grid)
        if found is None:
            continue
        params = KSAParameters(share * total.epsilon, found[0], delta_ptr, found[1], found[2])
        if best is None or required_gap(params, k_candidates=n) < required_gap(
            best, k_candidates=n
        ):
            best = params
    if best is None:
        raise ValueError(
            f"epsilon_share={epsilon_share!r} leaves no room for the PTR test within "
            f"epsilon={total.epsilon:g}; use a smaller share"
        )
    return best
