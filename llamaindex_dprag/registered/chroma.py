"""llama-index's ``ChromaVectorStore``: the collection's distance; no exact mode, dprag ranks.

=================  ================================================================
score              the collection's distance: ``squared_l2`` / ``cosine_distance`` /
                   ``ip_distance`` (its own query returns exp(-distance) of an
                   approximate HNSW search: dprag returns the raw distances)
exact search       the stored vectors read and ranked exactly (a full scan, refused
                   above :data:`~dprag_core.retrieval.clients.CHROMA_EXACT_LIMIT`
                   vectors); metadata filters become a ``where``: only those
                   vectors are read
cell filter        ``where={"dprag_cell": {"$in": cells}}`` with the query's own
                   filters (no size limit: only the probed cells are read)
count              the collection's ``count()``
=================  ================================================================

Private attribute read: the integration's ``_to_chroma_filter`` (how it turns
metadata filters into a ``where``: the store has no public function for it,
and dprag must read the same nodes the store's own query would). The
collection is its public ``client``.

>>> SUPPORT.label
'ChromaVectorStore'
"""

from __future__ import annotations

from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.embedding_record import chroma_recorded_model
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts
from llamaindex_dprag.stores import (
    LlamaIndexStore,
    Query,
    StoreReading,
    own_query,
    register,
    stored_node,
)

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    space = clients.chroma_space(store.client)
    metric = clients.CHROMA_METRICS.get(space)
    name = f"ChromaVectorStore (space {space!r})"
    if metric is None:
        return own_query(store, StoreFacts(name))
    too_large = None if partition is not None else clients.chroma_too_large(store.client)
    if too_large is not None:
        return own_query(store, StoreFacts(name, refused=too_large))
    facts = StoreFacts(name, metric=metric, exact=clients.CHROMA_EXACT)
    return StoreReading(facts, partial(_querier, store, metric), cell_filter=_cells)


def _cells(cells: Cells, q: VectorStoreQuery) -> Cells:
    return cells  # the querier adds it to the query's own where


def _querier(store: Any, metric: str, restriction: Cells | None) -> Query:
    scans: dict[tuple[Any, ...], clients.ChromaScan] = {}

    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        from llama_index.vector_stores.chroma.base import _to_chroma_filter

        where = _to_chroma_filter(q.filters) if q.filters is not None else kwargs.get("where")
        if restriction is not None:
            where = cell_search.chroma_where(restriction.key, restriction.cells, where)
        key = (tuple(q.query_embedding or ()), repr(where))
        if key not in scans:  # one question per querier; a new one rescans
            scans.clear()
            scans[key] = clients.ChromaScan(
                store.client, metric, list(q.query_embedding or ()), where
            )
        first = scans[key].first(q.similarity_top_k)
        return VectorStoreQueryResult(
            nodes=[stored_node(i, text, meta) for i, text, meta, _ in first],
            similarities=[raw for *_, raw in first],
            ids=[i for i, *_ in first],
        )

    return query


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.chroma.base.ChromaVectorStore",),
        "ChromaVectorStore",
        _read,
        count=lambda store: int(store.client.count()),
        recorded_model=lambda store: chroma_recorded_model(store.client),
        partitioned="ChromaVectorStore",
    )
)
