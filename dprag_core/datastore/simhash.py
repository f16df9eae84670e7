"""DP SimHash datastore: a one-shot DP release of a (key, label) datastore.

Paper: "Differentially Private Datastore Generation for Retrieval-Augmented
Inference" (Section 3, Alg. 1–2).

Construction: ``L`` SimHash tables, each made of ``b`` random hyperplanes drawn
from a public seed, independently of the data. Every record adds one vote to
its class in exactly one bucket per table. The release is the hyperplanes plus
the noisy class histogram of every bucket; a query is hashed into each table,
the ``L`` noisy vote vectors are summed, and the argmax is the prediction.
Queries are post-processing: unlimited, at no further privacy cost.

Privacy claims (neighbouring relation: add/remove one record):

* **Pure release** (``sparse=False``): the released vector is the concatenation
  of all ``L * 2**b * C`` bucket/class counts. One record changes ``L`` of them
  (one per table) by 1, so its L1 sensitivity is ``L``; adding discrete Laplace
  noise of scale ``L / epsilon`` to **every** coordinate, empty buckets
  included, is ``epsilon``-DP (integer noise: no floating-point leak, Mironov
  2012). Nothing reveals which buckets are empty.
* **Sparse release** (``sparse=True``, for ``b`` too large to materialise
  ``2**b`` buckets): only buckets holding at least one record are candidates.
  Each candidate's total ``n`` gets discrete Laplace noise of scale ``2L/eps``
  and the bucket is released iff the noisy total is ``>= tau``; a released
  bucket publishes its class counts plus discrete Laplace noise of scale
  ``2L/eps``. Proof sketch: one record touches one bucket per table. A bucket
  present in both neighbours changes its total and one class count by 1 each,
  costing ``eps/(2L) + eps/(2L)`` per table, ``eps`` over the ``L`` tables. A
  bucket present only in the larger dataset holds exactly that record
  (``n = 1``); it is released with probability
  ``P[Z >= tau - 1] = p**(tau-1) / (1 + p)`` with ``p = exp(-eps/(2L))``; over
  ``L`` tables that mass is at most ``delta`` by the choice of ``tau``. Outside
  that event the output densities are within ``e**eps``: ``(eps, delta)``-DP.

>>> rng = np.random.default_rng(0)
>>> keys = rng.normal(size=(200, 8))
>>> labels = (keys[:, 0] > 0).astype(int)
>>> store = DPSimHashDatastore.release(
...     keys, labels, num_classes=2, epsilon=8.0, tables=8, bits=4, hyperplane_seed=1, rng=2)
>>> store.guarantee
Budget(epsilon=8.0, delta=0.0)
>>> store.predict(keys[:3]).shape
(3,)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dprag_core.budget import Budget
from dprag_core.datastore.artifact import DEFAULT_MAX_BYTES, FORMAT, read_artifact
from dprag_core.mechanisms.noise import discrete_laplace
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_finite, positive_int, probability

__all__ = ["MAX_DENSE_CELLS", "DPSimHashDatastore", "SimHashIndex"]

MAX_DENSE_CELLS = 1 << 27
_FORMAT = FORMAT

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SimHashIndex:
    """``tables`` x ``bits`` random hyperplanes, drawn from a public seed.

    >>> idx = SimHashIndex.from_seed(dim=4, tables=2, bits=3, seed=0)
    >>> idx.buckets(np.ones((1, 4))).shape
    (1, 2)
    """

    hyperplanes: npt.NDArray[np.float32]  # [L, b, d]

    @classmethod
    def from_seed(cls, *, dim: int, tables: int, bits: int, seed: int) -> SimHashIndex:
        """Gaussian hyperplanes from ``seed`` (public: they depend on no record)."""
        dim = positive_int("dim", dim)
        tables = positive_int("tables", tables)
        bits = positive_int("bits", bits)
        if bits > 62:
            raise ValueError(f"bits must be an integer in [1, 62], got {bits}")
        planes = np.random.default_rng(seed).standard_normal((tables, bits, dim))
        return cls(planes.astype(np.float32))

    @property
    def tables(self) -> int:
        """Number of hash tables L."""
        return int(self.hyperplanes.shape[0])

    @property
    def bits(self) -> int:
        """Hyperplanes per table b (2**b buckets per table)."""
        return int(self.hyperplanes.shape[1])

    @property
    def dim(self) -> int:
        """Key dimension d."""
        return int(self.hyperplanes.shape[2])

    def buckets(self, keys: npt.ArrayLike) -> IntArray:
        """Bucket id of every key in every table, shape [N, L] (vectorised)."""
        x = np.asarray(keys, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"keys must have shape [n, {self.dim}], got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("keys must be finite numbers")
        signs = np.einsum("nd,lbd->nlb", x, self.hyperplanes) > 0
        weights = np.left_shift(np.int64(1), np.arange(self.bits, dtype=np.int64))
        return np.asarray((signs.astype(np.int64) * weights).sum(axis=2), dtype=np.int64)


def _check_labels(labels: npt.ArrayLike, n: int, num_classes: int) -> IntArray:
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"labels must have shape [{n}] to match the keys, got {y.shape}")
    if n and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must be integers in [0, {num_classes - 1}] (num_classes)")
    return y.astype(np.int64)


def _hash_pairs(
    keys: npt.ArrayLike,
    labels: npt.ArrayLike,
    *,
    num_classes: int,
    tables: int,
    bits: int,
    seed: int,
) -> tuple[SimHashIndex, IntArray, IntArray]:
    """Validate (key, label) pairs and hash the keys: the index, buckets [N, L], labels [N]."""
    x = np.asarray(keys, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"keys must be a non-empty 2-D array [n, dim], got shape {x.shape}")
    y = _check_labels(labels, x.shape[0], num_classes)
    index = SimHashIndex.from_seed(dim=x.shape[1], tables=tables, bits=bits, seed=seed)
    return index, index.buckets(x), y


def _sparse_threshold(*, tables: int, scale: float, delta: float) -> int:
    """Smallest tau with L * P[DLap(scale) >= tau - 1] <= delta."""
    p = math.exp(-1.0 / scale)
    # P[Z >= k] = p**k / (1 + p) for k >= 1
    k = math.ceil(math.log(delta * (1 + p) / tables) / math.log(p))
    return max(k, 1) + 1


class DPSimHashDatastore:
    """A released DP SimHash datastore: public hyperplanes + noisy vote tables.

    Build it with :meth:`release` (DP) or :meth:`non_private` (a baseline for
    attacks and utility comparisons only); query with :meth:`class_scores` /
    :meth:`predict`; persist with :meth:`save` / :meth:`load`. The object holds
    no keys, labels or record ids — only what is released.
    """

    def __init__(
        self,
        index: SimHashIndex,
        *,
        num_classes: int,
        guarantee: Budget | None,
        dense: IntArray | None = None,
        sparse: Mapping[int, Mapping[int, IntArray]] | None = None,
    ) -> None:
        if (dense is None) == (sparse is None):
            raise ValueError("exactly one of dense and sparse tables must be given")
        self.index = index
        self.num_classes = positive_int("num_classes", num_classes, minimum=2)
        self.guarantee = guarantee
        self._dense = dense
        self._sparse = {t: dict(rows) for t, rows in (sparse or {}).items()}

    # ----------------------------------------------------------------- release
    @classmethod
    def release(
        cls,
        keys: npt.ArrayLike,
        labels: npt.ArrayLike,
        *,
        num_classes: int,
        epsilon: float,
        tables: int = 16,
        bits: int = 8,
        hyperplane_seed: int = 0,
        sparse: bool = False,
        delta: float = 0.0,
        rng: RngLike = None,
    ) -> DPSimHashDatastore:
        """Release a DP datastore from (key, label) pairs.

        ``sparse=False``: pure ``epsilon``-DP, every one of the ``2**bits``
        buckets of every table carries noise (refused when ``tables * 2**bits *
        num_classes`` exceeds :data:`MAX_DENSE_CELLS`). ``sparse=True``:
        ``(epsilon, delta)``-DP thresholded release of non-empty buckets
        (``delta`` in (0, 1) required). See the module docstring for proofs.
        """
        epsilon = positive_finite("epsilon", epsilon)
        num_classes = positive_int("num_classes", num_classes, minimum=2)
        index, buckets, y = _hash_pairs(
            keys, labels, num_classes=num_classes, tables=tables, bits=bits, seed=hyperplane_seed
        )
        generator = make_rng(rng)
        if not sparse:
            if delta != 0.0:
                raise ValueError("delta must be 0 for the pure (sparse=False) release")
            cells = index.tables * (1 << index.bits) * num_classes
            if cells > MAX_DENSE_CELLS:
                raise ValueError(
                    f"bits must be small enough for a pure release: tables * 2**bits * "
                    f"num_classes = {cells} > {MAX_DENSE_CELLS}; use sparse=True"
                )
            counts = _dense_counts(buckets, y, index, num_classes)
            return cls(
                index,
                num_classes=num_classes,
                guarantee=Budget(epsilon),
                dense=_pure_release_noise(
                    counts, tables=index.tables, epsilon=epsilon, rng=generator
                ),
            )
        delta = probability("delta", delta, allow_zero=False)
        scale = 2.0 * index.tables / epsilon
        tau = _sparse_threshold(tables=index.tables, scale=scale, delta=delta)
        released: dict[int, dict[int, IntArray]] = {}
        for t in range(index.tables):
            ids, inverse = np.unique(buckets[:, t], return_inverse=True)
            counts = np.zeros((ids.size, num_classes), dtype=np.int64)
            np.add.at(counts, (inverse, y), 1)
            totals = counts.sum(axis=1) + np.asarray(
                discrete_laplace(scale, size=ids.size, rng=generator), dtype=np.int64
            )
            keep = totals >= tau
            noisy = counts[keep] + np.asarray(
                discrete_laplace(scale, size=(int(keep.sum()), num_classes), rng=generator),
                dtype=np.int64,
            )
            released[t] = {int(b): row for b, row in zip(ids[keep], noisy, strict=True)}
        return cls(
            index, num_classes=num_classes, guarantee=Budget(epsilon, delta), sparse=released
        )

    @classmethod
    def non_private(
        cls,
        keys: npt.ArrayLike,
        labels: npt.ArrayLike,
        *,
        num_classes: int,
        tables: int = 16,
        bits: int = 8,
        hyperplane_seed: int = 0,
    ) -> DPSimHashDatastore:
        """The exact (NOT private) datastore, for baselines and attack evaluation only."""
        num_classes = positive_int("num_classes", num_classes, minimum=2)
        index, buckets, y = _hash_pairs(
            keys, labels, num_classes=num_classes, tables=tables, bits=bits, seed=hyperplane_seed
        )
        counts = _dense_counts(buckets, y, index, num_classes)
        return cls(index, num_classes=num_classes, guarantee=None, dense=counts)

    # ------------------------------------------------------------------ query
    def bucket_votes(self, queries: npt.ArrayLike) -> IntArray:
        """The released vote vector of each query's bucket in each table: [Q, L, C]."""
        buckets = self.index.buckets(queries)
        if self._dense is not None:
            return self._dense[np.arange(self.index.tables)[None, :], buckets]
        votes = np.zeros((*buckets.shape, self.num_classes), dtype=np.int64)
        zero = np.zeros(self.num_classes, dtype=np.int64)
        for t in range(self.index.tables):
            rows = self._sparse.get(t, {})
            votes[:, t] = [rows.get(int(b), zero) for b in buckets[:, t]]
        return votes

    def class_scores(self, queries: npt.ArrayLike) -> FloatArray:
        """Summed noisy votes over the L tables, shape [Q, C] (vectorised)."""
        return np.asarray(self.bucket_votes(queries).sum(axis=1), dtype=np.float64)

    def predict(self, queries: npt.ArrayLike) -> IntArray:
        """The argmax class of each query."""
        return np.asarray(self.class_scores(queries).argmax(axis=1), dtype=np.int64)

    # ------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write the released artifact: hyperplanes and noisy tables only (npz, no pickle).

        A new file gets mode 0644 at most (0644 minus the umask; never
        writable by others, also under umask 000).
        """
        if self.guarantee is None:
            raise ValueError("a non_private datastore holds exact counts and must not be saved")
        arrays: dict[str, npt.NDArray[np.generic]] = {
            "format": np.array(_FORMAT),
            "hyperplanes": self.index.hyperplanes,
            "num_classes": np.array(self.num_classes),
            "epsilon": np.array(self.guarantee.epsilon),
            "delta": np.array(self.guarantee.delta),
        }
        if self._dense is not None:
            arrays["dense"] = self._dense
        else:
            table_ids, bucket_ids, rows = [], [], []
            for t, table in sorted(self._sparse.items()):
                for b, row in sorted(table.items()):
                    table_ids.append(t)
                    bucket_ids.append(b)
                    rows.append(row)
            arrays["sparse_table"] = np.asarray(table_ids, dtype=np.int64)
            arrays["sparse_bucket"] = np.asarray(bucket_ids, dtype=np.int64)
            arrays["sparse_votes"] = np.asarray(rows, dtype=np.int64).reshape(-1, self.num_classes)
        # 0644 at most, whatever the umask: others may read a release, never rewrite it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> DPSimHashDatastore:
        """Load an artifact written by :meth:`save`, validating it before allocating.

        Member names, dtypes, shapes and the decompressed size (at most
        ``max_bytes``, default 1 GiB) are checked from the headers first, then
        the values (``ValueError`` naming ``path``; see
        :mod:`~dprag_core.datastore.artifact`). The guarantee it reports is
        the (ε, δ) **recorded in the file: a claim of whoever wrote it**, not
        something loading can verify.

        >>> DPSimHashDatastore.load("missing.npz", max_bytes=0)
        Traceback (most recent call last):
        ...
        ValueError: max_bytes must be an integer >= 1, got 0
        """
        limit = positive_int("max_bytes", max_bytes)
        data = read_artifact(path, max_bytes=limit)
        index = SimHashIndex(data["hyperplanes"])
        num_classes = int(data["num_classes"])
        try:
            guarantee = Budget(float(data["epsilon"]), float(data["delta"]))
        except ValueError:
            raise ValueError(
                f"path is not a valid {_FORMAT} artifact: bad epsilon or delta"
            ) from None
        if "dense" in data:
            return cls(index, num_classes=num_classes, guarantee=guarantee, dense=data["dense"])
        sparse: dict[int, dict[int, IntArray]] = {t: {} for t in range(index.tables)}
        for t, b, row in zip(
            data["sparse_table"], data["sparse_bucket"], data["sparse_votes"], strict=True
        ):
            sparse[int(t)][int(b)] = row
        return cls(index, num_classes=num_classes, guarantee=guarantee, sparse=sparse)

    def __repr__(self) -> str:
        kind = "dense" if self._dense is not None else "sparse"
        return (
            f"DPSimHashDatastore(tables={self.index.tables}, bits={self.index.bits}, "
            f"num_classes={self.num_classes}, {kind}, guarantee={self.guarantee!r})"
        )


def _pure_release_noise(
    counts: IntArray, *, tables: int, epsilon: float, rng: np.random.Generator
) -> IntArray:
    """Add discrete Laplace noise of scale ``tables / epsilon`` to every cell of ``counts``.

    Works on any shape, so audits can release many datastores at once.
    """
    noise = discrete_laplace(tables / epsilon, size=counts.shape, rng=rng)
    return counts + np.asarray(noise, dtype=np.int64)


def _dense_counts(
    buckets: IntArray, labels: IntArray, index: SimHashIndex, num_classes: int
) -> IntArray:
    counts = np.zeros((index.tables, 1 << index.bits, num_classes), dtype=np.int64)
    table_ids = np.broadcast_to(np.arange(index.tables), buckets.shape)
    np.add.at(counts, (table_ids, buckets, labels[:, None]), 1)
    return counts
