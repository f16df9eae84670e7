"""The exponential mechanism over a finite set, sampled by Gumbel-max in log space.

Claim (McSherry & Talwar 2007; Dwork & Roth 2014, Thm 3.10): for utilities whose
sensitivity under add/remove of one privacy unit is at most ``sensitivity`` (Δ),
choosing index i with probability ∝ exp(ε·u_i/(2Δ)) is ε-DP. When the utility is
*monotone* (for every neighbouring pair all utilities move in the same direction)
the factor ε/Δ gives ε-DP as well (``monotone=True``). Only use ``monotone=True``
when that holds: a vote moving from one token to another is not monotone.

The mechanism is also ε-bounded-range, hence ε²/8-zCDP (Durfee & Rogers 2019;
Cesar & Rogers 2021): use that for composition (about 4x tighter than pure DP
over many steps).

Sampling is Gumbel-max: argmax_i(ε·u_i/(2Δ) + G_i) with G_i i.i.d. standard
Gumbel, which is exactly the softmax distribution and never underflows.
Utilities of -inf are allowed (never chosen) as long as one is finite.

>>> probs = exponential_probabilities([0.0, 1.0], epsilon=2.0)
>>> round(float(probs[1] / probs[0]), 6) == round(float(np.e), 6)
True
>>> exponential_mechanism([0.0, -np.inf], epsilon=1.0, rng=0)
0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite, positive_int

__all__ = [
    "exponential_logits",
    "exponential_mechanism",
    "exponential_probabilities",
    "gumbel_max",
]


def exponential_logits(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float = 1.0,
    monotone: bool = False,
) -> NDArray[np.float64]:
    """Validated logits ε·u/(2Δ) (ε·u/Δ when ``monotone``) of the exponential mechanism.

    The data-dependent half of :func:`exponential_mechanism`, public so that a
    caller drawing many samples from one utility vector (a vectorised audit, or
    DPSparseVote's batched rule) runs exactly the production code: sampling
    :func:`gumbel_max` of these logits is ε-DP (and ε²/8-zCDP) as in the module
    docstring. -inf utilities stay -inf (never chosen).

    >>> exponential_logits([0.0, 2.0, -np.inf], epsilon=1.0).tolist()
    [0.0, 1.0, -inf]
    """
    eps = positive_finite("epsilon", epsilon)
    delta_u = positive_finite("sensitivity", sensitivity)
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 1 or u.size == 0:
        raise ValueError(f"utilities must be a non-empty 1-D array, got shape {u.shape}")
    if np.isnan(u).any() or np.isposinf(u).any():
        raise ValueError("utilities must not contain NaN or +inf")
    if np.isneginf(u).all():
        raise ValueError("utilities must contain at least one finite value (all are -inf)")
    factor = eps / delta_u if monotone else eps / (2.0 * delta_u)
    return u * factor  # -inf stays -inf


def gumbel_max(logits: ArrayLike, *, size: int = 1, rng: RngLike = None) -> NDArray[np.intp]:
    """``size`` independent draws of argmax_i(logits_i + G_i), G_i i.i.d. standard Gumbel.

    Each draw is distributed exactly as softmax(``logits``); on
    :func:`exponential_logits` it is one run of the exponential mechanism (same
    claim). Sampling in log space: large or -inf logits never overflow.

    >>> gumbel_max(np.array([0.0, 50.0, -np.inf]), size=3, rng=0).tolist()
    [1, 1, 1]
    """
    n = positive_int("size", size)
    logits = np.asarray(logits, dtype=np.float64)
    noisy = logits[np.newaxis, :] + make_rng(rng).gumbel(size=(n, logits.size))
    return np.asarray(np.argmax(noisy, axis=1), dtype=np.intp)


def exponential_probabilities(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float = 1.0,
    monotone: bool = False,
) -> NDArray[np.float64]:
    """The exact output distribution: softmax(ε·u/(2Δ)) (ε·u/Δ when monotone), via logsumexp.

    >>> exponential_probabilities([1.0, 1.0], epsilon=1.0).tolist()
    [0.5, 0.5]
    """
    logits = exponential_logits(
        utilities, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone
    )
    top = np.max(logits)
    shifted = np.exp(logits - top)  # exp(-inf) = 0
    return np.asarray(shifted / shifted.sum(), dtype=np.float64)


def exponential_mechanism(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float = 1.0,
    monotone: bool = False,
    rng: RngLike = None,
) -> int:
    """Index chosen with probability ∝ exp(ε·u/(2Δ)): ε-DP and ε²/8-zCDP (module docstring).

    >>> exponential_mechanism([0.0, 100.0, 0.0], epsilon=1.0, rng=0)
    1
    """
    logits = exponential_logits(
        utilities, epsilon=epsilon, sensitivity=sensitivity, monotone=monotone
    )
    return int(gumbel_max(logits, rng=rng)[0])
