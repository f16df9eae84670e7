"""llama-index's ``QdrantVectorStore``: the collection's distance; ``exact=True`` per query.

=================  ================================================================
score              the dense vector's distance: ``cosine`` / ``inner_product`` /
                   ``l2`` / ``manhattan``
exact search       ``search_params=SearchParams(exact=True)`` (quantization
                   ignored); metadata filters applied by the exact scan
cell filter        an ``IN`` metadata filter on ``dprag_cell`` (``MatchAny``; a payload
                   index on a server, created when the engine is built); in local
                   mode, which scans every point anyway, the exact ranking is walked
                   (:func:`~dprag_core.retrieval.cell_search.first_in_cells`)
count              not counted
refused            a collection that does not exist yet, or no synchronous client
=================  ================================================================

Private attribute read: ``_collection_exists`` (whether the collection exists:
the store's public API has no such check, and its query fails on a missing
one); the client's ``_client`` tells local mode apart
(:func:`~dprag_core.retrieval.clients.qdrant_local`).

>>> SUPPORT.label
'QdrantVectorStore'
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts
from llamaindex_dprag.stores import (
    LlamaIndexStore,
    Query,
    StoreReading,
    metadata_cells,
    narrowed,
    own_query,
    register,
)

__all__ = ["SUPPORT"]


@dataclass(frozen=True)
class _Walk:
    """Local mode's cell filter: it has no payload index and scans every point anyway."""

    cells: Cells
    partition: PublicPartition


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    client = store.client
    if client is None or not store._collection_exists(store.collection_name):
        refused = (
            "its collection does not exist yet (or it has no synchronous client), so dprag "
            "cannot read its distance. Fix: build the index (add the documents) first, with "
            "QdrantVectorStore(client=QdrantClient(...), ...)"
        )
        return own_query(store, StoreFacts("QdrantVectorStore", refused=refused))
    distance = clients.qdrant_distance(client, store.collection_name, store.dense_vector_name)
    metric = clients.QDRANT_METRICS.get(distance or "")
    facts = StoreFacts(
        f"QdrantVectorStore (distance {distance!r})", metric=metric, exact=clients.QDRANT_EXACT
    )
    cell_filter: Any = metadata_cells
    if partition is not None and metric is not None:
        if clients.qdrant_local(client):
            cell_filter = partial(_walk_filter, partition)
        else:
            from qdrant_client import models

            client.create_payload_index(
                store.collection_name, CELL_KEY, field_schema=models.PayloadSchemaType.INTEGER
            )
    return StoreReading(facts, partial(_querier, store), cell_filter=cell_filter)


def _walk_filter(partition: PublicPartition, cells: Cells, q: VectorStoreQuery) -> _Walk:
    return _Walk(cells, partition)


def _exact(store: Any, q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
    result: VectorStoreQueryResult = store.query(
        q, **{**kwargs, "search_params": clients.qdrant_exact_params()}
    )
    return result


def _querier(store: Any, restriction: Any) -> Query:
    if isinstance(restriction, _Walk):
        return partial(_walk, store, restriction)
    return lambda q, **kwargs: _exact(store, narrowed(q, restriction), **kwargs)


def _walk(store: Any, walk: _Walk, q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
    """Local mode, no payload index: walk the exact ranking (cell_search.first_in_cells)."""

    def first(n: int) -> list[tuple[Any, float]]:
        wider = copy.copy(q)
        wider.similarity_top_k = n
        found = _exact(store, wider, **kwargs)
        return list(zip(found.nodes or [], found.similarities or [], strict=False))

    key = walk.cells.key
    pairs = cell_search.first_in_cells(
        first, q.similarity_top_k, walk.cells.cells,
        lambda pair: pair[0].metadata.get(key), score=lambda pair: pair[1],
        ident=lambda pair: pair[0].node_id, partition=walk.partition,
    )  # fmt: skip
    return VectorStoreQueryResult(
        nodes=[n for n, _ in pairs], similarities=[s for _, s in pairs],
        ids=[n.node_id for n, _ in pairs],
    )  # fmt: skip


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.qdrant.base.QdrantVectorStore",),
        "QdrantVectorStore",
        _read,
        partitioned="QdrantVectorStore",
    )
)
