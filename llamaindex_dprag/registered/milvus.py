"""LlamaIndex's ``MilvusVectorStore`` (dense): a FLAT index, its metric, exact.

=================  ================================================================
similarities       the dense index's metric: ``cosine`` (COSINE), ``inner_product``
                   (IP, the store's default), ``squared_l2`` (L2: Milvus returns the
                   squared distance)
exact query        a ``FLAT`` index (the store's default; Milvus Lite: also
                   ``BRUTE_FORCE``), queried with its own metric
                   (``milvus_search_config``); any other index is approximate and
                   refused. Metadata filters become a Milvus expression, applied
                   before the scan ranks
cell filter        ``dprag_cell in [...]`` (an ``IN`` metadata filter on the dynamic
                   field :func:`~llamaindex_dprag.cells.tag_nodes` writes), with the
                   query's own filters
nodes, ids         the store's own ``query`` (nodes from ``_node_content``, ids its
                   primary key, the node id)
count, dimension   ``count(*)`` of the collection; the dense field's ``dim``
refused            no dense field, any index but FLAT
=================  ================================================================

The same code runs against Milvus Lite (``uri="./x.db"``) and a Milvus server
or cluster (``uri="http://host:19530"``); on a server, growing segments are
also searched exactly only with the server's interim index off
(:mod:`dprag_core.retrieval.milvus`).

Private attributes read: none (``client``, ``collection_name``,
``embedding_field``, ``enable_dense`` are public); the collection's index and
size are read with ``MilvusClient``'s public API.

>>> SUPPORT.partitioned
'MilvusVectorStore'
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from dprag_core.retrieval import milvus
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts
from llamaindex_dprag.stores import LlamaIndexStore, Query, StoreReading, register

__all__ = ["SUPPORT"]

_FLAT_FIX = (
    'MilvusVectorStore(..., index_config={"index_type": "FLAT"}) for a new collection (an '
    "existing one: drop its vector index and create a FLAT one)"
)


def _own(store: Any, facts: StoreFacts) -> StoreReading:
    return StoreReading(facts, lambda restriction: store.query)


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    if not store.enable_dense:
        refused = (
            "it has no dense vector field (sparse or full-text search scores with corpus "
            "statistics). Fix: MilvusVectorStore(..., enable_dense=True, dim=...)"
        )
        return _own(store, StoreFacts("MilvusVectorStore (no dense field)", refused=refused))
    index = milvus.vector_index(store.client, store.collection_name, store.embedding_field)
    if index is None:
        refused = (
            "its collection or vector index does not exist yet, so its metric cannot be read. "
            "Fix: build the index (add the nodes) first"
        )
        return _own(store, StoreFacts("MilvusVectorStore (empty)", refused=refused))
    facts = milvus.index_facts("MilvusVectorStore", index, _FLAT_FIX)
    if facts.refused is not None or facts.metric is None:
        return _own(store, facts)
    return StoreReading(
        facts,
        partial(_querier, store, milvus.exact_params(index)),
        cell_filter=_in_cells,
        own_query_exact=True,
    )


def _querier(store: Any, params: dict[str, Any], restriction: Any) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if restriction is not None:  # the cells, with q's own filters (_in_cells)
            q = copy.copy(q)
            q.filters = restriction
        result: VectorStoreQueryResult = store.query(
            q, **{**kwargs, "milvus_search_config": params}
        )
        return result

    return query


def _in_cells(cells: Cells, q: VectorStoreQuery) -> MetadataFilters:
    cell = MetadataFilter(key=cells.key, value=list(cells.cells), operator=FilterOperator.IN)
    own = [] if q.filters is None else [q.filters]
    return MetadataFilters(filters=[cell, *own])


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.milvus.base.MilvusVectorStore",),
        "MilvusVectorStore (FLAT index)",
        _read,
        count=lambda store: milvus.count(store.client, store.collection_name),
        dimension=lambda store: milvus.vector_dimension(
            store.client, store.collection_name, store.embedding_field
        ),
        partitioned="MilvusVectorStore",
    )
)
