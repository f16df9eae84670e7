"""Parameter validation shared by every public constructor.

Each helper raises ``ValueError`` (or ``TypeError`` for the wrong type) with a
message that names the parameter and its allowed range, e.g.
``ValueError("epsilon must be a finite number > 0, got -1")``.

>>> positive_finite("epsilon", 0.5)
0.5
>>> positive_int("m", 3)
3
"""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = [
    "finite",
    "in_closed_interval",
    "nonnegative_finite",
    "positive_finite",
    "positive_int",
    "probability",
    "strict_bool",
]


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def finite(name: str, value: object) -> float:
    """Return ``value`` as a float, rejecting NaN and infinities."""
    x = _real(name, value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return x


def positive_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is finite and > 0."""
    x = _real(name, value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def nonnegative_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is finite and >= 0."""
    x = _real(name, value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return x


def strict_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (a truthy string or number is refused).

    >>> strict_bool("source_ids", "no")
    Traceback (most recent call last):
    TypeError: source_ids must be True or False, got 'no'
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def probability(name: str, value: object, *, allow_zero: bool = True) -> float:
    """Return ``value`` if it lies in [0, 1) (or (0, 1) with ``allow_zero=False``)."""
    x = _real(name, value)
    low_ok = x >= 0 if allow_zero else x > 0
    if not math.isfinite(x) or not low_ok or x >= 1:
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return x


def in_closed_interval(name: str, value: object, low: float, high: float) -> float:
    """Return ``value`` if it is a finite number in ``[low, high]``."""
    x = _real(name, value)
    if not math.isfinite(x) or not low <= x <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return x


def positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum`` (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
