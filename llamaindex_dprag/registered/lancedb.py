"""llama-index's ``LanceDBVectorStore``: the vector index's distance; a flat scan, not the index.

=================  ================================================================
score              the vector index's distance, else ``squared_l2`` (its own query
                   returns exp(-distance) of an IVF probe: dprag returns distances)
exact search       ``bypass_vector_index()``: a flat scan (its own query probes the
                   IVF index); metadata filters become the scan's prefilter
cell filter        ``metadata.dprag_cell IN (...)`` with the query's own filters, a
                   bitmap index on it (created when the engine is built)
count              not counted
unit's nodes       ``count_rows`` with the equality filter on the unit key (no table: none)
refused            no table yet (nothing added)
=================  ================================================================

Private attributes read: ``_table`` (whether a table exists yet: its public
``table`` property opens or fails), ``_metadata_keys`` and the integration's
``_to_lance_filter`` (how it turns metadata filters into SQL: no public
function does, and dprag must read the nodes the store's own query would).

>>> SUPPORT.partitioned
'LanceDBVectorStore'
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.scores import read_score
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
    if store._table is None:
        refused = (
            "its table does not exist yet, so dprag cannot read its vector index. Fix: "
            "build the index (add the documents) first"
        )
        return own_query(store, StoreFacts("LanceDBVectorStore", refused=refused))
    distance = clients.lance_distance(store.table, store.vector_column_name)
    metric = clients.LANCE_METRICS.get(distance)
    facts = StoreFacts(
        f"LanceDBVectorStore (distance {distance!r})", metric=metric, exact=clients.LANCE_EXACT
    )
    if partition is not None and metric is not None:
        cell_search.lance_cell_index(store.table, f"metadata.{CELL_KEY}")
    return StoreReading(facts, partial(_querier, store, distance), cell_filter=_cells)


def _cells(cells: Cells, q: VectorStoreQuery) -> Cells:
    return cells  # the querier adds it to the query's own where


def _querier(store: Any, distance: str, restriction: Cells | None) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        from llama_index.vector_stores.lancedb.base import _to_lance_filter

        where = kwargs.get("where")
        if q.filters is not None:
            where = _to_lance_filter(q.filters, store._metadata_keys)
        if restriction is not None:
            column = f"metadata.{restriction.key}"
            where = cell_search.lance_where(column, restriction.cells, where)
        rows = clients.lance_exact(
            store.table, list(q.query_embedding or ()), column=store.vector_column_name,
            distance=distance, k=q.similarity_top_k, where=where,
        ).to_pylist()  # fmt: skip
        return VectorStoreQueryResult(
            nodes=[stored_node(r["id"], r.get(store.text_key), r.get("metadata")) for r in rows],
            similarities=[read_score(r["_distance"]) for r in rows],
            ids=[r["id"] for r in rows],
        )

    return query


def _unit_records(store: Any, key: str, units: Mapping[str, Any], limit: int) -> Mapping[str, int]:
    """Per unit, its rows: ``count_rows`` with the equality filter (no table yet: none)."""
    if store._table is None:
        return {}
    return {
        unit: int(store._table.count_rows(cell_search.lance_equals(key, value)))
        for unit, value in units.items()
    }


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.lancedb.base.LanceDBVectorStore",),
        "LanceDBVectorStore",
        _read,
        partitioned="LanceDBVectorStore",
        unit_records=_unit_records,
    )
)
