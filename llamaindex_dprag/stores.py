"""The LlamaIndex store registry: each vector store's registered reading, and the one lookup.

Every LlamaIndex entry point that reads a store (``DPQueryEngine.from_index``,
``from_retriever(VectorIndexRetriever)``, ``partition=``, and
:class:`~llamaindex_dprag.sources.IndexSource` under them) reads it through
:func:`read_vector_store`, which looks its class up in :data:`STORES` (a
:class:`~dprag_core.retrieval.registry.StoreRegistry`) and calls the
registration's ``read(store, partition)``. That returns a :class:`StoreReading`:
the :class:`~dprag_core.retrieval.stores.StoreFacts` (the metric of the
similarities its query returns, how its results are exact, or what is refused
and the fix), **the exact query** (``querier(restriction)``: one question's
exact ``query(VectorStoreQuery)``, applying ``q.filters``, or in their place
``restriction``, a filter in the store's own format) and the **cell filter**
(``cell_filter(cells, q)``: the store's own filter keeping a public partition's
probed cells and ``q``'s own filters).

A partitioned query is that same exact query with the cell filter of each
question's probed cells (:func:`read_vector_store` with ``partition=``): no
store writes a second querier. dprag's own registrations are in
:mod:`llamaindex_dprag.registered`, one module per store (each says what its
similarities are, how its query is exact and how its cells are filtered); a
store of your own is one module that calls :func:`register`
(docs/new-store.md). An unregistered class has no facts, and the engine
refuses it unless the user declares ``score_direction`` and
``exact_search=True``.

>>> from llama_index.core.vector_stores import SimpleVectorStore
>>> read_vector_store(SimpleVectorStore()).facts.metric
'cosine'
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval.cell_search import partitioned_exact
from dprag_core.retrieval.cells import PublicPartition, check_partition
from dprag_core.retrieval.registry import Cells, StoreRegistry, StoreSupport
from dprag_core.retrieval.stores import StoreFacts, refusal

__all__ = [
    "STORES",
    "LlamaIndexStore",
    "Query",
    "StoreReading",
    "metadata_cells",
    "narrowed",
    "read_vector_store",
    "register",
    "stored_count",
    "stored_node",
]

Query = Callable[..., VectorStoreQueryResult]
"""``query(VectorStoreQuery, **kwargs)``: the store's top k, best first."""


@dataclass(frozen=True)
class StoreReading:
    """One vector store as its registration reads it: facts, exact query, cell filter.

    ``querier(restriction)`` gives the query for one question (a store ranked
    by a full scan ranks once per question), exact among the nodes
    ``q.filters`` select, or ``restriction`` (the store's own filter, what
    ``cell_filter`` returns) in their place when it is not None.
    ``cell_filter(cells, q)``: that filter for the nodes of
    :class:`~dprag_core.retrieval.registry.Cells` and ``q``'s filters
    (``None``: not partitioned). ``filters``: whether its query applies
    metadata filters (FAISS raises on them); ``own_query_exact``: whether the
    store's *own* ``query`` (what a retriever of the user's calls) is exact
    too (brute force, a flat index), False where only dprag's query is and for
    a store the registry does not know.
    """

    facts: StoreFacts
    querier: Callable[[Any], Query]
    cell_filter: Callable[[Cells, VectorStoreQuery], Any] | None = None
    filters: bool = True
    own_query_exact: bool = False


@dataclass(frozen=True)
class LlamaIndexStore(StoreSupport[StoreReading]):
    """A LlamaIndex store's registration (:class:`~dprag_core.retrieval.registry.StoreSupport`).

    With a partition, its ``read`` also creates the store's index on the cell
    where the store has one. ``unit_records(store, key, units, limit)``: per
    unit (``str`` of its ``metadata[key]``, mapped to one raw value), how many
    nodes the store holds, exact up to ``limit``
    (:func:`~llamaindex_dprag.cells.tag_nodes` with ``vector_store=``; ``None``:
    its exact query with an equality filter, first ``limit + 1`` per unit).
    """

    unit_records: Callable[[Any, str, Mapping[str, Any], int], Mapping[str, int]] | None = None


STORES: StoreRegistry[StoreReading] = StoreRegistry(
    "llamaindex",
    builtins=tuple(
        f"llamaindex_dprag.registered.{name}"
        for name in ("simple", "faiss", "chroma", "pgvector", "qdrant", "lancedb", "milvus")
    ),
)
"""The LlamaIndex registrations (dprag's own are imported on first use)."""

