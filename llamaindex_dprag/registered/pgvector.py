"""llama-index's ``PGVectorStore``: cosine similarities; each query scans sequentially.

=================  ================================================================
score              ``cosine`` (1 - pgvector's cosine distance)
exact search       index scans off in each query's transaction (a sequential,
                   exact scan); metadata filters become its ``WHERE``
cell filter        an ``IN`` metadata filter on ``metadata_->>'dprag_cell'``, served
                   by a B-tree on it (created when the engine is built)
count              not counted
=================  ================================================================

Private attributes read: ``_initialize`` (it connects lazily; dprag connects
when the engine is built, so a wrong URL is refused then, never at query
time), ``_engine`` and ``_session`` (the exact sessions replace ``_session``
on a copy of the store: the user's store keeps its own; the integration has no
public hook for session options).

>>> SUPPORT.partitioned
'PGVectorStore'
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
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
    store._initialize()  # connects now: refused when built, never at query time
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact._session = clients.exact_session_maker(store._engine)
    if partition is not None:
        _index_cells(store)
    facts = StoreFacts("PGVectorStore", metric="cosine", exact=clients.PG_EXACT)
    return StoreReading(facts, partial(_querier, exact), cell_filter=metadata_cells)


def _querier(exact: Any, restriction: Any) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = exact.query(narrowed(q, restriction), **kwargs)
        return result

    return query


def _index_cells(store: Any) -> None:
    """A B-tree on the cell: the partitioned query reads only the probed cells' rows."""
    table = f"{store.schema_name}.data_{store.table_name}"
    with store._session() as session:
        cell_search.pg_cell_index(
            session, table=table, name=f"data_{store.table_name}_{CELL_KEY}",
            expression=f"(metadata_ ->> '{CELL_KEY}')",
        )  # fmt: skip
        session.commit()


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.postgres.base.PGVectorStore",),
        "PGVectorStore",
        _read,
        partitioned="PGVectorStore",
    )
)
