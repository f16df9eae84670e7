"""Exact search restricted to a public partition's probed cells, in each store's own terms.

The partition (:class:`~dprag_core.retrieval.cells.PublicPartition`) gives every
stored vector its cell at insert time and every query its probed cells; this
module expresses "the exact top k among the documents of these cells" with the
store clients both adapters wrap, so the store ranks and dprag reads only the
probed cells:

- FAISS: an ``IndexIVFFlat`` (inner product on unit vectors: cosine) whose
  quantiser holds the partition's centroids (:func:`faiss_partitioned_index`;
  nothing is trained), vectors added to the lists dprag assigns
  (:func:`faiss_add`, never FAISS's own assignment), and a search of exactly
  the probed lists (:func:`faiss_search`: ``search_preassigned``, every vector
  of those lists scored, so the ranking inside them is exact).
- Chroma: ``get(where={cell key: {"$in": cells}})`` reads the vectors of the
  probed cells only (:func:`chroma_where`), ranked by
  :mod:`~dprag_core.retrieval.exact`.
- Qdrant: a ``MatchAny`` payload condition on the cell (:func:`qdrant_filter`)
  with ``exact=True``; on a server, a payload index on the key (created by the
  adapters' write helpers) lets it read only those points. In local mode, which
  scans every point anyway and filters in Python, the exact ranking is walked
  and the probed cells' points kept (:func:`first_in_cells`).
- pgvector: ``cell IN (...)`` in a transaction with index scans and sequential
  scans off (:data:`~dprag_core.retrieval.clients.PG_CELLS_SETTINGS`): the
  B-tree on the cell (:func:`pg_cell_index`) serves it as a bitmap scan, which
  no vector index can (HNSW and IVFFlat have no bitmap scans), so every row of
  the probed cells is read and scored and the ``ORDER BY distance LIMIT k`` is
  exact over them. LangChain's write helper adds a batch's rows in cell order,
  so a cell's rows share heap pages and the scan reads about the probed
  fraction of the table; for rows added one at a time, ``CLUSTER <table>
  USING <the cell B-tree>`` lays them out the same way (a maintenance step:
  it never changes a result, only how many pages a search reads).

Why never a vector index inside the probed cells (pgvector's HNSW with
``hnsw.iterative_scan`` and the cell filter, IVFFlat, Qdrant's or LanceDB's
approximate search): the privacy argument (docs/design.md §11) is that a
question's candidates are the documents of its probed cells, each in or out by
its own vector, and that their ranking is a per-pair score with ties by id, so
adding one unit inserts it and moves nothing else. An approximate index returns
what its graph or lists *reach*, and the graph is built from every stored
vector: adding x rewires its neighbours' edges (HNSW prunes edges when a
closer neighbour arrives), so another document y can stop being found though x
did not outrank it. Retrieved sets would then differ by more than one
substitution, which no top-n or threshold proof here covers. So recall below 1
comes only from the cells not probed (a public function of the question), as
for FAISS, whose ``search_preassigned`` scores every vector of the probed lists.
- LanceDB: ``cell IN (...)`` as a prefilter of the flat scan (:func:`lance_where`),
  served by a bitmap index on the cell (:func:`lance_cell_index`).

>>> chroma_where("dprag_cell", (3, 7))
{'dprag_cell': {'$in': [3, 7]}}
>>> lance_where("metadata.dprag_cell", (3, 7), "x > 1")
'(x > 1) AND (metadata.dprag_cell IN (3, 7))'
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.ties import tie_complete

__all__ = [
    "CELLS_EXACT",
    "chroma_where",
    "faiss_add",
    "faiss_bind",
    "faiss_partition_problem",
    "faiss_partitioned_index",
    "faiss_range",
    "faiss_search",
    "first_in_cells",
    "lance_cell_index",
    "lance_equals",
    "lance_where",
    "partitioned_exact",
    "pg_cell_index",
    "qdrant_filter",
]

T = TypeVar("T")

CELLS_EXACT = (
    "exact search of the {probes} cells a question probes, of a public partition of {cells} "
    "cells (every document of those cells scored; cells and probes fixed before any data)"
)


def partitioned_exact(partition: PublicPartition) -> str:
    """How a partitioned search is exact, for a store's facts.

    >>> from dprag_core.retrieval.cells import PublicPartition
    >>> partitioned_exact(PublicPartition.random(dim=2, cells=4, probes=2))[:29]
    'exact search of the 2 cells a'
    """
    return CELLS_EXACT.format(probes=partition.probes, cells=partition.cells)


# -- FAISS -----------------------------------------------------------------------------


def faiss_partitioned_index(partition: PublicPartition) -> Any:
    """An empty ``IndexIVFFlat`` whose lists are the partition's cells (nothing trained).

    Inner product on unit vectors (cosine): its ``add`` is dprag's
    (:func:`faiss_bind`), so whoever adds to it (FaissCorpus, LangChain's
    ``FAISS``, LlamaIndex's ``FaissVectorStore``) gets the partition's cells.

    >>> from dprag_core.retrieval.cells import PublicPartition
    >>> index = faiss_partitioned_index(PublicPartition.random(dim=4, cells=3, probes=1))
    >>> index.nlist, index.nprobe, index.is_trained
    (3, 1, True)
    """
    import faiss

    quantiser = faiss.IndexFlatIP(partition.dim)
    quantiser.add(partition.centroids)
    index = faiss.IndexIVFFlat(
        quantiser, partition.dim, partition.cells, faiss.METRIC_INNER_PRODUCT
    )
    index.is_trained = True
    index.nprobe = partition.probes
    faiss_bind(index, partition)
    return index


def faiss_bind(index: Any, partition: PublicPartition) -> None:
    """Make ``index.add(x)`` add through the partition (:func:`faiss_add`).

    FAISS's own ``add`` would assign cells with its float32 quantiser, whose
    products near a boundary may round differently in a batch of 20 or more
    (BLAS) than alone: a cell would depend on what was added with the vector.
    An index read back from a file is bound again when a store is opened.
    """
    index.add = partial(faiss_add, index, partition=partition)


def faiss_partition_problem(index: Any, partition: PublicPartition) -> str | None:
    """Why ``index`` is not ``partition``'s ``IndexIVFFlat`` (None when it is).

    Its quantiser must hold exactly the partition's centroids, in order (then
    its lists are the partition's cells), and its metric must be the inner product.
    """
    import faiss

    ivf: Any = faiss.downcast_index(index)
    if type(ivf).__name__ != "IndexIVFFlat":
        return f"its index is a {type(ivf).__name__}, not the partition's IndexIVFFlat"
    quantiser = faiss.downcast_index(ivf.quantizer)
    if ivf.nlist != partition.cells or ivf.d != partition.dim or quantiser.ntotal != ivf.nlist:
        return f"its {ivf.nlist} lists of dimension {ivf.d} are not the partition's cells"
    if ivf.metric_type != faiss.METRIC_INNER_PRODUCT:
        return "its metric is not the inner product (build it with faiss_partitioned_index)"
    centroids = quantiser.reconstruct_n(0, quantiser.ntotal)
    if not np.array_equal(centroids, partition.centroids):
        return "its quantiser's centroids are not the partition's (trained on other data?)"
    return None


def _unit_rows(vectors: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    x = np.array(vectors, dtype=np.float32, ndmin=2).reshape(-1, dim)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(np.isfinite(x)) or np.any(norms == 0):
        raise ValueError("vectors must be finite and non-zero")
    return np.ascontiguousarray(x / norms)


def faiss_add(index: Any, vectors: npt.ArrayLike, *, partition: PublicPartition) -> None:
    """Add unit-normalised ``vectors`` (ids continue the count) to the cells the partition assigns.

    Refused (ValueError, nothing added) when a vector is among the partition's
    training vectors (:meth:`~dprag_core.retrieval.cells.PublicPartition.refuse_training`).
    """
    import faiss

    x = _unit_rows(vectors, index.d)
    partition.refuse_training(x)
    ids = np.arange(index.ntotal, index.ntotal + len(x), dtype=np.int64)
    cells = np.ascontiguousarray(partition.assign(x))
    index.add_core(len(x), faiss.swig_ptr(x), faiss.swig_ptr(ids), faiss.swig_ptr(cells))


def _query_and_cells(
    index: Any, query: npt.ArrayLike, cells: Sequence[int]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], Any]:
    import faiss

    q = _unit_rows(query, index.d)[:1]
    keys = np.ascontiguousarray(np.asarray(cells, dtype=np.int64).reshape(1, -1))
    coarse = np.zeros(keys.shape, dtype=np.float32)
    params = faiss.SearchParametersIVF()
    params.nprobe = keys.shape[1]
    return q, keys, coarse, params


def faiss_search(
    index: Any, query: npt.ArrayLike, cells: Sequence[int], k: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """The exact top ``k`` of lists ``cells`` for the unit ``query``: (cosines, ids), best first."""
    import faiss

    q, keys, coarse, params = _query_and_cells(index, query, cells)
    scores = np.empty((1, k), dtype=np.float32)
    ids = np.empty((1, k), dtype=np.int64)
    index.search_preassigned_c(
        1, faiss.swig_ptr(q), k, faiss.swig_ptr(keys), faiss.swig_ptr(coarse),
        faiss.swig_ptr(scores), faiss.swig_ptr(ids), False, params,
    )  # fmt: skip
    found = ids[0] >= 0
    return scores[0][found], ids[0][found]


def faiss_range(
    index: Any, query: npt.ArrayLike, cells: Sequence[int], radius: float
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Every vector of lists ``cells`` whose cosine with ``query`` is above ``radius``."""
    import faiss

    q, keys, coarse, params = _query_and_cells(index, query, cells)
    result = faiss.RangeSearchResult(1)
    index.range_search_preassigned_c(
        1, faiss.swig_ptr(q), float(radius), faiss.swig_ptr(keys), faiss.swig_ptr(coarse),
        result, False, params,
    )  # fmt: skip
    n = int(faiss.rev_swig_ptr(result.lims, 2)[1])
    scores = faiss.rev_swig_ptr(result.distances, n).copy() if n else np.zeros(0, np.float32)
    ids = faiss.rev_swig_ptr(result.labels, n).copy() if n else np.zeros(0, np.int64)
    return scores, ids


# -- stores with a cell in each document's metadata -----------------------------------


def first_in_cells(
    search: Callable[[int], Sequence[T]],
    k: int,
    cells: Collection[int],
    cell_of: Callable[[T], object],
    *,
    score: Callable[[T], float],
    ident: Callable[[T], str],
    partition: PublicPartition,
) -> list[T]:
    """The first ``k`` items of ``search``'s exact ranking whose cell is one of ``cells``.

    For a store that scans every point whatever the filter (Qdrant's local
    mode evaluates a payload filter in Python, point by point): walking its
    exact ranking (tie groups completed, ties by id) and keeping the probed
    cells' items gives exactly the probed cells' top k, for the cost of the
    scan. The walk starts at ``2 k cells / probes`` items and doubles.

    >>> from dprag_core.retrieval.cells import PublicPartition
    >>> p = PublicPartition.random(dim=2, cells=2, probes=1)
    >>> rows = [("a", 0.9, 1), ("b", 0.8, 0), ("c", 0.7, 0), ("d", 0.6, 1)]
    >>> first_in_cells(lambda n: rows[:n], 2, {1}, lambda r: r[2], score=lambda r: r[1],
    ...                ident=lambda r: r[0], partition=p)
    [('a', 0.9, 1), ('d', 0.6, 1)]
    """
    wanted = {int(c) for c in cells}
    n = max(k, 2 * k * partition.cells // max(len(wanted), 1))
    while True:
        ranked = tie_complete(search, n, score=score, ident=ident)
        inside = [item for item in ranked if cell_of(item) in wanted]
        if len(inside) >= k or len(ranked) < n:
            return inside[:k]
        n *= 2


def chroma_where(
    key: str, cells: Sequence[int], where: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Chroma ``where`` keeping the documents of ``cells`` (and ``where``, if given)."""
    cell = {key: {"$in": [int(c) for c in cells]}}
    return {"$and": [dict(where), cell]} if where else cell


def qdrant_filter(key: str, cells: Sequence[int], base: Any = None) -> Any:
    """A Qdrant ``Filter`` keeping the points of ``cells`` (and ``base``, if given)."""
    from qdrant_client import models

    condition: list[Any] = [
        models.FieldCondition(key=key, match=models.MatchAny(any=[int(c) for c in cells]))
    ]
    if base is not None:
        condition.append(base)
    return models.Filter(must=condition)


def lance_where(column: str, cells: Sequence[int], where: str | None = None) -> str:
    """A LanceDB SQL predicate keeping the rows of ``cells`` (and ``where``, if given)."""
    cell = f"{column} IN ({', '.join(str(int(c)) for c in cells)})"
    return f"({where}) AND ({cell})" if where else cell


def lance_equals(key: str, value: Any) -> str:
    """A LanceDB SQL predicate ``metadata.key = value`` (a str, int or float value).

    >>> lance_equals("who", "O'Brien")
    "metadata.`who` = 'O''Brien'"
    """
    if not key.isidentifier():
        raise ValueError(f"key must be an identifier for a LanceDB filter, got {key!r}")
    if isinstance(value, str):
        literal = "'" + value.replace("'", "''") + "'"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        literal = repr(value)
    else:
        raise TypeError(f"value must be a str, int or float, got {type(value).__name__}")
    return f"metadata.`{key}` = {literal}"


def lance_cell_index(table: Any, column: str) -> None:
    """A LanceDB bitmap index on the cell ``column``: the prefilter reads only those rows.

    Rows added later are scanned unindexed until the index is made again.
    """
    with warnings.catch_warnings():  # create_scalar_index: deprecated for create_index
        warnings.simplefilter("ignore")
        table.create_scalar_index(column, index_type="BITMAP", replace=True)


def pg_cell_index(connection: Any, *, table: str, expression: str, name: str) -> None:
    """``CREATE INDEX IF NOT EXISTS name ON table (expression)``: a B-tree on the cell.

    ``table``, ``expression`` and ``name`` are SQL written by the adapters (never
    user or document text).
    """
    from sqlalchemy import text

    connection.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({expression})"))
