"""Facts read from the store clients both adapters share: FAISS, Chroma, Qdrant, pgvector.

The LangChain and LlamaIndex store tables (``langchain_dprag.stores``,
``llamaindex_dprag.stores``) wrap the same clients, so what a client object says
about its metric and its exact search is read here once. Each client package is
imported only when a store of its kind is read.

- FAISS: :func:`faiss_index` unwraps ID maps and L2-normalisation transforms
  down to the index that searches; only the flat ``IndexFlat*`` are exact; its
  ``metric_type`` says inner product or squared L2.
- Chroma: :func:`chroma_space` (``l2``, ``cosine``, ``ip``: Chroma returns the
  *distances* squared L2, 1 - cos, 1 - q·v); Chroma's HNSW has no exact mode,
  so the adapters rank its stored vectors (:mod:`~dprag_core.retrieval.exact`).
- Qdrant: :func:`qdrant_distance` from the collection's vector parameters
  (Cosine and Dot are similarities, Euclid and Manhattan distances);
  :func:`qdrant_exact_params` asks for a full scan without quantized vectors.
- pgvector: :func:`exact_session_maker` runs each query's transaction with
  index scans off (:data:`PG_EXACT_SETTINGS`), so no HNSW or IVFFlat index can
  answer it; a ``WHERE`` filter keeps it exact within the filtered rows.
- LanceDB: :func:`lance_distance` (the metric of the column's vector index,
  else LanceDB's default ``l2``, a squared L2); :func:`lance_exact` searches
  with ``bypass_vector_index()``: a flat scan, never the IVF index.

>>> CHROMA_METRICS["cosine"], QDRANT_METRICS["Euclid"]
('cosine_distance', 'l2')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dprag_core.retrieval.exact import exact_ranking

__all__ = [
    "CHROMA_EXACT",
    "CHROMA_EXACT_LIMIT",
    "CHROMA_METRICS",
    "FLAT_EXACT",
    "LANCE_EXACT",
    "LANCE_METRICS",
    "PG_CELLS_SETTINGS",
    "PG_EXACT",
    "PG_EXACT_SETTINGS",
    "QDRANT_EXACT",
    "QDRANT_METRICS",
    "ChromaScan",
    "FaissIndex",
    "chroma_space",
    "chroma_too_large",
    "exact_session_maker",
    "faiss_index",
    "lance_distance",
    "lance_exact",
    "qdrant_distance",
    "qdrant_exact_params",
    "qdrant_local",
]

FLAT_EXACT = "flat index (every stored vector scored)"
CHROMA_EXACT = (
    "exact ranking computed from the stored vectors (Chroma's HNSW has no exact mode: every "
    "query reads all N vectors and scores them, O(N·d))"
)
QDRANT_EXACT = "exact=True on every query (a full scan; quantization ignored)"
PG_EXACT = "index scans off in each query's transaction (an exact sequential scan)"
PG_EXACT_SETTINGS = ("enable_indexscan = off", "enable_seqscan = on")
"""What each exact pgvector query's transaction sets (``SET LOCAL``): no index answers it."""
PG_CELLS_SETTINGS = ("enable_indexscan = off", "enable_seqscan = off")
"""What each partitioned pgvector query's transaction sets: no index *scan* (so no HNSW or
IVFFlat index answers), and the probed cells read through the B-tree on the cell as a
bitmap scan (every row of those cells, nothing else) rather than a sequential scan of the
whole table, which the planner otherwise keeps once a quarter of the rows qualify. With no
B-tree on the cell the sequential scan is the one plan left, and it is taken."""
LANCE_EXACT = "a flat scan of every stored vector (bypass_vector_index: no IVF index answers)"

CHROMA_METRICS = {"l2": "squared_l2", "cosine": "cosine_distance", "ip": "ip_distance"}
"""Chroma's distance spaces -> metrics."""

QDRANT_METRICS = {
    "Cosine": "cosine",
    "Dot": "inner_product",
    "Euclid": "l2",
    "Manhattan": "manhattan",
}
"""Qdrant's distances -> metrics (Cosine: Qdrant normalises the vectors it stores)."""

LANCE_METRICS = {"l2": "squared_l2", "cosine": "cosine_distance", "dot": "ip_distance"}
"""LanceDB's distance types -> metrics (its l2 is the squared L2 distance)."""

_FLAT = {"IndexFlat", "IndexFlatL2", "IndexFlatIP"}
_ID_MAPS = {"IndexIDMap", "IndexIDMap2"}


