"""Calibrate a per-step ε₀ so that a given number of steps fits a total budget.

:func:`per_token_epsilon` inverts :func:`~dprag_core.accounting.composition.max_compositions`:
the largest ε₀ such that ``tokens`` adaptive compositions of a pure ε₀-DP step
(an exponential mechanism with ``bounded_range=True``) fit within ``total``
under at least one valid composition bound. Use it to size a mechanism's
per-token ε from the answer length you want: for MuRAG's pure DPSparseVote
(``selection="exponential"``, whose private token is a pure ε_token-DP step)
``epsilon_token=per_token_epsilon(Budget(ε, δ), n)`` gives at least ``n``
private tokens (c_max >= n, :func:`~dprag_core.accounting.dpvote.token_limit`).

>>> from dprag_core.accounting.dpvote import token_limit
>>> eps0 = per_token_epsilon(Budget(10.0, 1e-6), 346)
>>> 0.1 <= eps0 < 0.1003
True
>>> token_limit(epsilon=10.0, delta=1e-6, epsilon_token=eps0, delta_token=0.0,
...             exponential_svt=True).count >= 346
True
"""

from __future__ import annotations

from dprag_core.accounting.composition import BOUNDS, composition_fits, max_compositions
from dprag_core.accounting.search import boundary
from dprag_core.budget import Budget, positive_budget
from dprag_core.validation import positive_int

__all__ = ["per_token_epsilon"]


def per_token_epsilon(total: Budget, tokens: int, *, bounded_range: bool = False) -> float:
    """The largest per-step ε₀ such that ``tokens`` compositions of it fit within ``total``.

    The calibration search (:func:`~dprag_core.accounting.search.boundary`)
    on ε₀ in [total.epsilon / tokens, total.epsilon] (the lower end fits by
    sequential composition), always returning a value that fits; the result is
    checked with :func:`~dprag_core.accounting.composition.max_compositions`.

    >>> per_token_epsilon(Budget(1.0), 4)  # delta = 0: only sequential applies
    0.25
    >>> round(per_token_epsilon(Budget(10.0, 1e-6), 1231, bounded_range=True), 4)
    0.1
    """
    total = positive_budget("total", total)
    n = positive_int("tokens", tokens)
    if not isinstance(bounded_range, bool):
        raise TypeError(
            f"bounded_range must be a bool (True or False), got {type(bounded_range).__name__}"
        )
    t, br = total, bounded_range
    bounds = BOUNDS if br else BOUNDS[:-1]

    def fits(eps0: float) -> bool:
        step = Budget(eps0)
        return any(composition_fits(b, step, n, t) for b in bounds)

    lo = boundary(fits, good=t.epsilon / n, bad=t.epsilon)
    if max_compositions(Budget(lo), t, bounded_range=br).count < n:  # pragma: no cover
        raise RuntimeError("per_token_epsilon: calibrated step does not fit (bug)")
    return lo
