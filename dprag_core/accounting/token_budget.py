"""How many private tokens (c_max) one DPVote / DPSparseVote answer may spend.

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

>>> token_limit(epsilon=10.0, delta=1e-4, epsilon_token=1.0, delta_token=5e-6).count
10
"""

from __future__ import annotations

import math

from dprag_core.accounting.composition import (
    FIT_SLACK,
    CompositionCount,
    max_compositions,
    max_rdp_compositions,
)
from dprag_core.accounting.rdp import DEFAULT_ORDERS, bounded_range_rdp, pure_dp_rdp
from dprag_core.budget import Budget

__all__ = ["default_delta_token", "token_limit"]


def default_delta_token(*, epsilon: float, delta: float, epsilon_token: float) -> float:
    """δ_token = δ / (2·c_seq), c_seq = ⌊ε/ε_token⌋: half of δ pays the per-token deltas
    of the sequential count, the rest is slack that lets the tighter bounds go further.

    >>> default_delta_token(epsilon=10.0, delta=1e-4, epsilon_token=1.0)
    5e-06
    """
    sequential = max(1, math.floor(epsilon / epsilon_token * (1 + FIT_SLACK)))
    return delta / (2 * sequential)


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
