"""The one calibration search: the boundary of a monotone "fits the budget" predicate.

Calibrating a mechanism means finding the largest step (a per-token ε, a
per-token δ) or the smallest noise (a σ) whose composition still fits the
budget. Each is the boundary of a monotone predicate ``fits``: true on one
side, false on the other. :func:`boundary` bisects a bracket ``good`` (fits)
/ ``bad`` (does not) until they are within :data:`TOLERANCE` of each other,
relative to the larger, and returns ``good``.

**Never over budget.** The value returned is always one for which ``fits``
was evaluated true (as ``dp_accounting.mechanism_calibration`` returns the
fitting end of its bracket), so a calibrated mechanism is never certified by
a value that was not checked. The tolerance costs utility only: the result
is within a relative 1e-9 of the best value the bound allows.

>>> round(boundary(lambda x: x * x <= 2.0, good=1.0, bad=2.0), 8)  # the largest x, x² <= 2
1.41421356
>>> boundary(lambda s: 1 / s <= 0.25, good=100.0, bad=1e-3, geometric=True) >= 4.0
True
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["TOLERANCE", "boundary"]

TOLERANCE = 1e-9
"""Relative width at which every calibration search stops (utility, never privacy)."""


def boundary(
    fits: Callable[[float], bool],
    *,
    good: float,
    bad: float,
    geometric: bool = False,
) -> float:
    """The value closest to the boundary, on the side of ``good``, for which ``fits`` holds.

    ``good``: a value that fits (checked: a ``ValueError`` if not). ``bad``:
    one on the other side; if it fits as well, it is returned. ``geometric``:
    bisect in log space (a bracket spanning orders of magnitude; both ends > 0).
    Stops when ``|good - bad| <= TOLERANCE · max(|good|, |bad|)``.

    >>> boundary(lambda x: x <= 3.0, good=4.0, bad=0.0)
    Traceback (most recent call last):
    ...
    ValueError: calibration: the bracket's fitting end does not fit (4.0)
    """
    if not fits(good):
        raise ValueError(f"calibration: the bracket's fitting end does not fit ({good!r})")
    if fits(bad):
        return bad
    while abs(good - bad) > TOLERANCE * max(abs(good), abs(bad)):
        mid = math.sqrt(good * bad) if geometric else 0.5 * (good + bad)
        if mid in (good, bad):  # floating point cannot split the bracket further
            break
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good
