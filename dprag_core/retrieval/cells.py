"""A public partition of the embedding space: cells fixed before any private data is seen.

Exact search scores every stored vector per query. A partitioned search scores
only the vectors in a few *cells*, and stays DP-stable (docs/design.md §11) when
three things hold, which :class:`PublicPartition` provides:

1. **The partition is public**: its centroids are seeded random directions
   (:meth:`PublicPartition.random`, data-independent, like the DP SimHash
   datastore's hyperplanes) or fitted on a *public* corpus
   (:meth:`PublicPartition.fit`), never on the private one. Its provenance (what
   it was made from, the seed, a digest of the training vectors) travels with
   it, and so do fingerprints of its training vectors: a store refuses to take
   in a document whose vector was among them (:meth:`PublicPartition.refuse_training`),
   so a partition fitted on the private corpus is refused when that corpus is
   added (what this can and cannot catch: docs/design.md §11).
2. **A vector's cell is a function of that vector alone**
   (:meth:`PublicPartition.assign`, at insert time): the centroid with the
   largest inner product, ties to the lowest cell index. Nothing about the
   other stored vectors (how many, which, in which batch) enters it.
3. **A query's probed cells are a function of the query alone**
   (:meth:`PublicPartition.probe`): the ``probes`` best centroids, a fixed
   public number, ties to the lower index.

Floating point: a BLAS product can round differently with the batch it is
computed in, which near a tie between two centroids could move a vector to
another cell depending on what was inserted with it. So the cell is defined on
exact arithmetic: the inner product of the float32 vector with each float32
centroid, correctly rounded to float64 (products of float32 numbers are exact in
float64, and :func:`math.fsum` rounds their sum once). A fast product computes
it; a row whose margin at the decision is within that product's proven error
bound is recomputed exactly. The result never depends on the batch.

>>> import numpy as np
>>> p = PublicPartition.random(dim=4, cells=3, probes=2, seed=0)
>>> p
PublicPartition(dim=4, cells=3, probes=2, provenance='random')
>>> x = np.eye(4)
>>> p.assign(x).tolist() == [p.assign(row[None, :])[0] for row in x]
True
>>> len(p.probe(x[0]))
2
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval.unit_records import DEFAULT_MAX_UNIT_RECORDS
from dprag_core.validation import missing_extra, positive_int, strict_init

__all__ = [
    "CELL_KEY",
    "PartitionProvenance",
    "PublicPartition",
    "check_partition",
    "vector_fingerprints",
]

CELL_KEY = "dprag_cell"
"""The metadata (payload) key that holds a stored document's cell."""

_ROWS = 8192
"""Rows per block of the fast product (memory: rows x cells float64)."""

_QUANTUM = 2.0**-16
"""Fingerprints round each component of a unit vector to this grid."""


