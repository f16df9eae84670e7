"""llama-index-core's ``SimpleVectorStore``: cosine similarities, its own brute force.

=================  ================================================================
score              ``cosine`` (higher = closer)
exact search       its own brute force (every stored vector scored); metadata filters
cell filter        an ``IN`` metadata filter on ``dprag_cell``
count              ``data.embedding_dict`` (its public data model)
=================  ================================================================

>>> from llama_index.core.vector_stores import SimpleVectorStore
>>> SUPPORT.read(SimpleVectorStore(), None).facts.metric
'cosine'
"""

from __future__ import annotations

from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.stores import StoreFacts
from llamaindex_dprag.stores import (
    LlamaIndexStore,
    Query,
    StoreReading,
    metadata_cells,
    narrowed,
    register,
)

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    facts = StoreFacts(
        "SimpleVectorStore", metric="cosine", exact="brute force (every stored vector scored)"
    )
    return StoreReading(
        facts, partial(_querier, store), cell_filter=metadata_cells, own_query_exact=True
    )


def _querier(store: Any, restriction: Any) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = store.query(narrowed(q, restriction), **kwargs)
        return result

    return query


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.core.vector_stores.simple.SimpleVectorStore",),
        "SimpleVectorStore",
        _read,
        count=lambda store: len(store.data.embedding_dict),
        partitioned="SimpleVectorStore",
    )
)
