"""Statistical privacy audit: a high-confidence lower bound on a mechanism's ε.

Run a mechanism many times on a neighbouring pair (D, D') and pass the discrete
outputs here (encode ⊥/None as a sentinel such as -1; bin continuous outputs
first, which is post-processing and cannot raise ε). For every output o seen,
:func:`audit_epsilon` takes a one-sided Clopper–Pearson lower bound of P[o|D]
and upper bound of P[o|D'] (and the reverse direction), with a Bonferroni
correction over all (outputs × 2 directions × 2 bounds), and reports

    max_o  ln((P_lo[o|D] − δ) / P_hi[o|D'])      (outputs with P_lo ≤ δ skipped).

With probability ≥ ``confidence`` (over the sampling) every term is ≤ the true
privacy loss of the singleton event {o}, so a mechanism that is (ε, δ)-DP yields
a bound ≤ ε. A bound above the claimed ε is a proof (at that confidence) that
the claim is false. docs/design.md §9: each mechanism is audited on a worst-case pair,
and a deliberately broken variant must make the same audit exceed its claim.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> eps = 1.0
>>> p = np.exp(eps) / (1 + np.exp(eps))  # randomized response, exactly eps-DP
>>> on_d = (rng.random(100_000) < p).astype(int)
>>> on_d_prime = (rng.random(100_000) >= p).astype(int)
>>> 0.9 < audit_epsilon(on_d, on_d_prime).epsilon_lower_bound <= eps
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import beta

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_int, probability

__all__ = ["AuditResult", "audit_epsilon", "clopper_pearson", "run_audit"]

T = TypeVar("T")


@dataclass(frozen=True)
class AuditResult:
    """The outcome of :func:`audit_epsilon`.

    ``epsilon_lower_bound`` is 0.0 when no output gives a positive bound;
    ``worst_output`` is the output that attains it (None then) and ``direction``
    is ``"D>D'"`` (P[o|D] large, P[o|D'] small), ``"D'>D"`` or ``""``.

    >>> AuditResult(0.0, None, "", 10, 10).epsilon_lower_bound
    0.0
    """

    epsilon_lower_bound: float
    worst_output: Any
    direction: str
    trials_d: int
    trials_d_prime: int


def clopper_pearson(
    successes: NDArray[np.int64], trials: int, *, alpha: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One-sided Clopper–Pearson bounds, each holding with probability ≥ 1 − ``alpha``.

    Returns (lower, upper) arrays for the success probability.

    >>> lo, hi = clopper_pearson(np.array([0, 50]), 100, alpha=0.05)
    >>> float(lo[0]), bool(hi[0] < 0.03), bool(lo[1] < 0.5 < hi[1])
    (0.0, True, True)
    """
    k = np.asarray(successes, dtype=np.float64)
    n = float(trials)
    with np.errstate(invalid="ignore"):
        lower = np.where(k > 0, beta.ppf(alpha, k, n - k + 1), 0.0)
        upper = np.where(k < n, beta.ppf(1 - alpha, k + 1, n - k), 1.0)
    return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)


def _as_outputs(name: str, samples: ArrayLike) -> NDArray[Any]:
    arr = np.asarray(samples)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of outputs, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold integer or float outputs, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must hold finite outputs (encode ⊥ as a sentinel such as -1)")
    return arr


def audit_epsilon(
    samples_d: ArrayLike,
    samples_d_prime: ArrayLike,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> AuditResult:
    """Lower-bound ε from outputs of a mechanism run on D and on D' (module docstring).

    >>> r = audit_epsilon([0, 0, 1, 1], [0, 0, 1, 1])
    >>> (r.epsilon_lower_bound, r.direction)
    (0.0, '')
    """
    out_d = _as_outputs("samples_d", samples_d)
    out_dp = _as_outputs("samples_d_prime", samples_d_prime)
    d = probability("delta", delta)
    conf = probability("confidence", confidence, allow_zero=False)

    outputs, inverse = np.unique(np.concatenate([out_d, out_dp]), return_inverse=True)
    inverse = inverse.reshape(-1)
    n_d, n_dp = out_d.size, out_dp.size
    count_d = np.bincount(inverse[:n_d], minlength=outputs.size)
    count_dp = np.bincount(inverse[n_d:], minlength=outputs.size)

    alpha = (1.0 - conf) / (outputs.size * 2 * 2)  # Bonferroni: outputs x directions x bounds
    lo_d, hi_d = clopper_pearson(count_d, n_d, alpha=alpha)
    lo_dp, hi_dp = clopper_pearson(count_dp, n_dp, alpha=alpha)

    best, worst, direction = 0.0, None, ""
    for label, lo, hi in (("D>D'", lo_d, hi_dp), ("D'>D", lo_dp, hi_d)):
        ok = lo > d
        if not np.any(ok):
            continue
        bounds = np.full(outputs.size, -np.inf)
        bounds[ok] = np.log((lo[ok] - d) / hi[ok])
        i = int(np.argmax(bounds))
        if bounds[i] > best:
            best, worst, direction = float(bounds[i]), outputs[i].item(), label
    return AuditResult(
        epsilon_lower_bound=best if math.isfinite(best) else 0.0,
        worst_output=worst,
        direction=direction,
        trials_d=n_d,
        trials_d_prime=n_dp,
    )


def run_audit(
    sample: Callable[[T, int, np.random.Generator], ArrayLike],
    d: T,
    d_prime: T,
    *,
    trials: int,
    delta: float = 0.0,
    confidence: float = 0.95,
    rng: RngLike = None,
) -> AuditResult:
    """Draw ``trials`` outputs on ``d`` and on ``d_prime`` with a vectorised sampler, then audit.

    ``sample(input, n, generator)`` must return a 1-D array of n discrete outputs.

    >>> def coin(p, n, gen):
    ...     return (gen.random(n) < p).astype(int)
    >>> run_audit(coin, 0.5, 0.5, trials=10_000, rng=0).epsilon_lower_bound < 0.2
    True
    """
    n = positive_int("trials", trials)
    gen = make_rng(rng)
    return audit_epsilon(
        sample(d, n, gen),
        sample(d_prime, n, gen),
        delta=delta,
        confidence=confidence,
    )
