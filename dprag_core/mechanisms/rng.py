"""Random generators for mechanisms.

The default generator is seeded from OS entropy; a seed (or a generator) is
accepted for tests and benchmarks only.

>>> bool(make_rng(7).integers(10) == make_rng(7).integers(10))
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["RngLike", "make_rng"]

RngLike = np.random.Generator | int | None


def make_rng(rng: RngLike = None) -> np.random.Generator:
    """Return ``rng`` itself, a generator seeded with it, or an OS-entropy generator."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)):
        kind = type(rng).__name__
        raise TypeError(f"rng must be a numpy Generator, an int seed or None, got {kind}")
    return np.random.default_rng(int(rng))