@dataclass(frozen=True)
class PartitionProvenance:
    """Where a partition's centroids come from: public facts, recorded with it.

    ``kind``: ``"random"`` (seeded random directions, no data) or ``"public"``
    (k-means on public vectors); ``source``: your description of those vectors
    (e.g. "MiniLM embeddings of the docstrings of the wheels in requirements.txt");
    ``seed``; ``training_vectors``: how many; ``training_sha256``: a digest of
    the training matrix (float32), empty for ``"random"``.
    """

    kind: str
    source: str
    seed: int
    training_vectors: int = 0
    training_sha256: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("random", "public"):
            raise ValueError(f"kind must be 'random' or 'public', got {self.kind!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("source must be a non-empty description of the training data")


def _float32_rows(vectors: npt.ArrayLike, dim: int, name: str) -> npt.NDArray[np.float32]:
    x = np.asarray(vectors, dtype=np.float32)
    if x.size == 0:
        return np.zeros((0, dim), dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{name} must have shape (n, {dim}), got {np.shape(vectors)}")
    return np.ascontiguousarray(x)


def vector_fingerprints(vectors: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """A 64-bit fingerprint per row: its direction, each component rounded to 2^-16.

    Equal for a vector and a rescaled, float32-rounded copy of it (the form a
    store keeps), so a stored vector can be recognised among a partition's
    training vectors. Zero or non-finite rows get fingerprint 0.

    >>> import numpy as np
    >>> a = vector_fingerprints([[3.0, 4.0]])
    >>> bool(a[0] == vector_fingerprints(np.float32([[0.6, 0.8]]))[0])
    True
    """
    x = np.asarray(vectors, dtype=np.float64)
    x = x.reshape(len(x), -1) if x.ndim != 1 else x[None, :]
    weights = np.random.default_rng(0x5EED).integers(1, 2**63, size=x.shape[1], dtype=np.uint64)
    weights |= np.uint64(1)  # odd multipliers
    out = np.zeros(len(x), dtype=np.uint64)
    for start in range(0, len(x), _ROWS):
        block = x[start : start + _ROWS]
        with np.errstate(all="ignore"):
            norms = np.linalg.norm(block, axis=1, keepdims=True)
            unit = block / np.where(norms > 0, norms, 1.0)
        good = np.all(np.isfinite(unit), axis=1) & (norms[:, 0] > 0)
        grid = np.rint(np.where(good[:, None], unit, 0.0) / _QUANTUM).astype(np.int64)
        mixed = (grid.view(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
        mixed ^= mixed >> np.uint64(29)
        out[start : start + _ROWS] = np.where(good, mixed | np.uint64(1), np.uint64(0))
    return out


def _exact_ranking(row: npt.NDArray[np.float32], centroids: npt.NDArray[np.float32]) -> list[int]:
    """Every cell by the exact inner product with a float32 row, ties to the lower index.

    Products of float32 numbers are exact in float64 and :func:`math.fsum`
    rounds their sum once (monotone), so a larger rounded sum is a larger exact
    one; rows whose rounded sums are equal are compared as exact fractions.
    """
    x = row.astype(np.float64)
    products = [(x * c).tolist() for c in centroids.astype(np.float64)]
    rounded = [math.fsum(p) for p in products]
    groups: dict[float, int] = {}
    for value in rounded:
        groups[value] = groups.get(value, 0) + 1

    def key(j: int) -> tuple[float, Fraction, int]:
        tied = groups[rounded[j]] > 1
        return (-rounded[j], -Fraction(sum(map(Fraction, products[j]))) if tied else Fraction(0), j)

    return sorted(range(len(rounded)), key=key)


def _error_bound(x: npt.NDArray[Any], centroid_norm: float, unit_roundoff: float) -> Any:
    """A proven bound on a computed inner product's error, per row, plus a safety factor."""
    d = x.shape[1]
    gamma = (d + 2) * unit_roundoff / (1.0 - (d + 2) * unit_roundoff)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    return 4.0 * gamma * norms * centroid_norm + 1e-300


class PublicPartition:
    """Cells of the embedding space given by public centroids, and a public probe count.

    Build one with :meth:`random` or :meth:`fit` (or :meth:`load` a saved one).
    ``centroids`` (cells x dim) are stored as float32 and must be finite and
    non-zero; ``probes`` (1 <= probes <= cells) is the number of cells every
    query scores, chosen before any private data is seen (the module
    docstring says why it must not depend on the data). ``training_fingerprints``:
    :func:`vector_fingerprints` of the training vectors (:meth:`fit` records them).
    ``max_unit_records`` (default 256): the most records one privacy unit may
    hold in a corpus partitioned by it; every dprag add path refuses an add
    past it, so one unit adds at most that many records to a query's scan
    (:mod:`~dprag_core.retrieval.unit_records`: why that is public, and what
    time shows).

    >>> PublicPartition.random(dim=8, cells=16, probes=4).with_probes(2).probes
    2
    >>> PublicPartition.random(dim=8, cells=16, probes=4).max_unit_records
    256
    """

    @strict_init
    def __init__(
        self,
        centroids: npt.ArrayLike,
        *,
        probes: int,
        provenance: PartitionProvenance,
        training_fingerprints: npt.ArrayLike = (),
        max_unit_records: int = DEFAULT_MAX_UNIT_RECORDS,
    ) -> None:
        c = np.asarray(centroids, dtype=np.float32)
        if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 1:
            raise ValueError(f"centroids must have shape (cells, dim), got {np.shape(centroids)}")
        if not np.all(np.isfinite(c)) or np.any(np.linalg.norm(c, axis=1) == 0):
            raise ValueError("centroids must be finite and non-zero")
        probes = positive_int("probes", probes)
        if probes > c.shape[0]:
            raise ValueError(f"probes must be in [1, cells = {c.shape[0]}], got {probes}")
        if not isinstance(provenance, PartitionProvenance):
            raise TypeError("provenance must be a PartitionProvenance")
        self.centroids = np.ascontiguousarray(c)
        self.centroids.setflags(write=False)
        self.probes = probes
        self.max_unit_records = positive_int("max_unit_records", max_unit_records)
        self.provenance = provenance
        fps = np.unique(np.asarray(training_fingerprints, dtype=np.uint64))
        self.training_fingerprints = fps[fps != 0]
        self.training_fingerprints.setflags(write=False)
        self._norm = float(np.max(np.linalg.norm(self.centroids.astype(np.float64), axis=1)))

    # -- construction ----------------------------------------------------------------

    @classmethod
    def random(
        cls,
        *,
        dim: int,
        cells: int,
        probes: int,
        seed: int = 0,
        max_unit_records: int = DEFAULT_MAX_UNIT_RECORDS,
    ) -> PublicPartition:
        """``cells`` seeded random unit directions in ``dim`` dimensions: no data at all.

        >>> PublicPartition.random(dim=3, cells=2, probes=1).provenance.kind
        'random'
        """
        dim, cells = positive_int("dim", dim), positive_int("cells", cells)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        c = np.random.default_rng(seed).standard_normal((cells, dim))
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        source = f"{cells} random unit directions (numpy default_rng({seed}).standard_normal)"
        return cls(
            c,
            probes=probes,
            provenance=PartitionProvenance("random", source, seed),
            max_unit_records=max_unit_records,
        )

    @classmethod
    def fit(
        cls,
        public_vectors: npt.ArrayLike,
        *,
        cells: int,
        probes: int,
        source: str,
        seed: int = 0,
        iterations: int = 20,
        max_unit_records: int = DEFAULT_MAX_UNIT_RECORDS,
    ) -> PublicPartition:
        """Spherical k-means centroids of ``public_vectors``: a corpus that is **not private**.

        ``source`` describes those vectors (it is recorded in the provenance).
        The vectors' fingerprints are kept: a store refuses documents whose
        vectors are among them, so a partition fitted on the private corpus is
        refused when that corpus is added (docs/design.md §11). Needs faiss
        (``pip install 'dprag[faiss]'``).
        """
        try:
            import faiss
        except ImportError as exc:  # pragma: no cover - faiss is a test dependency
            raise missing_extra("PublicPartition.fit", exc, extra="faiss") from exc
        cells = positive_int("cells", cells)
        iterations = positive_int("iterations", iterations)
        x = np.asarray(public_vectors, dtype=np.float32)
        if x.ndim != 2 or len(x) < cells:
            raise ValueError(
                f"public_vectors must have shape (n, dim) with n >= cells = {cells}, "
                f"got {np.shape(public_vectors)}"
            )
        if not np.all(np.isfinite(x)):
            raise ValueError("public_vectors must be finite")
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("public_vectors must not contain zero vectors")
        unit = np.ascontiguousarray(x / norms)
        kmeans = faiss.Kmeans(
            x.shape[1], cells, niter=iterations, seed=seed, spherical=True,
            max_points_per_centroid=1_000_000, verbose=False,
        )  # fmt: skip
        kmeans.train(unit)
        assert kmeans.centroids is not None
        provenance = PartitionProvenance(
            "public",
            source,
            seed,
            training_vectors=len(x),
            training_sha256=hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
        )
        return cls(
            kmeans.centroids,
            probes=probes,
            provenance=provenance,
            training_fingerprints=vector_fingerprints(x),
            max_unit_records=max_unit_records,
        )

    def with_probes(self, probes: int) -> PublicPartition:
        """The same cells with another public probe count."""
        return PublicPartition(
            self.centroids,
            probes=probes,
            provenance=self.provenance,
            training_fingerprints=self.training_fingerprints,
            max_unit_records=self.max_unit_records,
        )

    def with_max_unit_records(self, max_unit_records: int) -> PublicPartition:
        """The same cells with another public bound on one unit's records.

        Raising it lets one unit add up to that many records to a query's
        scan, and a stopwatch see their scoring.

        >>> PublicPartition.random(dim=2, cells=2, probes=1).with_max_unit_records(10_000)
        PublicPartition(dim=2, cells=2, probes=1, provenance='random')
        """
        return PublicPartition(
            self.centroids,
            probes=self.probes,
            provenance=self.provenance,
            training_fingerprints=self.training_fingerprints,
            max_unit_records=max_unit_records,
        )

    # -- what it is ------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """The dimension of the vectors it partitions."""
        return int(self.centroids.shape[1])

    @property
    def cells(self) -> int:
        """The number of cells."""
        return int(self.centroids.shape[0])

    @property
    def fingerprint(self) -> str:
        """A sha256 of everything that defines it (centroids, probes, provenance, training,
        the bound on one unit's records)."""
        digest = hashlib.sha256(self.centroids.tobytes())
        meta = [self.probes, asdict(self.provenance), self.max_unit_records]
        digest.update(json.dumps(meta).encode())
        digest.update(self.training_fingerprints.tobytes())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return (
            f"PublicPartition(dim={self.dim}, cells={self.cells}, probes={self.probes}, "
            f"provenance={self.provenance.kind!r})"
        )

    # -- cells -----------------------------------------------------------------------

    def _argmax(self, x: npt.NDArray[np.float32], top: int) -> list[list[int]]:
        """Per row, the ``top`` best cells by exact inner product (ties to the lower index)."""
        c32 = self.centroids
        out: list[list[int]] = []
        width = min(top + 1, self.cells)
        for start in range(0, len(x), _ROWS):
            block = x[start : start + _ROWS]
            uncertain = np.ones(len(block), dtype=bool)
            chosen: list[list[int]] = [[] for _ in block]
            for dtype, roundoff in ((np.float32, 2.0**-24), (np.float64, 2.0**-53)):
                rows = np.flatnonzero(uncertain)
                if not len(rows):
                    break
                sub = block[rows]
                scores = sub.astype(dtype) @ c32.T.astype(dtype)
                best = np.argpartition(-scores, width - 1, axis=1)[:, :width]
                values = np.take_along_axis(scores, best, axis=1)
                order = np.argsort(-values, axis=1, kind="stable")
                best = np.take_along_axis(best, order, axis=1)
                values = np.take_along_axis(values, order, axis=1)
                clear = np.all(np.isfinite(sub), axis=1) & np.all(np.isfinite(values), axis=1)
                if top < self.cells:  # the chosen set is certain when the gap at the cut
                    bound = _error_bound(sub, self._norm, roundoff)  # exceeds the error
                    clear &= values[:, top - 1] - values[:, top] > 2 * bound
                for r, ok, cells in zip(rows, clear, best, strict=True):
                    if ok:
                        chosen[r] = sorted(int(i) for i in cells[:top])
                        uncertain[r] = False
            for r in np.flatnonzero(uncertain):  # near a tie (or not finite): exact arithmetic
                row = np.where(np.isfinite(block[r]), block[r], 0).astype(np.float32)
                chosen[r] = sorted(_exact_ranking(row, c32)[:top])
            out.extend(chosen)
        return out

    def assign(self, vectors: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The cell of each row: a function of that row alone (module docstring).

        A non-finite row (which no store accepts) falls in cell 0's tie rule:
        its non-finite components count as 0.

        >>> import numpy as np
        >>> p = PublicPartition(np.eye(2), probes=1,
        ...     provenance=PartitionProvenance("random", "the axes", 0))
        >>> p.assign([[0.2, 0.9], [1.0, 1.0]]).tolist()  # a tie goes to the lower cell
        [1, 0]
        """
        x = _float32_rows(vectors, self.dim, "vectors")
        return np.array([cells[0] for cells in self._argmax(x, 1)], dtype=np.int64)

    def probe(self, query: npt.ArrayLike) -> tuple[int, ...]:
        """The ``probes`` cells a query scores, ascending: a function of the query alone.

        >>> import numpy as np
        >>> p = PublicPartition(np.eye(3), probes=2,
        ...     provenance=PartitionProvenance("random", "the axes", 0))
        >>> p.probe([0.1, 0.5, 0.9])
        (1, 2)
        """
        q = _float32_rows(query, self.dim, "query")
        if len(q) != 1:
            raise ValueError("query must be one vector")
        return tuple(self._argmax(q, self.probes)[0])

    # -- provenance checks -----------------------------------------------------------

    def refuse_training(self, vectors: npt.ArrayLike, *, what: str = "documents") -> None:
        """ValueError if any of ``vectors`` was among this partition's training vectors.

        Called before vectors are stored: a partition fitted on the private
        corpus would make the cells depend on it. The message gives a count,
        never which vectors.
        """
        if not len(self.training_fingerprints):
            return
        hits = int(np.isin(vector_fingerprints(vectors), self.training_fingerprints).sum())
        if hits:
            raise ValueError(
                f"{hits} of the {what} given are among the vectors this partition was fitted on "
                f"({self.provenance.source!r}): a partition must be fitted on public data, "
                "never on the corpus it partitions, or every cell depends on that corpus. Fix: "
                "PublicPartition.fit(public_vectors, ...) on a public corpus, or "
                "PublicPartition.random(...)"
            )

    # -- files -----------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write it to ``path`` (``.npz``), with its fingerprint for :meth:`load` to check."""
        np.savez(
            Path(path),
            centroids=self.centroids,
            training_fingerprints=self.training_fingerprints,
            meta=np.array(
                json.dumps(
                    {
                        "probes": self.probes,
                        "max_unit_records": self.max_unit_records,
                        **asdict(self.provenance),
                    }
                )
            ),
            fingerprint=np.array(self.fingerprint),
        )

    @classmethod
    def load(cls, path: str | Path) -> PublicPartition:
        """Read a partition written by :meth:`save`; ValueError if it was altered."""
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            probes = meta.pop("probes")
            if "max_unit_records" not in meta:
                raise ValueError(
                    f"{path}: the partition records no max_unit_records. Fix: make it again "
                    "(PublicPartition.random or fit, same arguments) and save it"
                )
            bound = meta.pop("max_unit_records")
            partition = cls(
                data["centroids"],
                probes=probes,
                provenance=PartitionProvenance(**meta),
                training_fingerprints=data["training_fingerprints"],
                max_unit_records=bound,
            )
            if partition.fingerprint != str(data["fingerprint"]):
                raise ValueError(f"{path}: the partition's fingerprint does not match its content")
        return partition


def check_partition(value: object) -> PublicPartition:
    """``value`` if it is a :class:`PublicPartition`, else TypeError naming ``partition``.

    >>> check_partition("cells")
    Traceback (most recent call last):
    TypeError: partition must be a PublicPartition, got str
    """
    if not isinstance(value, PublicPartition):
        raise TypeError(f"partition must be a PublicPartition, got {type(value).__name__}")
    return value
