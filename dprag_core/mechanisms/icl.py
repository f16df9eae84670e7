"""The DP in-context-learning token step (Grislain 2024, "Differentially Private In-Context
Learning").

Each selected privacy unit i has its own one-document prompt with next-token
log-probabilities ℓ_i (a row of a [n, V] array); the public prompt (no
documents) has ℓ_pub. Per token:

1. n_i = (exp(α(ℓ_i − max ℓ_i)) − 1)/α            (α → 0: log-probs; α = 1: p/p_max − 1)
2. c_i = n_i − (max n_i + min n_i)/2              (centred: ‖c_i‖∞ is minimal)
3. c_i ← c_i · min(1, C/‖c_i‖∞)                  (clipped: every entry in [−C, C])
4. U = θ·ℓ_pub + Σ_i c_i
5. sample the token ∝ exp(ε·U/(2C)) over the **full vocabulary** by Gumbel-max.

**Claim: ε-DP per token** (and ε-bounded-range, ε²/8-zCDP) for add/remove of
one privacy unit *given the selected set and the tokens released so far*:
adding or removing unit i adds or removes the row c_i, so U moves by c_i, whose
entries all lie in [−C, C]: the sensitivity of U is C and exp(ε·U/(2C)) is the
exponential mechanism with Δ = C (McSherry & Talwar 2007). θ·ℓ_pub uses no
private data. No top-k/top-p warper may follow: restricting the support to the
highest-U tokens (HF's default top_k=50 after the reference code's logits
processor) makes the support data-dependent and the privacy loss unbounded.

>>> lp = np.log(np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1]]))
>>> dp_icl_token(lp, np.log([1 / 3] * 3), epsilon=100.0, alpha=1.0, clip=1.0, theta=0.0, rng=0)
0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from dprag_core.mechanisms.exponential import gumbel_max
from dprag_core.mechanisms.rng import RngLike
from dprag_core.validation import nonnegative_finite, positive_finite

__all__ = [
    "clipped_contributions",
    "dp_icl_logits",
    "dp_icl_probabilities",
    "dp_icl_token",
    "icl_utility",
]


def _rows(voter_logprobs: ArrayLike, vocab: int) -> NDArray[np.float64]:
    lp = np.asarray(voter_logprobs, dtype=np.float64)
    if lp.ndim == 1 and lp.size == 0:
        lp = lp.reshape(0, vocab)
    if lp.ndim != 2 or lp.shape[1] != vocab:
        raise ValueError(f"voter_logprobs must have shape [n, {vocab}], got {lp.shape}")
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError("voter_logprobs must not contain NaN or +inf")
    if lp.shape[0] and np.isneginf(lp).all(axis=1).any():
        raise ValueError("every row of voter_logprobs needs a finite entry")
    return lp


def clipped_contributions(
    voter_logprobs: ArrayLike, *, alpha: float, clip: float
) -> NDArray[np.float64]:
    """Steps 1–3: the centred, clipped rows c_i (each entry in [−C, C]).

    ``alpha`` = 0 means the limit α → 0 (plain log-probs, −inf entries mapped to
    the row's finite minimum before centring).

    >>> clipped_contributions(np.log([[0.5, 0.25, 0.25]]), alpha=1.0, clip=0.1).tolist()
    [[0.1, -0.1, -0.1]]
    """
    a = nonnegative_finite("alpha", alpha)
    c = positive_finite("clip", clip)
    lp = np.asarray(voter_logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"voter_logprobs must be a 2-D array [n, V], got shape {lp.shape}")
    if lp.shape[0] == 0:
        return np.zeros_like(lp)
    shifted = lp - lp.max(axis=1, keepdims=True)  # <= 0, max 0; -inf stays -inf
    if a > 0:
        normed = np.expm1(a * shifted) / a  # in [-1/α, 0]; exp(-inf) - 1 = -1
    else:
        finite_min = np.where(np.isfinite(shifted), shifted, np.inf).min(axis=1, keepdims=True)
        normed = np.maximum(shifted, finite_min)
    centred = normed - (normed.max(axis=1, keepdims=True) + normed.min(axis=1, keepdims=True)) / 2
    norm_inf = np.abs(centred).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norm_inf > c, c / norm_inf, 1.0)
    return np.asarray(np.clip(centred * factor, -c, c), dtype=np.float64)


def icl_utility(
    voter_logprobs: ArrayLike,
    public_logprobs: ArrayLike,
    *,
    alpha: float,
    clip: float,
    theta: float,
) -> NDArray[np.float64]:
    """Step 4: U = θ·ℓ_pub + Σ_i c_i over the whole vocabulary (sensitivity C).

    >>> icl_utility(np.zeros((0, 2)), np.log([0.5, 0.5]), alpha=1.0, clip=1.0, theta=2.0).round(3)
    array([-1.386, -1.386])
    """
    pub = np.asarray(public_logprobs, dtype=np.float64).reshape(-1)
    if pub.size == 0:
        raise ValueError("public_logprobs must be a non-empty 1-D array [V]")
    if np.isnan(pub).any() or np.isposinf(pub).any() or np.isneginf(pub).all():
        raise ValueError("public_logprobs must be finite or -inf, with one finite entry")
    th = nonnegative_finite("theta", theta)
    rows = _rows(voter_logprobs, pub.size)
    contrib = clipped_contributions(rows, alpha=alpha, clip=clip).sum(axis=0)
    with np.errstate(invalid="ignore"):
        public = np.where(np.isneginf(pub), -np.inf, th * pub)
    return np.asarray(public + contrib, dtype=np.float64)


def dp_icl_logits(
    voter_logprobs: ArrayLike,
    public_logprobs: ArrayLike,
    *,
    epsilon: float,
    alpha: float,
    clip: float,
    theta: float,
) -> NDArray[np.float64]:
    """The token logits ε·U/(2C); :func:`~dprag_core.mechanisms.exponential.gumbel_max` of
    them is one DP-ICL token (ε-DP, module docstring). Public so that vectorised audits
    draw many tokens through the production code.

    >>> dp_icl_logits(np.zeros((0, 2)), [0.0, -np.inf], epsilon=1.0, alpha=1.0, clip=1.0,
    ...               theta=1.0).tolist()
    [0.0, -inf]
    """
    eps = positive_finite("epsilon", epsilon)
    c = positive_finite("clip", clip)
    u = icl_utility(voter_logprobs, public_logprobs, alpha=alpha, clip=c, theta=theta)
    return u * (eps / (2.0 * c))


def dp_icl_probabilities(
    voter_logprobs: ArrayLike,
    public_logprobs: ArrayLike,
    *,
    epsilon: float,
    alpha: float,
    clip: float,
    theta: float,
) -> NDArray[np.float64]:
    """The exact token distribution softmax(ε·U/(2C)) (for tests).

    >>> dp_icl_probabilities(np.zeros((0, 2)), [0.0, -np.inf], epsilon=1.0, alpha=1.0,
    ...                      clip=1.0, theta=1.0).tolist()
    [1.0, 0.0]
    """
    logits = dp_icl_logits(
        voter_logprobs, public_logprobs, epsilon=epsilon, alpha=alpha, clip=clip, theta=theta
    )
    return np.asarray(np.exp(logits - logsumexp(logits)), dtype=np.float64)


def dp_icl_token(
    voter_logprobs: ArrayLike,
    public_logprobs: ArrayLike,
    *,
    epsilon: float,
    alpha: float,
    clip: float,
    theta: float,
    rng: RngLike = None,
) -> int:
    """One DP-ICL token: Gumbel-max over ε·U/(2C) on the full vocabulary (ε-DP, module docstring).

    ``voter_logprobs``: [n, V] log-probs of the n one-unit prompts (n may be 0);
    ``public_logprobs``: [V] of the public prompt.

    >>> dp_icl_token(np.zeros((0, 3)), np.log([0.98, 0.01, 0.01]), epsilon=1.0, alpha=1.0,
    ...              clip=1.0, theta=200.0, rng=0)
    0
    """
    logits = dp_icl_logits(
        voter_logprobs, public_logprobs, epsilon=epsilon, alpha=alpha, clip=clip, theta=theta
    )
    return int(gumbel_max(logits, rng=rng)[0])
