"""Noise samplers: Laplace, Gaussian, Gumbel and the exact integer discrete Laplace.

Privacy claims (neighbouring relation: add/remove one privacy unit; ``f`` is the
query whose result the noise is added to):

- :func:`laplace` with ``scale = Δ₁/ε`` on a real query with L1 sensitivity Δ₁ is
  ε-DP (Dwork & Roth 2014, Thm 3.6). Use it only for values that stay inside the
  library (e.g. SVT comparisons): a *released* floating-point Laplace value leaks
  through its low-order bits (Mironov 2012).
- :func:`discrete_laplace` with ``scale = Δ₁/ε`` on an integer query with L1
  sensitivity Δ₁ (an integer) is ε-DP: P[X = x] ∝ exp(−|x|/scale), so shifting the
  query by Δ₁ changes each output probability by at most exp(Δ₁/scale) = e^ε
  (Ghosh, Roughgarden & Sundararajan 2009; Canonne, Kamath & Steinke 2020).
  The output is an integer, so there are no low-order bits to leak: this is the
  sampler for every number the library *releases* (e.g. noisy histogram counts).
- :func:`gaussian` with σ on a query with L2 sensitivity Δ₂ is Δ₂²/(2σ²)-zCDP
  (Bun & Steinke 2016, Prop. 1.6) and (ε, δ)-DP for
  σ ≥ Δ₂·sqrt(2 ln(1.25/δ))/ε when ε < 1 (Dwork & Roth 2014, Thm A.1).
- :func:`gumbel` has no claim by itself; Gumbel-max over ``u·ε/(2Δ)`` is the
  exponential mechanism (see :mod:`dprag_core.mechanisms.exponential`).

Every sampler returns a Python scalar when ``size`` is None and an ndarray otherwise.

>>> x = discrete_laplace(2.0, size=3, rng=0)
>>> x.dtype.kind, x.shape
('i', (3,))
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
from numpy.typing import NDArray

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite

__all__ = ["Size", "discrete_laplace", "gaussian", "gumbel", "laplace"]

Size = int | tuple[int, ...]
"""Shape argument of the samplers (as in numpy)."""


@overload
def laplace(scale: float, *, size: None = None, rng: RngLike = None) -> float: ...
@overload
def laplace(scale: float, *, size: Size, rng: RngLike = None) -> NDArray[np.float64]: ...
def laplace(
    scale: float, *, size: Size | None = None, rng: RngLike = None
) -> float | NDArray[np.float64]:
    """Laplace(0, ``scale``) noise; ``scale = Δ₁/ε`` gives ε-DP on a sensitivity-Δ₁ query.

    Floating-point output: for internal comparisons only (see module docstring).

    >>> isinstance(laplace(1.0, rng=0), float)
    True
    """
    b = positive_finite("scale", scale)
    gen = make_rng(rng)
    if size is None:
        return float(gen.laplace(0.0, b))
    return gen.laplace(0.0, b, size=size)


@overload
def gaussian(sigma: float, *, size: None = None, rng: RngLike = None) -> float: ...
@overload
def gaussian(sigma: float, *, size: Size, rng: RngLike = None) -> NDArray[np.float64]: ...
def gaussian(
    sigma: float, *, size: Size | None = None, rng: RngLike = None
) -> float | NDArray[np.float64]:
    """N(0, ``sigma``²) noise; Δ₂²/(2σ²)-zCDP on a query with L2 sensitivity Δ₂.

    >>> gaussian(1.0, size=2, rng=0).shape
    (2,)
    """
    s = positive_finite("sigma", sigma)
    gen = make_rng(rng)
    if size is None:
        return float(gen.normal(0.0, s))
    return gen.normal(0.0, s, size=size)


@overload
def gumbel(scale: float = 1.0, *, size: None = None, rng: RngLike = None) -> float: ...
@overload
def gumbel(scale: float = 1.0, *, size: Size, rng: RngLike = None) -> NDArray[np.float64]: ...
def gumbel(
    scale: float = 1.0, *, size: Size | None = None, rng: RngLike = None
) -> float | NDArray[np.float64]:
    """Standard Gumbel noise times ``scale`` (location 0), for Gumbel-max sampling.

    >>> gumbel(size=(2, 3), rng=0).shape
    (2, 3)
    """
    b = positive_finite("scale", scale)
    gen = make_rng(rng)
    if size is None:
        return float(gen.gumbel(0.0, b))
    return gen.gumbel(0.0, b, size=size)


@overload
def discrete_laplace(scale: float, *, size: None = None, rng: RngLike = None) -> int: ...
@overload
def discrete_laplace(scale: float, *, size: Size, rng: RngLike = None) -> NDArray[np.int64]: ...
def discrete_laplace(
    scale: float, *, size: Size | None = None, rng: RngLike = None
) -> int | NDArray[np.int64]:
    """Integer noise with P[X = x] ∝ exp(−|x|/``scale``): ε-DP with ``scale = Δ₁/ε``.

    Sampled exactly as the difference of two i.i.d. geometric variables on
    {0, 1, ...} with success probability p = 1 − exp(−1/scale): the output is an
    integer, so it carries no floating-point side channel (Mironov 2012).

    >>> isinstance(discrete_laplace(1.0, rng=0), int)
    True
    """
    b = positive_finite("scale", scale)
    gen = make_rng(rng)
    p = -math.expm1(-1.0 / b)  # 1 - exp(-1/scale), accurate for large scales
    shape = () if size is None else size
    # numpy's geometric counts trials (>= 1); the difference of two is the same.
    diff = gen.geometric(p, size=shape).astype(np.int64) - gen.geometric(p, size=shape)
    if size is None:
        return int(diff)
    return diff.astype(np.int64)
