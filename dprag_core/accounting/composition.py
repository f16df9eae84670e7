"""Adaptive composition of c identical (ε₀, δ₀)-DP steps, and the largest c that fits.

Five bounds, each valid for c adaptively chosen (ε₀, δ₀)-DP steps; a count is
certified as soon as one of them certifies it, so :func:`max_compositions`
takes the maximum and reports which bound won:

- ``sequential``: (cε₀, cδ₀) (Dwork & Roth Thm. 3.16).
- ``advanced``: Dwork, Rothblum & Vadhan 2010 (Dwork & Roth Thm. 3.20):
  (√(2c ln(1/δ'))ε₀ + cε₀(e^{ε₀} − 1), δ' + cδ₀); all δ left after cδ₀ is the slack δ'.
- ``optimal``: the exact optimal composition (Kairouz, Oh & Viswanath 2015,
  Thm. 3.3), computed in closed form from the binomial privacy-loss
  distribution of c randomized-response steps. It equals (up to its
  discretisation, which only makes it larger) ``dp_accounting``'s
  ``from_privacy_parameters(DifferentialPrivacyParameters(ε₀, δ₀))
  .self_compose(c).get_epsilon_for_delta(δ)``; the tests pin it against that.
  With δ₀ > 0 the total δ is 1 − (1 − δ₀)^c (1 − δ_pure) (KOV Thm. 3.3).
- ``rdp``: c × the exact pure-DP RDP curve RR(ε₀, ·), converted with the improved
  conversion; with δ₀ > 0 it holds cδ₀-approximately, so the conversion gets
  δ − cδ₀ (:func:`dprag_core.accounting.rdp.approximate_rdp_to_dp`).
- ``bounded_range_rdp``: c × min(αε₀²/8, RR(ε₀, α)), only for steps that are
  exponential mechanisms (``bounded_range=True``, δ₀ = 0).

A composed guarantee "fits" a total budget with the relative slack
:data:`dprag_core.budget.FIT_SLACK` (1e-12, as :meth:`dprag_core.budget.Budget.covers`), shared by
the corpus accountant and the other calibrations, so that 100 steps of ε₀ = 0.1
fit ε = 10 (in floating point 10 // 0.1 == 99).

:func:`max_rdp_compositions` is the same search for any step given by its RDP
curve (e.g. DPSparseVote's SVT + exponential-mechanism step).

Regression (total ε = 10, δ = 1e-6, ε₀ = 0.1): sequential 100, advanced 216,
rdp 313, optimal 346, bounded_range_rdp 1231.

>>> r = max_compositions(Budget(0.1), Budget(10.0, 1e-6))
>>> (r.count, r.bound)
(346, 'optimal')
>>> dict(r.counts)
{'sequential': 100, 'advanced': 216, 'optimal': 346, 'rdp': 313}
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaln

from dprag_core.accounting.rdp import (
    DEFAULT_ORDERS,
    bounded_range_rdp,
    pure_dp_rdp,
    rdp_to_dp,
)
from dprag_core.budget import FIT_SLACK, Budget, positive_budget
from dprag_core.validation import positive_int, probability

__all__ = [
    "BOUNDS",
    "MAX_COUNT",
    "CompositionCount",
    "advanced_composition",
    "composition_fits",
    "max_compositions",
    "max_rdp_compositions",
    "optimal_composition",
    "rdp_composition",
    "sequential_composition",
]

#: The bounds :func:`max_compositions` tries, in the order ties are broken.
BOUNDS = ("sequential", "advanced", "optimal", "rdp", "bounded_range_rdp")
#: Counts are searched up to this value (a larger answer is reported as MAX_COUNT).
MAX_COUNT = 10**9
#: Relative slack of every "fits within a budget" comparison in the accounting.


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class CompositionCount:
    """How many compositions of a step fit a budget: the best ``count``, the
    ``bound`` that certified it, and every bound's count in ``counts``.

    >>> max_compositions(Budget(1.0), Budget(2.0)).count
    2
    """

    count: int
    bound: str
    counts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))


def sequential_composition(step: Budget, count: int) -> Budget:
    """Basic composition: ``count`` steps of (ε₀, δ₀) are (count·ε₀, count·δ₀)-DP.

    >>> sequential_composition(Budget(0.5, 1e-7), 4)
    Budget(epsilon=2.0, delta=4e-07)
    """
    s = positive_budget("step", step)
    c = positive_int("count", count)
    if c * s.delta >= 1:
        raise ValueError(f"count * step.delta must be < 1, got {c * s.delta!r}")
    return Budget(c * s.epsilon, c * s.delta)


def _advanced_epsilon(step: Budget, count: int, delta_slack: float) -> float:
    e0 = step.epsilon
    return math.sqrt(2.0 * count * math.log(1.0 / delta_slack)) * e0 + count * e0 * math.expm1(e0)


def advanced_composition(step: Budget, count: int, *, delta_slack: float) -> Budget:
    """Dwork–Rothblum–Vadhan: (√(2k ln(1/δ'))ε₀ + kε₀(e^{ε₀} − 1), δ' + kδ₀).

    >>> b = advanced_composition(Budget(0.1), 216, delta_slack=1e-6)
    >>> round(b.epsilon, 4), b.delta
    (9.9972, 1e-06)
    """
    s = positive_budget("step", step)
    c = positive_int("count", count)
    d = probability("delta_slack", delta_slack, allow_zero=False)
    total_delta = d + c * s.delta
    if total_delta >= 1:
        raise ValueError(f"delta_slack + count * step.delta must be < 1, got {total_delta!r}")
    return Budget(_advanced_epsilon(s, c, d), total_delta)


def _binomial_window(c: int, log_q: float, log_1mq: float) -> tuple[np.ndarray, float]:
    """Indices i of Binomial(c, q) holding all but a negligible mass, and a bound on
    the mass left out (the pmf is unimodal, so each omitted point is at most the
    window edge next to it)."""
    q = math.exp(log_q)
    mean = c * q
    width = 60.0 * math.sqrt(c * q * (1.0 - q)) + 100.0
    lo = max(0, math.floor(mean - width))
    hi = min(c, math.ceil(mean + width))
    i = np.arange(lo, hi + 1, dtype=np.float64)
    log_pmf = gammaln(c + 1.0) - gammaln(i + 1.0) - gammaln(c - i + 1.0)
    log_pmf += i * log_q + (c - i) * log_1mq
    edges = [log_pmf[0]] if lo > 0 else []
    edges += [log_pmf[-1]] if hi < c else []
    omitted = (c + 1.0) * math.exp(max(edges)) if edges else 0.0
    return np.stack([i, log_pmf]), omitted


def _optimal_epsilon(e0: float, d0: float, c: int, delta: float) -> float:
    # Randomized response with ε₀: under P the loss is +ε₀ w.p. 1/(1+e^{-ε₀}) and −ε₀
    # otherwise; c steps give loss L_i = ε₀(c − 2i) with i ~ Binomial(c, 1/(1+e^{ε₀})).
    # δ_pure(ε) = Σ_{L_i > ε} P_i (1 − e^{ε − L_i}), and 1 − (1−δ)/(1−δ₀)^c is what it may use.
    target = -math.expm1(math.log1p(-delta) - c * math.log1p(-d0))
    log_q = -float(np.logaddexp(0.0, e0))
    log_1mq = -float(np.logaddexp(0.0, -e0))
    (i, log_p), omitted = _binomial_window(c, log_q, log_1mq)
    target -= omitted  # omitted mass is counted as infinite privacy loss
    if target < 0:
        return math.inf
    loss = e0 * (c - 2.0 * i)  # decreasing in i
    a_cum = np.concatenate([[0.0], np.cumsum(np.exp(log_p))])  # A_j = Σ_{i<j} P_i
    log_b = np.concatenate([[-np.inf], np.logaddexp.accumulate(log_p - loss)])  # log Σ Q_i
    with np.errstate(over="ignore", invalid="ignore"):
        delta_at = a_cum[:-1] - np.exp(loss + log_b[:-1])  # δ_pure(L_j)
    above = np.nonzero(delta_at > target)[0]
    j = int(above[0]) if above.size else loss.size
    # On (L_j, L_{j-1}] δ_pure(ε) = A_j − e^ε B_j: solve A_j − e^ε B_j = target.
    if a_cum[j] <= target:
        return 0.0
    return max(0.0, math.log(a_cum[j] - target) - float(log_b[j]))


def optimal_composition(step: Budget, count: int, *, delta: float) -> float:
    """The optimal (Kairouz–Oh–Viswanath) ε of ``count`` adaptive (ε₀, δ₀) steps at total δ.

    Returns ``inf`` when ``delta`` ≤ 1 − (1 − δ₀)^count (the δ₀ mass alone exceeds it).

    >>> round(optimal_composition(Budget(0.1), 346, delta=1e-6), 4)
    9.986
    """
    s = positive_budget("step", step)
    c = positive_int("count", count)
    d = probability("delta", delta)
    return _optimal_epsilon(s.epsilon, s.delta, c, d)


def rdp_composition(
    step: Budget, count: int, *, delta: float, bounded_range: bool = False
) -> float:
    """ε at total δ of ``count`` steps composed through their RDP curve.

    The curve is the exact pure-DP curve RR(ε₀, α), or min(αε₀²/8, RR) with
    ``bounded_range=True`` (exponential mechanisms, δ₀ must be 0). A step with
    δ₀ > 0 holds the curve δ₀-approximately: the conversion then uses
    δ − count·δ₀ and ``inf`` is returned when that is ≤ 0.

    >>> round(rdp_composition(Budget(0.1), 1231, delta=1e-6, bounded_range=True), 4)
    9.998
    """
    s = positive_budget("step", step)
    c = positive_int("count", count)
    d = probability("delta", delta)
    br = _flag("bounded_range", bounded_range)
    if br and s.delta > 0:
        raise ValueError(f"bounded_range=True needs a pure step (step.delta == 0), got {s.delta!r}")
    return _rdp_epsilon(s, c, d, br)


def _rdp_epsilon(step: Budget, count: int, delta: float, bounded_range: bool) -> float:
    conversion_delta = delta - count * step.delta
    if conversion_delta <= 0:
        return math.inf
    curve = bounded_range_rdp if bounded_range else pure_dp_rdp
    return rdp_to_dp(count * curve(step.epsilon, DEFAULT_ORDERS), delta=conversion_delta)


def _composed(bound: str, step: Budget, count: int, delta: float) -> tuple[float, float]:
    """(ε, δ) of ``count`` steps under ``bound``, spending at most ``delta``."""
    if bound == "sequential":
        return count * step.epsilon, count * step.delta
    if bound == "optimal":
        return _optimal_epsilon(step.epsilon, step.delta, count, delta), delta
    slack = delta - count * step.delta
    if bound == "advanced":
        return (_advanced_epsilon(step, count, slack) if slack > 0 else math.inf), delta
    return _rdp_epsilon(step, count, delta, bound == "bounded_range_rdp"), delta


def composition_fits(bound: str, step: Budget, count: int, total: Budget) -> bool:
    """True when ``bound`` certifies that ``count`` steps stay within ``total``.

    >>> composition_fits("sequential", Budget(0.1), 100, Budget(10.0))
    True
    """
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    s = positive_budget("step", step)
    t = positive_budget("total", total)
    c = positive_int("count", count)
    eps, delta = _composed(bound, s, c, t.delta)
    return eps <= t.epsilon * (1 + FIT_SLACK) and delta <= t.delta * (1 + FIT_SLACK)


def _fits_count(bound: str, step: Budget, total: Budget, count: int) -> bool:
    return composition_fits(bound, step, count, total)


def _rdp_fits(curve: NDArray[np.float64], total: Budget, count: int) -> bool:
    return rdp_to_dp(count * curve, delta=total.delta) <= total.epsilon * (1 + FIT_SLACK)


def _largest(fits: Callable[[int], bool]) -> int:
    """Largest c in [0, MAX_COUNT] with fits(c), for a predicate true up to some c."""
    good, bad = 0, 1
    while bad <= MAX_COUNT and fits(bad):
        good, bad = bad, 2 * bad
    if bad > MAX_COUNT:
        if fits(MAX_COUNT):
            return MAX_COUNT
        bad = MAX_COUNT
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def max_compositions(
    step: Budget, total: Budget, *, bounded_range: bool = False
) -> CompositionCount:
    """The largest c such that c adaptive compositions of ``step`` stay within ``total``.

    Takes the maximum over the sequential, advanced, optimal (KOV) and pure-DP
    RDP bounds, plus the bounded-range RDP bound when ``bounded_range=True``
    (the step is an exponential mechanism; it must then be pure). Ties go to
    the first bound in :data:`BOUNDS`. The step itself must fit within ``total``.

    >>> r = max_compositions(Budget(0.1), Budget(10.0, 1e-6), bounded_range=True)
    >>> r.count, r.bound
    (1231, 'bounded_range_rdp')
    """
    s = positive_budget("step", step)
    t = positive_budget("total", total)
    br = _flag("bounded_range", bounded_range)
    if not t.covers(s):
        raise ValueError(
            f"step must fit within total (step.epsilon <= {t.epsilon:g} and "
            f"step.delta <= {t.delta:g}), got epsilon={s.epsilon:g}, delta={s.delta:g}"
        )
    if br and s.delta > 0:
        raise ValueError(f"bounded_range=True needs a pure step (step.delta == 0), got {s.delta!r}")
    bounds = BOUNDS if br else BOUNDS[:-1]
    counts = {b: _largest(functools.partial(_fits_count, b, s, t)) for b in bounds}
    best = max(bounds, key=lambda b: counts[b])  # first maximal bound wins a tie
    return CompositionCount(counts[best], best, counts)


def max_rdp_compositions(curve: ArrayLike, total: Budget) -> int:
    """The largest c such that c adaptive steps with RDP ``curve`` stay within ``total``.

    ``curve`` is one step's RDP ε at each of :data:`~dprag_core.accounting.rdp.DEFAULT_ORDERS`;
    c × curve is converted with the improved conversion at ``total.delta``. Returns
    0 when ``total.delta`` is 0 (RDP certifies no pure guarantee) or one step does
    not fit; at most :data:`MAX_COUNT`.

    >>> max_rdp_compositions(pure_dp_rdp(0.1, DEFAULT_ORDERS), Budget(10.0, 1e-6))
    313
    """
    t = positive_budget("total", total)
    c = np.asarray(curve, dtype=np.float64)
    if c.shape != DEFAULT_ORDERS.shape or not np.all(c >= 0):
        raise ValueError(
            f"curve must hold one value >= 0 per order of DEFAULT_ORDERS "
            f"({DEFAULT_ORDERS.size}), got shape {c.shape}"
        )
    if t.delta == 0:
        return 0
    return _largest(functools.partial(_rdp_fits, c, t))