register = STORES.register
"""Register a :class:`LlamaIndexStore` (its classes must not be registered yet); returns it."""


def own_query(store: Any, facts: StoreFacts, *, filters: bool = True) -> StoreReading:
    """A reading with no exact query of dprag's: ``facts`` and the store's own ``query``."""
    return StoreReading(facts, lambda restriction: store.query, filters=filters)


def stored_count(vector_store: object) -> int | None:
    """How many vectors ``vector_store`` holds, or None where its registration does not
    read it: an empty store is refused when the engine is built
    (:func:`~dprag_core.retrieval.stores.refuse_empty`).

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> stored_count(SimpleVectorStore())
    0
    """
    return STORES.count(vector_store)


def read_vector_store(vector_store: Any, partition: PublicPartition | None = None) -> StoreReading:
    """The registered reading of ``vector_store``; no facts for an unregistered class.

    With ``partition``: the exact query restricted to each question's probed
    cells; refused (ValueError naming the store and the fix) for a store whose
    query cannot be restricted to cells.
    """
    support = STORES.lookup(vector_store)
    if partition is None:
        if support is None:  # a declared store: queried as it is, when it is queried
            return StoreReading(
                StoreFacts(type(vector_store).__name__),
                lambda restriction: lambda q, **kw: vector_store.query(q, **kw),
            )
        return support.read(vector_store, None)
    partition = check_partition(partition)
    if support is None or support.partitioned is None:
        raise refusal(type(vector_store).__name__, "dprag cannot query its cells",
                      f"use one of {STORES.labels(partitioned=True)}")  # fmt: skip
    reading = support.read(vector_store, partition)
    facts = reading.facts
    if facts.refused is not None or facts.metric is None:  # the source says why
        return reading
    if reading.cell_filter is None:
        raise ValueError(f"{facts.store}: its registration has no cell filter")
    facts = StoreFacts(
        f"{facts.store}, partitioned", metric=facts.metric, exact=partitioned_exact(partition)
    )
    querier = partial(_in_cells, reading.querier, reading.cell_filter, partition)
    return StoreReading(facts, querier, filters=reading.filters)


def _in_cells(
    querier: Callable[[Any], Query],
    cell_filter: Callable[[Cells, VectorStoreQuery], Any],
    partition: PublicPartition,
    restriction: Any,
) -> Query:
    """The exact query with the cell filter of the question's probed cells."""
    queries: dict[str, Query] = {}

    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        vector = np.asarray(q.query_embedding or (), dtype=np.float64)
        where = cell_filter(Cells(partition.probe(vector)), q)
        key = repr(where)
        if key not in queries:  # one question per querier: a full scan ranks once
            queries.clear()
            queries[key] = querier(where)
        return queries[key](q, **kwargs)

    return query


def metadata_cells(cells: Cells, q: VectorStoreQuery) -> Any:
    """The ``MetadataFilters`` keeping the nodes of ``cells`` (an ``IN`` filter) and ``q``'s own.

    The cell filter of a store whose query applies LlamaIndex metadata filters.
    """
    from llama_index.core.vector_stores.types import (
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
    )

    cell = MetadataFilter(key=cells.key, value=list(cells.cells), operator=FilterOperator.IN)
    own = [] if q.filters is None else [q.filters]
    return MetadataFilters(filters=[cell, *own])


def narrowed(q: VectorStoreQuery, restriction: Any) -> VectorStoreQuery:
    """``q`` with ``restriction`` (``MetadataFilters``) as its filters; ``q`` when it is None."""
    if restriction is None:
        return q
    out = copy.copy(q)
    out.filters = restriction
    return out


def stored_node(node_id: str, text: str | None, metadata: Any) -> Any:
    """A node from a store's stored metadata, as ChromaVectorStore and LanceDB rebuild one."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.utils import (
        legacy_metadata_dict_to_node,
        metadata_dict_to_node,
    )

    try:
        return metadata_dict_to_node(metadata or {}, text=text)
    except Exception:  # the legacy layout: the stores fall back the same way
        meta, info, relationships = legacy_metadata_dict_to_node(metadata or {})
        return TextNode(
            text=text or "",
            id_=node_id,
            metadata=meta,
            start_char_idx=info.get("start"),
            end_char_idx=info.get("end"),
            relationships=relationships,
        )
