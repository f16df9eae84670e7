"""DPVote / DPSparseVote accounting: how many private tokens (c_max) one answer may spend.

Each private token is one adaptive step; c_max is the largest count whose
composition stays within the query budget (ε, δ), taking the tightest *valid*
bound (Koga et al. used max(sequential, advanced); we are at least as tight):

- LimitedDomain steps (DPVote: LimitedDomain(ε_token, δ_token); DPSparseVote:
  an SVT run with ε_token/2 then LimitedDomain(ε_token/2, δ_token)) are generic
  (ε_token, δ_token)-DP steps: :func:`~dprag_core.accounting.composition.max_compositions`
  (sequential, advanced, optimal KOV, pure-DP RDP).
- The exponential-mechanism variant (MuRAG Alg. 5) spends an SVT run with
  ε_token/2 (pure, *not* bounded-range) plus an exponential mechanism with
  ε_token/2 (bounded-range). Valid bounds: the generic pure (ε_token, 0) step
  above, and the mixed RDP curve c·(RR(ε_token/2, α) + min(αε_token²/32,
  RR(ε_token/2, α))) (``"mixed_rdp"``,
  :func:`~dprag_core.accounting.composition.max_rdp_compositions`); the larger
  count wins.

The per-token δ of the LimitedDomain steps defaults to
:func:`default_delta_token`: the largest δ_token among those that maximise c_max.

>>> token_limit(epsilon=10.0, delta=1e-4, epsilon_token=1.0, delta_token=5e-6).count
10
"""

from __future__ import annotations

import math

from dprag_core.accounting.composition import (
    BOUNDS,
    CompositionCount,
    composition_fits,
    max_compositions,
    max_rdp_compositions,
)
from dprag_core.accounting.rdp import DEFAULT_ORDERS, bounded_range_rdp, pure_dp_rdp
from dprag_core.accounting.search import boundary
from dprag_core.budget import Budget

__all__ = ["default_delta_token", "token_limit"]

#: The search for the default per-token δ starts from [δ/C* · 1e-15, δ/C*].
_DELTA_FLOOR = 1e-15


def default_delta_token(*, epsilon: float, delta: float, epsilon_token: float) -> float:
    """The per-token δ that maximises c_max for (ε, δ, ε_token), the largest such δ_token.

    Every bound charges the c per-token deltas to δ (c·δ_token, or
    1 − (1 − δ_token)^c for KOV), so c_max never grows with δ_token: its maximum
    C* is the count of a pure (ε_token, 0) step, whose composition may use all of
    δ. Among the δ_token that still reach C* the largest is returned (found by
    the calibration search in log space, :func:`~dprag_core.accounting.search.boundary`,
    then rounded down to three significant digits), because LimitedDomain's threshold
    grows with
    ln(1/δ_token). When the sequential bound sets C* (ε_token a large share of ε)
    this is δ/C*; when many cheap tokens compose, most of δ goes to the
    composition. For (ε, δ, ε_token) = (1, 1e-5, 0.01) C* = 720 (KOV), where the
    earlier default δ/(2⌊ε/ε_token⌋) held c_max to 200.

    >>> default_delta_token(epsilon=10.0, delta=1e-4, epsilon_token=1.0)  # C* = 10
    1e-05
    >>> token_limit(epsilon=1.0, delta=1e-5, epsilon_token=0.01, delta_token=default_delta_token(
    ...     epsilon=1.0, delta=1e-5, epsilon_token=0.01)).count
    720
    """
    total = Budget(epsilon, delta)
    step = Budget(epsilon_token)
    if delta == 0:
        raise ValueError("delta must be > 0 for a per-token delta, got 0")
    best = max_compositions(step, total).count

    def reaches(delta_token: float) -> bool:
        s = Budget(epsilon_token, delta_token)
        return any(composition_fits(b, s, best, total) for b in BOUNDS[:-1])

    hi = delta / best
    if reaches(hi):
        return hi
    found = boundary(reaches, good=hi * _DELTA_FLOOR, bad=hi, geometric=True)
    # rounded down to 3 significant digits: a readable default with a margin against the
    # floating-point noise of the bounds at their boundary (an independent PLD check of a
    # δ_token within 1e-9 of it can read ε 1e-10 over); it still reaches C* (monotone)
    scale = 10.0 ** (math.floor(math.log10(found)) - 2)
    return math.floor(found / scale) * scale


def token_limit(
    *,
    epsilon: float,
    delta: float,
    epsilon_token: float,
    delta_token: float,
    exponential_svt: bool = False,
) -> CompositionCount:
    """c_max and the bound that set it (module docstring).

    ``exponential_svt=True``: the step is SVT(ε_token/2) + exponential mechanism
    (ε_token/2), pure (``delta_token`` must be 0).

    >>> r = token_limit(epsilon=10.0, delta=1e-6, epsilon_token=0.2, delta_token=0.0,
    ...                 exponential_svt=True)
    >>> r.bound
    'mixed_rdp'
    """
    total = Budget(epsilon, delta)
    if exponential_svt and delta_token != 0:
        raise ValueError("the exponential selection is pure: delta_token must be 0")
    base = max_compositions(Budget(epsilon_token, delta_token), total)
    if not exponential_svt:
        return base
    half = epsilon_token / 2
    curve = pure_dp_rdp(half, DEFAULT_ORDERS) + bounded_range_rdp(half, DEFAULT_ORDERS)
    mixed = max_rdp_compositions(curve, total)
    counts = {**base.counts, "mixed_rdp": mixed}
    if mixed > base.count:
        return CompositionCount(mixed, "mixed_rdp", counts)
    return CompositionCount(base.count, base.bound, counts)
