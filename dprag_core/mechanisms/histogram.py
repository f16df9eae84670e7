"""Vote histograms stored by their non-zero counts.

m voters vote over a vocabulary of V tokens: at most m counts are non-zero, so
a histogram costs O(m) to build and to hand to a mechanism instead of O(V).
:class:`SparseCounts` is that representation; the O(m) samplers
(:mod:`~dprag_core.mechanisms.sparse_exponential`,
:func:`~dprag_core.mechanisms.limited_domain.limited_domain_candidates_sparse`)
read it and return exactly what the dense mechanisms return on
:meth:`SparseCounts.dense`. Counts are private data: pass them only to a mechanism.

>>> h = SparseCounts.from_votes(np.array([7, 2, 7]), size=10)
>>> h.indices.tolist(), h.counts.tolist(), h.count(7), h.count(3)
([2, 7], [1, 2], 2, 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprag_core.validation import positive_int

__all__ = ["SparseCounts", "missing_positions"]


def missing_positions(taken: NDArray[np.intp], ranks: NDArray[np.int64]) -> NDArray[np.intp]:
    """The ``ranks``-th (0-based) non-negative integers that are not in ``taken``.

    ``taken`` must be sorted and unique; cost O((len(taken) + len(ranks)) log len(taken)).
    The j-th missing integer is j plus the number of taken values t_i with t_i − i ≤ j.

    >>> missing_positions(np.array([0, 2]), np.array([0, 1, 2])).tolist()
    [1, 3, 4]
    """
    shifted = taken - np.arange(taken.size)
    return np.asarray(ranks + np.searchsorted(shifted, ranks, side="right"), dtype=np.intp)


@dataclass(frozen=True)
class SparseCounts:
    """A non-negative integer histogram over ``size`` items, by its non-zero entries.

    ``indices`` are sorted and unique in [0, size); ``counts`` (same length) are
    >= 1; every other item has count 0. Build it with :meth:`from_votes` or
    :meth:`from_dense`.

    >>> SparseCounts.from_dense([0, 3, 0, 1]).dense().tolist()
    [0, 3, 0, 1]
    """

    indices: NDArray[np.intp]
    counts: NDArray[np.int64]
    size: int

    def __post_init__(self) -> None:
        positive_int("size", self.size)
        idx, cnt = self.indices, self.counts
        if idx.ndim != 1 or cnt.shape != idx.shape:
            raise ValueError("indices and counts must be 1-D arrays of the same length")
        if idx.size and (idx[0] < 0 or idx[-1] >= self.size or np.any(np.diff(idx) <= 0)):
            raise ValueError(f"indices must be sorted, unique and in [0, {self.size})")
        if np.any(cnt < 1):
            raise ValueError("counts must be >= 1 (zero counts are not stored)")

    @classmethod
    def from_votes(cls, votes: ArrayLike, *, size: int) -> SparseCounts:
        """The histogram of ``votes`` (item ids in [0, size)), in O(m log m).

        >>> SparseCounts.from_votes([3, 3, 0], size=5).counts.tolist()
        [1, 2]
        """
        v = np.asarray(votes, dtype=np.intp).reshape(-1)
        if v.size and (v.min() < 0 or v.max() >= size):
            raise ValueError(f"votes must be item ids in [0, {size})")
        indices, counts = np.unique(v, return_counts=True)
        return cls(indices.astype(np.intp), counts.astype(np.int64), int(size))

    @classmethod
    def from_dense(cls, counts: ArrayLike) -> SparseCounts:
        """The sparse form of a dense non-negative integer histogram (O(V)).

        >>> SparseCounts.from_dense([0, 2, 0]).indices.tolist()
        [1]
        """
        h = np.asarray(counts)
        if h.ndim != 1 or h.size == 0:
            raise ValueError(f"counts must be a non-empty 1-D array, got shape {h.shape}")
        if not np.all(np.isfinite(h)) or np.any(h < 0) or np.any(h != np.round(h)):
            raise ValueError("counts must be finite non-negative integers")
        indices = np.flatnonzero(h)
        return cls(indices.astype(np.intp), h[indices].astype(np.int64), int(h.size))

    @property
    def nnz(self) -> int:
        """Number of non-zero counts."""
        return int(self.indices.size)

    def count(self, index: int) -> int:
        """The count of item ``index`` (0 when not stored), in O(log nnz)."""
        if not 0 <= index < self.size:
            raise ValueError(f"index must be in [0, {self.size}), got {index!r}")
        pos = int(np.searchsorted(self.indices, index))
        found = pos < self.indices.size and int(self.indices[pos]) == index
        return int(self.counts[pos]) if found else 0

    def dense(self) -> NDArray[np.int64]:
        """The full histogram of length ``size`` (O(V): for tests and small domains)."""
        out = np.zeros(self.size, dtype=np.int64)
        out[self.indices] = self.counts
        return out