@dataclass(frozen=True)
class FaissIndex:
    """A FAISS index as dprag reads it.

    ``kind``: the class of the index that searches (under ID maps and
    transforms); ``flat``: whether it scores every vector (exact);
    ``metric``: ``"squared_l2"``, ``"inner_product"``, ``"cosine"`` (inner
    product behind an L2 normalisation), or None; ``unreadable``: a transform
    dprag does not know (PCA, OPQ, ...), else None: the scores' meaning is then
    unknown (the user declares it), but whether the index under it is flat is
    still read, so an approximate index is refused whatever wraps it.
    """

    kind: str
    flat: bool
    metric: str | None
    unreadable: str | None = None


def faiss_index(index: Any, *, normalised: bool = False) -> FaissIndex:
    """Read a FAISS index (``normalised``: the vectors are known to be unit-norm).

    >>> import faiss
    >>> faiss_index(faiss.IndexFlatIP(4), normalised=True)
    FaissIndex(kind='IndexFlatIP', flat=True, metric='cosine', unreadable=None)
    >>> faiss_index(faiss.IndexHNSWFlat(4, 8)).flat
    False
    >>> pca = faiss.IndexPreTransform(faiss.PCAMatrix(8, 4), faiss.IndexHNSWFlat(4, 8))
    >>> faiss_index(pca).kind, faiss_index(pca).flat, faiss_index(pca).unreadable
    ('IndexHNSWFlat', False, 'PCAMatrix')
    """
    import faiss

    index = faiss.downcast_index(index)
    unreadable: list[str] = []
    while True:
        kind = type(index).__name__
        if kind in _ID_MAPS:
            index = faiss.downcast_index(index.index)
        elif kind == "IndexPreTransform":
            chain = [
                type(faiss.downcast_VectorTransform(index.chain.at(i))).__name__
                for i in range(index.chain.size())
            ]
            if chain == ["NormalizationTransform"]:
                normalised = True
            else:
                unreadable += chain
            index = faiss.downcast_index(index.index)
        else:
            break
    flat = kind in _FLAT  # read under any transform: an approximate index stays refused
    if unreadable:
        return FaissIndex(kind, flat=flat, metric=None, unreadable=", ".join(unreadable))
    metric = None
    if index.metric_type == faiss.METRIC_L2:
        metric = "squared_l2"
    elif index.metric_type == faiss.METRIC_INNER_PRODUCT:
        metric = "cosine" if normalised else "inner_product"
    return FaissIndex(kind, flat=flat, metric=metric)


CHROMA_EXACT_LIMIT = 100_000
"""The most vectors dprag ranks by reading them all out of Chroma on every question.

Chroma has no exact mode, and its public API has no change counter that a local
mirror of its vectors could follow (``log_position`` and ``version`` stay 0 on a
local client; ``get_indexing_status`` is not implemented locally), so an
``update`` through another handle or process would go unseen: no mirror is
kept, and each question reads every vector. Measured (docs/evaluation.md,
"Partitioned search"): 0.5 s per question at 10 000 vectors on a quiet 2-core
machine, growing linearly (about 150 MB read per question at 100 000, 384-d).
Above the limit the plain exact search is refused when the app is built; the
partitioned search (``partition=``) reads only the probed cells.
"""


def chroma_too_large(collection: Any) -> str | None:
    """Why a Chroma collection is too large to rank by reading it all (None when it is not)."""
    n = int(collection.count())
    if n <= CHROMA_EXACT_LIMIT:
        return None
    return (
        f"it holds {n} vectors (more than {CHROMA_EXACT_LIMIT}) and has no exact mode: dprag "
        "would read every stored vector out of Chroma on every question (no mirror can "
        "follow Chroma's changes). Fix: partition=PublicPartition(...) (only the probed "
        "cells are read), or a store with an exact mode (pgvector, Qdrant, FAISS)"
    )


def chroma_space(collection: Any) -> str:
    """The distance space of a Chroma collection: its configuration, else metadata, else l2.

    chromadb 1.x keeps it in the collection's configuration (``hnsw`` or
    ``spann``), older versions in ``metadata["hnsw:space"]``; ``l2`` is Chroma's
    default.
    """
    config = getattr(collection, "configuration", None) or {}
    for section in ("hnsw", "spann"):
        space = (config.get(section) or {}).get("space")
        if space:
            return str(space)
    metadata = getattr(collection, "metadata", None) or {}
    return str(metadata.get("hnsw:space", "l2"))


