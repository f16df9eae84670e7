"""Worst-case neighbouring corpora for the partitioned search, and its three mutations.

Geometry: unit vectors in the plane, padded with zeros to ``DIM`` dimensions
(stores want a few). The public partition has four cells, the axes
(``C0`` at 0°, ``C1`` at 90°, ``C2`` at 180°, ``C3`` at 270°); the question ``"Q"``
points at 30°, so it probes ``C0`` with one probe and ``C0, C1`` with two. Texts
carry the audit labels of tests/retrieval_audit.py (``"Q:1"`` votes 1).

Adversarial x (each must change at most one of the four candidate slots):

- ``boundary``: x lies exactly on the C0/C1 boundary (45°, equal float32
  components): its cell is decided by the tie rule, and nothing else moves;
- ``fills``: x owns 7 chunks, all in the probed cell, above everything there;
- ``tied``: x's vector equals a stored document's, so their scores tie; the tie
  is broken by id, and x's ids sort among the others.

Mutations (each must change several slots, and the audit must fail):

- ``refit``: centroids fitted on the private corpus itself, x included
  (:func:`refit_rows`: one added unit moves the boundary);
- ``adaptive``: the probe count chosen from the data: probe cells, nearest
  first, until they hold 4 units (:func:`adaptive_probe`);
- ``capacity``: cell assignment recomputed from the data: a cell keeps the 4
  documents nearest its centroid and the rest overflow to their next cell
  (:func:`capacity_assign`), so a unit that fills a cell pushes others out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval.cells import PartitionProvenance, PublicPartition

DIM = 8
QUESTION = "Q"
SLOTS = 4


def at(degrees: float) -> tuple[float, ...]:
    """The unit vector at ``degrees`` in the plane, padded to DIM."""
    r = math.radians(degrees)
    return (math.cos(r), math.sin(r)) + (0.0,) * (DIM - 2)


BOUNDARY = (float(np.float32(math.sqrt(0.5))),) * 2 + (0.0,) * (DIM - 2)
"""Exactly on the C0/C1 boundary: equal float32 components."""

QUERY = at(30.0)


def axes(probes: int) -> PublicPartition:
    """The public partition: the four axes of the plane."""
    centroids = [(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)]
    centroids = [c + (0.0,) * (DIM - 2) for c in centroids]
    return PublicPartition(
        centroids, probes=probes, provenance=PartitionProvenance("random", "the plane's axes", 0)
    )


@dataclass(frozen=True)
class Row:
    """One chunk: its id, privacy unit, text (with its vote) and vector."""

    id: str
    unit: str
    text: str
    vector: tuple[float, ...]


def _rows(spec: Sequence[tuple[str, str, int, tuple[float, ...]]]) -> list[Row]:
    return [Row(i, u, f"{QUESTION}:{vote} {i}", v) for i, u, vote, v in spec]


def case_rows(case: str, *, with_new_unit: bool) -> tuple[list[Row], int]:
    """(rows, probes) of an adversarial case (module docstring)."""
    if case == "boundary":  # C0 holds z1..z4 (vote 0); x (vote 1) on the boundary, in C0
        rows = _rows([(f"z{i}", f"z{i}", 0, at(-5.0 * i)) for i in range(1, 5)])
        rows += _rows([(f"a{i}", f"a{i}", 1, at(60.0 + 5 * i)) for i in range(5, 9)])
        new = _rows([("x", "x", 1, BOUNDARY)])
        return rows + (new if with_new_unit else []), 1
    if case == "fills":  # x: 7 chunks in C0, above z1..z4
        rows = _rows([(f"z{i}", f"z{i}", 0, at(-20.0 + 3 * i)) for i in range(1, 5)])
        rows += _rows([(f"a{i}", f"a{i}", 1, at(120.0 + 5 * i)) for i in range(5, 9)])
        new = _rows([(f"x{c}", "x", 1, at(24.0 + c)) for c in range(1, 8)])
        return rows + (new if with_new_unit else []), 2
    if case == "tied":  # x's vector is z2's: tied, broken by id
        rows = _rows([(f"z{i}", f"z{i}", 0, at(30.0 - 2 * i)) for i in range(1, 6)])
        new = _rows([("m2", "m", 1, at(26.0))])  # z2's vector; "m2" < "z2"
        return rows + (new if with_new_unit else []), 1
    raise ValueError(case)


CASES = ("boundary", "fills", "tied")


# -- mutations -------------------------------------------------------------------------


def adaptive_rows(*, with_new_unit: bool) -> list[Row]:
    """C0 holds z1..z3 (vote 0, far from Q); C1 holds a5..a8 (vote 1, near Q); x joins C0.

    Probing until 4 units: C0 and C1 on D (top 4: a5..a8), C0 alone on D'
    (top 4: x, z1..z3): every slot changes. With a fixed probe count, one at most.
    """
    rows = _rows([(f"z{i}", f"z{i}", 0, at(-40.0 + 3 * i)) for i in range(1, 4)])
    rows += _rows([(f"a{i}", f"a{i}", 1, at(45.0 + 3 * i)) for i in range(5, 9)])
    return rows + (_rows([("x", "x", 0, at(-20.0))]) if with_new_unit else [])


def adaptive_probe(
    partition: PublicPartition, rows: Sequence[Row], *, units: int = SLOTS
) -> Callable[[npt.ArrayLike], tuple[int, ...]]:
    """The mutation: probe cells, nearest first, until they hold ``units`` units of ``rows``."""
    cells = partition.assign(np.array([r.vector for r in rows]))
    held: dict[int, set[str]] = {}
    for r, c in zip(rows, cells, strict=True):
        held.setdefault(int(c), set()).add(r.unit)

    def probe(query: npt.ArrayLike) -> tuple[int, ...]:
        scores = partition.centroids @ np.asarray(query, dtype=np.float32).reshape(-1)
        chosen: list[int] = []
        for cell in np.argsort(-scores, kind="stable"):
            chosen.append(int(cell))
            if len(set().union(*(held.get(c, set()) for c in chosen))) >= units:
                break
        return tuple(sorted(chosen))

    return probe


def capacity_rows(*, with_new_unit: bool) -> list[Row]:
    """C0 holds a5..a8 (vote 1); x (7 chunks, vote 0) lies nearer C0's centroid."""
    rows = _rows([(f"a{i}", f"a{i}", 1, at(10.0 + 3 * i)) for i in range(5, 9)])
    return rows + (
        _rows([(f"x{c}", "x", 0, at(float(c))) for c in range(1, 8)]) if with_new_unit else []
    )


