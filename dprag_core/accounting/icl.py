"""Per-token ε of DP-ICL: one DP threshold selection plus ``max_new_tokens`` token steps.

One DP-ICL query composes (adaptively) the DPThreshold selection (an ε_sel
exponential mechanism) and T = ``max_new_tokens`` token exponential mechanisms
with ε_tok each (T is charged in full even when EOS comes early). Every step is
pure ε-DP and ε-bounded-range. :func:`calibrate_icl` returns the largest ε_tok
such that at least one valid composition bound keeps the query within the
user's (ε, δ):

- ``sequential``: ε_sel + T·ε_tok (the only one when δ = 0);
- ``bounded_range_rdp``: RDP min(αε²/8, RR(ε, α)) of each step, summed and
  converted with the improved conversion (Cesar & Rogers 2021);
- ``pld``: ``dp_accounting``'s privacy-loss distributions of pure ε-DP steps
  (pessimistic discretisation), composed heterogeneously, at δ.

>>> p = calibrate_icl(Budget(5.0, 1e-6), max_new_tokens=32, selection_epsilon=0.5)
>>> p.bound, p.achieved.epsilon <= 5.0
('bounded_range_rdp', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters

from dprag_core.accounting.rdp import DEFAULT_ORDERS, bounded_range_rdp, rdp_to_dp
from dprag_core.accounting.search import boundary
from dprag_core.budget import FIT_SLACK, Budget, positive_budget
from dprag_core.validation import positive_finite, positive_int

__all__ = ["ICL_BOUNDS", "ICLParameters", "calibrate_icl", "icl_epsilon"]

ICL_BOUNDS = ("sequential", "bounded_range_rdp", "pld")
_PLD_INTERVAL = 1e-3
# dp_accounting's pure-DP PLD evaluates exp(ε) in floating point (overflow past ~709);
# beyond this the PLD bound is not evaluated (reported as inf: it certifies nothing).
_PLD_MAX_EPSILON = 500.0


@dataclass(frozen=True)
class ICLParameters:
    """Calibrated DP-ICL: per-token ε, selection ε, token count, achieved guarantee and bound.

    >>> ICLParameters(0.1, 0.5, 8, Budget(1.3), "sequential").epsilon_token
    0.1
    """

    epsilon_token: float
    selection_epsilon: float
    max_new_tokens: int
    achieved: Budget
    bound: str


def icl_epsilon(
    bound: str, *, epsilon_token: float, selection_epsilon: float, tokens: int, delta: float
) -> float:
    """ε at ``delta`` of the selection (ε_sel) plus ``tokens`` token steps (ε_tok) under ``bound``.

    >>> icl_epsilon("sequential", epsilon_token=0.1, selection_epsilon=0.5, tokens=10, delta=0.0)
    1.5
    """
    e_tok = positive_finite("epsilon_token", epsilon_token)
    e_sel = positive_finite("selection_epsilon", selection_epsilon)
    t = positive_int("tokens", tokens)
    if bound == "sequential":
        return e_sel + t * e_tok
    if delta <= 0:
        return math.inf
    if bound == "bounded_range_rdp":
        rdp = bounded_range_rdp(e_sel, DEFAULT_ORDERS) + t * bounded_range_rdp(
            e_tok, DEFAULT_ORDERS
        )
        return rdp_to_dp(rdp, DEFAULT_ORDERS, delta=delta)
    if bound == "pld":
        if max(e_sel, e_tok) > _PLD_MAX_EPSILON:
            return math.inf
        sel = pld.from_privacy_parameters(
            DifferentialPrivacyParameters(e_sel, 0.0), value_discretization_interval=_PLD_INTERVAL
        )
        tok = pld.from_privacy_parameters(
            DifferentialPrivacyParameters(e_tok, 0.0), value_discretization_interval=_PLD_INTERVAL
        )
        return float(sel.compose(tok.self_compose(t)).get_epsilon_for_delta(delta))
    raise ValueError(f"bound must be one of {ICL_BOUNDS}, got {bound!r}")


def _largest_fitting(bound: str, total: Budget, e_sel: float, tokens: int, lo: float) -> float:
    """Largest ε_tok >= ``lo`` that ``bound`` fits in ``total`` (``lo`` if none larger fits)."""

    def fits(e_tok: float) -> bool:
        eps = icl_epsilon(
            bound, epsilon_token=e_tok, selection_epsilon=e_sel, tokens=tokens, delta=total.delta
        )
        return eps <= total.epsilon * (1 + FIT_SLACK)

    if not fits(lo):  # this bound does not even certify the sequential split
        return lo
    return boundary(fits, good=lo, bad=total.epsilon - e_sel)


def calibrate_icl(total: Budget, *, max_new_tokens: int, selection_epsilon: float) -> ICLParameters:
    """The largest per-token ε such that selection + ``max_new_tokens`` tokens fit ``total``.

    Starts from the sequential split (ε − ε_sel)/T, then improves it with the
    bounded-range RDP bound and the PLD bound (module docstring); reports the
    bound that won and the achieved (ε, δ) under it.

    >>> calibrate_icl(Budget(2.0), max_new_tokens=10, selection_epsilon=1.0).epsilon_token
    0.1
    """
    total = positive_budget("total", total)
    t = positive_int("max_new_tokens", max_new_tokens)
    e_sel = positive_finite("selection_epsilon", selection_epsilon)
    if e_sel >= total.epsilon:
        raise ValueError(
            f"selection_epsilon must be < epsilon={total.epsilon:g}, got {selection_epsilon!r}"
        )
    best, bound = (total.epsilon - e_sel) / t, "sequential"
    if total.delta > 0:
        for candidate in ICL_BOUNDS[1:]:
            e_tok = _largest_fitting(candidate, total, e_sel, t, best)
            if e_tok > best:
                best, bound = e_tok, candidate
    eps = icl_epsilon(
        bound, epsilon_token=best, selection_epsilon=e_sel, tokens=t, delta=total.delta
    )
    delta = 0.0 if bound == "sequential" else total.delta
    achieved = Budget(max(min(eps, total.epsilon), 1e-300), delta)
    return ICLParameters(best, e_sel, t, achieved, bound)