class ChromaScan:
    """One question's exact ranking of a Chroma collection: vectors read once, records on demand.

    The collection's vectors (and ids) are read once, with ``where`` (a Chroma
    filter, applied by Chroma: exact within the filtered set) and ranked by
    :func:`~dprag_core.retrieval.exact.exact_ranking` with the collection's
    metric; :meth:`first` fetches the text and metadata of the first k only.
    A record without text (or one deleted since the scan) reads as empty text
    and no metadata, never an error: the query has been charged.
    """

    def __init__(
        self, collection: Any, metric: str, query: Any, where: Mapping[str, Any] | None = None
    ) -> None:
        got = collection.get(where=where or None, include=["embeddings"])
        ids = [str(i) for i in got["ids"]]
        self.collection = collection
        if ids:
            order, raw = exact_ranking(query, got["embeddings"], ids, metric=metric)
            self.ranked = [(ids[i], float(raw[i])) for i in map(int, order)]
        else:
            self.ranked = []
        self._records: dict[str, tuple[str, Mapping[str, Any]]] = {}

    def first(self, k: int) -> list[tuple[str, str, Mapping[str, Any], float]]:
        """``(id, text, metadata, raw score)`` of the first ``k``, best first."""
        wanted = self.ranked[:k]
        missing = [i for i, _ in wanted if i not in self._records]
        if missing:
            got = self.collection.get(ids=missing, include=["documents", "metadatas"])
            for i, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                self._records[str(i)] = (text or "", meta or {})
        return [(i, *self._records.get(i, ("", {})), raw) for i, raw in wanted]


def lance_distance(table: Any, column: str) -> str:
    """The distance type LanceDB searches ``column`` with: its vector index's metric, else l2."""
    for index in table.list_indices():
        details = getattr(index, "index_details", None) or {}
        metric = details.get("metric_type") if isinstance(details, Mapping) else None
        if metric and column in (getattr(index, "columns", None) or [column]):
            return str(metric).lower()
    return "l2"


def lance_exact(
    table: Any, query: Any, *, column: str, distance: str, k: int, where: Any = None
) -> Any:
    """The exact top ``k`` of ``table`` for ``query`` (an Arrow table with ``_distance``).

    ``where`` is applied before the search (``prefilter=True``): the exact top k
    of the filtered rows.
    """
    search = table.search(query, vector_column_name=column).distance_type(distance)
    search = search.bypass_vector_index().limit(k)
    if where:
        search = search.where(where, prefilter=True)
    return search.to_arrow()


def qdrant_distance(client: Any, collection: str, vector_name: str) -> str | None:
    """The distance of ``collection``'s dense vector ``vector_name`` ('' = unnamed), or None."""
    vectors = client.get_collection(collection).config.params.vectors
    params = vectors.get(vector_name) if isinstance(vectors, dict) else vectors
    distance = getattr(params, "distance", None)
    return None if distance is None else str(getattr(distance, "value", distance))


def qdrant_local(client: Any) -> bool:
    """Whether a ``QdrantClient`` runs in local mode (in process: it scans every point)."""
    return type(getattr(client, "_client", None)).__name__ == "QdrantLocal"


def qdrant_exact_params() -> Any:
    """``SearchParams`` for an exact search: no HNSW, no quantized vectors."""
    from qdrant_client import models

    return models.SearchParams(
        exact=True, quantization=models.QuantizationSearchParams(ignore=True)
    )


def exact_session_maker(engine: Any, settings: tuple[str, ...] = PG_EXACT_SETTINGS) -> Any:
    """A SQLAlchemy sessionmaker whose transactions scan tables sequentially: pgvector exact.

    ``SET LOCAL`` lasts for the transaction only, so the pooled connection is
    left as it was. With index scans off no HNSW or IVFFlat index can serve
    ``ORDER BY embedding <=> q LIMIT k`` (they offer no bitmap or index-only
    scans), so the scan is sequential and exact; sequential scans are switched
    on in case a role or server setting turned them off. ``settings``:
    :data:`PG_CELLS_SETTINGS` for a partitioned search (the probed cells read
    through their B-tree, still never through a vector index).
    """
    from sqlalchemy import event
    from sqlalchemy.orm import sessionmaker

    maker = sessionmaker(bind=engine)

    def exact_scan(session: Any, transaction: Any, connection: Any) -> None:
        for setting in settings:
            connection.exec_driver_sql(f"SET LOCAL {setting}")

    event.listen(maker, "after_begin", exact_scan)
    return maker