def capacity_assign(
    partition: PublicPartition, capacity: int = SLOTS
) -> Callable[..., npt.NDArray[np.int64]]:
    """The mutation: a cell keeps the ``capacity`` rows nearest its centroid, the rest move on."""

    def assign(vectors: npt.ArrayLike) -> npt.NDArray[np.int64]:
        x = np.asarray(vectors, dtype=np.float64).reshape(-1, partition.dim)
        scores = x @ partition.centroids.T.astype(np.float64)
        out = np.full(len(x), -1, dtype=np.int64)
        for rank in range(partition.cells):  # each row's rank-th choice, nearest rows first
            for cell in range(partition.cells):
                want = [
                    i
                    for i in range(len(x))
                    if out[i] < 0 and np.argsort(-scores[i], kind="stable")[rank] == cell
                ]
                room = capacity - int(np.sum(out == cell))
                for i in sorted(want, key=lambda i: -scores[i, cell])[: max(room, 0)]:
                    out[i] = cell
        return out

    return assign


def refit_rows(*, with_new_unit: bool) -> list[Row]:
    """Z (0°, vote 0), A (70°, vote 1), B (120°, vote 0); x: 7 chunks at 180°. Asked at REFIT_QUERY.

    Two cells fitted on D (k-means, seed 3) give the question a cell whose best
    units are z1..z4; fitted on D + x, a5..a8: every slot changes. With the
    public partition, one at most.
    """
    rows = _rows([(f"z{i}", f"z{i}", 0, at(2.0 * i)) for i in range(1, 5)])
    rows += _rows([(f"a{i}", f"a{i}", 1, at(70.0 + 2 * i)) for i in range(5, 9)])
    rows += _rows([(f"b{i}", f"b{i}", 0, at(120.0 + 2 * i)) for i in range(1, 5)])
    new = _rows([(f"x{c}", "x", 0, at(180.0 + c)) for c in range(1, 8)])
    return rows + (new if with_new_unit else [])


REFIT_QUERY = at(50.0)
"""The question's vector in the refit case."""


def refit(rows: Sequence[Row], *, probes: int = 1) -> PublicPartition:
    """The mutation: a partition fitted on the private corpus itself (2 cells)."""
    x = np.array([r.vector for r in rows])
    with quiet_faiss():
        return PublicPartition.fit(x, cells=2, probes=probes, source="the private corpus", seed=3)


@contextmanager
def quiet_faiss() -> Iterator[None]:
    """FAISS's k-means warns on stderr (C++) about few points per centroid: silence it."""
    import os

    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
