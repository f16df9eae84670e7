"""The partitioned search on LlamaIndex's vector stores: cells tagged at insert, probed cells read.

A :class:`~dprag_core.retrieval.cells.PublicPartition` gives each node the cell
of its embedding (:func:`tag_nodes`, before the index is built) and each
question a fixed number of probed cells; ``DPQueryEngine.from_index(...,
partition=...)`` and :class:`~llamaindex_dprag.cell_retriever.PartitionedRetriever`
(for the node postprocessors) then query the store for the exact top k among the nodes of
those cells only (:mod:`dprag_core.retrieval.cell_search`):

=====================  ===============================================================
store                  cells and query
=====================  ===============================================================
FaissVectorStore       the partition's ``IndexIVFFlat`` (:func:`partitioned_faiss_store`);
                       the probed lists are scanned
ChromaVectorStore      metadata ``dprag_cell``; the probed cells' vectors read and ranked
PGVectorStore          ``metadata_->>'dprag_cell' IN (...)`` in the exact transaction, a
                       B-tree on it (created when the engine is built)
QdrantVectorStore      ``MatchAny`` on ``dprag_cell`` with ``exact=True`` (a payload index
                       on a server, created when the engine is built)
LanceDBVectorStore     ``metadata.dprag_cell IN (...)`` prefilter of the flat scan (a
                       bitmap index on it, created when the engine is built)
SimpleVectorStore      an ``IN`` metadata filter
=====================  ===============================================================

A node without a cell is never found (recall, not privacy). What a question
retrieves is the first k of one fixed ranking of the nodes in its probed cells,
so one added unit is inserted into it and nothing else moves (docs/design.md §11).

>>> from llama_index.core.schema import TextNode
>>> from dprag_core.retrieval.cells import PublicPartition
>>> node = TextNode(text="t", embedding=[1.0, 0.0])
>>> tag_nodes([node], PublicPartition.random(dim=2, cells=2, probes=1))[0].metadata
{'dprag_cell': 1}
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition, check_partition
from dprag_core.retrieval.stores import StoreFacts, refusal
from dprag_core.validation import missing_extra
from llamaindex_dprag.stores import Query, StoreReading, read_vector_store
from llamaindex_dprag.stores import _stored_node as stored_node

__all__ = [
    "PARTITIONED_STORES",
    "partitioned_faiss_store",
    "partitioned_reading",
    "tag_nodes",
]

PARTITIONED_STORES = (
    "FaissVectorStore (partitioned_faiss_store), ChromaVectorStore, PGVectorStore, "
    "QdrantVectorStore, LanceDBVectorStore, SimpleVectorStore"
)


def _kind(store: Any) -> str:
    cls = type(store)
    return _KINDS.get(f"{cls.__module__}.{cls.__qualname__}", "")


# -- writing ---------------------------------------------------------------------------


def tag_nodes(
    nodes: Sequence[BaseNode], partition: PublicPartition, *, embed_model: Any = None
) -> list[BaseNode]:
    """``nodes`` with their cell in ``metadata["dprag_cell"]`` (and their embedding set).

    Nodes without an embedding are embedded with ``embed_model`` (so the index
    does not embed them again). Refused (ValueError, nothing tagged) when a
    vector is among the partition's training vectors. The cell is kept out of
    the text that is embedded and of the text the model reads.
    """
    partition = check_partition(partition)
    nodes = list(nodes)
    missing = [n for n in nodes if n.embedding is None]
    if missing:
        if embed_model is None:
            raise ValueError("embed_model is needed for nodes without an embedding")
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in missing]
        for node, vector in zip(missing, embed_model.get_text_embedding_batch(texts), strict=True):
            node.embedding = list(vector)
    vectors = np.array([n.embedding for n in nodes], dtype=np.float64).reshape(len(nodes), -1)
    partition.refuse_training(vectors, what="nodes")
    for node, cell in zip(nodes, partition.assign(vectors), strict=True):
        node.metadata[CELL_KEY] = int(cell)
        for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
            if CELL_KEY not in excluded:
                excluded.append(CELL_KEY)
    return nodes


def partitioned_faiss_store(partition: PublicPartition) -> Any:
    """A ``FaissVectorStore`` over the partition's ``IndexIVFFlat`` (cosine; adds assign cells).

    Use it with ``score_range=COSINE_RANGE``; its nodes need no tag (the list
    is the cell).
    """
    partition = check_partition(partition)
    try:
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError as exc:
        raise missing_extra("partitioned_faiss_store", exc, extra="llamaindex,faiss") from exc
    return FaissVectorStore(faiss_index=cell_search.faiss_partitioned_index(partition))


# -- reading ---------------------------------------------------------------------------


def partitioned_reading(vector_store: Any, partition: PublicPartition) -> StoreReading:
    """The store table's reading of ``vector_store``, its query restricted to the probed cells.

    Refused (ValueError naming the store and the fix) for a store dprag does
    not partition and for a FAISS store whose index is not the partition's.
    Creates the store's index on the cell where it has one (PGVector: a B-tree;
    Qdrant server: a payload index).
    """
    partition = check_partition(partition)
    kind = _kind(vector_store)
    if not kind:
        raise refusal(type(vector_store).__name__, "dprag cannot query its cells",
                      f"use one of {PARTITIONED_STORES}")  # fmt: skip
    if kind == "faiss":
        index = vector_store._faiss_index
        problem = cell_search.faiss_partition_problem(index, partition)
        if problem is not None:
            raise refusal(f"FaissVectorStore ({type(index).__name__})", problem,
                          "build it with partitioned_faiss_store(partition)")  # fmt: skip
        cell_search.faiss_bind(index, partition)
        facts = StoreFacts("FaissVectorStore (partitioned IndexIVFFlat)", metric="cosine")
        filters = False
    elif kind == "chroma":  # no size limit: only the probed cells are read
        space = clients.chroma_space(vector_store._collection)
        facts = StoreFacts(
            f"ChromaVectorStore (space {space!r})", metric=clients.CHROMA_METRICS.get(space)
        )
        filters = True
    else:
        reading = read_vector_store(vector_store)
        facts, filters = reading.facts, reading.filters
    if facts.refused is not None or facts.metric is None:  # the source says why
        return StoreReading(facts, lambda: vector_store.query, filters)
    _index_cells(vector_store, kind)
    exact = cell_search.partitioned_exact(partition)
    facts = StoreFacts(f"{facts.store}, partitioned", metric=facts.metric, exact=exact)
    return StoreReading(facts, partial(_QUERIERS[kind], vector_store, partition), filters)


def _index_cells(store: Any, kind: str) -> None:
    if kind == "pgvector":
        store._initialize()
        table = f"{store.schema_name}.data_{store.table_name}"
        with store._session() as session:
            cell_search.pg_cell_index(
                session, table=table, name=f"data_{store.table_name}_{CELL_KEY}",
                expression=f"(metadata_ ->> '{CELL_KEY}')",
            )  # fmt: skip
            session.commit()
    elif kind == "lancedb":
        cell_search.lance_cell_index(store.table, f"metadata.{CELL_KEY}")
    elif kind == "qdrant" and not clients.qdrant_local(store.client):
        from qdrant_client import models

        store.client.create_payload_index(
            store.collection_name, CELL_KEY, field_schema=models.PayloadSchemaType.INTEGER
        )


def _with_cells(q: VectorStoreQuery, cells: Sequence[int]) -> VectorStoreQuery:
    """``q`` with a filter keeping the nodes of ``cells`` (and ``q``'s own filters)."""
    cell = MetadataFilter(key=CELL_KEY, value=[int(c) for c in cells], operator=FilterOperator.IN)
    own = [] if q.filters is None else [q.filters]
    narrowed = copy.copy(q)
    narrowed.filters = MetadataFilters(filters=[cell, *own])
    return narrowed


def _cells(partition: PublicPartition, q: VectorStoreQuery) -> tuple[int, ...]:
    return partition.probe(np.asarray(q.query_embedding or (), dtype=np.float64))


def _filtered(run: Callable[..., VectorStoreQueryResult], partition: PublicPartition) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return run(_with_cells(q, _cells(partition, q)), **kwargs)

    return query


def _simple_querier(store: Any, partition: PublicPartition) -> Query:
    return _filtered(store.query, partition)


def _pgvector_querier(store: Any, partition: PublicPartition) -> Query:
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact._session = clients.exact_session_maker(  # index scans off, the cells' B-tree read
        store._engine, clients.PG_CELLS_SETTINGS
    )
    return _filtered(exact.query, partition)


def _qdrant_querier(store: Any, partition: PublicPartition) -> Query:
    def run(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = store.query(
            q, **{**kwargs, "search_params": clients.qdrant_exact_params()}
        )
        return result

    if not clients.qdrant_local(store.client):
        return _filtered(run, partition)

    def walk(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Local mode, no payload index: walk the exact ranking (cell_search.first_in_cells)."""

        def first(n: int) -> list[tuple[Any, float]]:
            wider = copy.copy(q)
            wider.similarity_top_k = n
            found = run(wider, **kwargs)
            return list(zip(found.nodes or [], found.similarities or [], strict=False))

        pairs = cell_search.first_in_cells(
            first, q.similarity_top_k, _cells(partition, q),
            lambda pair: pair[0].metadata.get(CELL_KEY), score=lambda pair: pair[1],
            ident=lambda pair: pair[0].node_id, partition=partition,
        )  # fmt: skip
        return VectorStoreQueryResult(
            nodes=[n for n, _ in pairs], similarities=[s for _, s in pairs],
            ids=[n.node_id for n, _ in pairs],
        )  # fmt: skip

    return walk


def _faiss_querier(store: Any, partition: PublicPartition) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        vector = np.asarray(q.query_embedding or (), dtype=np.float32)
        k = q.similarity_top_k
        scores, rows = cell_search.faiss_search(
            store._faiss_index, vector, partition.probe(vector), k
        )
        return VectorStoreQueryResult(similarities=scores.tolist(), ids=[str(i) for i in rows])

    return query


def _chroma_querier(store: Any, partition: PublicPartition) -> Query:
    scans: dict[tuple[Any, ...], clients.ChromaScan] = {}

    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        from llama_index.vector_stores.chroma.base import _to_chroma_filter

        where = _to_chroma_filter(q.filters) if q.filters is not None else kwargs.get("where")
        where = cell_search.chroma_where(CELL_KEY, _cells(partition, q), where)
        key = (tuple(q.query_embedding or ()), repr(where))
        if key not in scans:  # one question per querier
            scans.clear()
            scans[key] = clients.ChromaScan(
                store._collection, _chroma_metric(store), list(q.query_embedding or ()), where
            )
        first = scans[key].first(q.similarity_top_k)
        return VectorStoreQueryResult(
            nodes=[stored_node(i, text, meta) for i, text, meta, _ in first],
            similarities=[raw for *_, raw in first],
            ids=[i for i, *_ in first],
        )

    return query


def _chroma_metric(store: Any) -> str:
    return clients.CHROMA_METRICS[clients.chroma_space(store._collection)]


def _lancedb_querier(store: Any, partition: PublicPartition) -> Query:
    distance = clients.lance_distance(store.table, store.vector_column_name)

    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        from llama_index.vector_stores.lancedb.base import _to_lance_filter

        where = kwargs.get("where")
        if q.filters is not None:
            where = _to_lance_filter(q.filters, store._metadata_keys)
        where = cell_search.lance_where(f"metadata.{CELL_KEY}", _cells(partition, q), where)
        rows = clients.lance_exact(
            store.table, list(q.query_embedding or ()), column=store.vector_column_name,
            distance=distance, k=q.similarity_top_k, where=where,
        ).to_pylist()  # fmt: skip
        return VectorStoreQueryResult(
            nodes=[stored_node(r["id"], r.get(store.text_key), r.get("metadata")) for r in rows],
            similarities=[float(r["_distance"]) for r in rows],
            ids=[r["id"] for r in rows],
        )

    return query


_QUERIERS: dict[str, Callable[[Any, PublicPartition], Query]] = {
    "simple": _simple_querier,
    "faiss": _faiss_querier,
    "chroma": _chroma_querier,
    "pgvector": _pgvector_querier,
    "qdrant": _qdrant_querier,
    "lancedb": _lancedb_querier,
}

_KINDS = {
    "llama_index.core.vector_stores.simple.SimpleVectorStore": "simple",
    "llama_index.vector_stores.faiss.base.FaissVectorStore": "faiss",
    "llama_index.vector_stores.chroma.base.ChromaVectorStore": "chroma",
    "llama_index.vector_stores.postgres.base.PGVectorStore": "pgvector",
    "llama_index.vector_stores.qdrant.base.QdrantVectorStore": "qdrant",
    "llama_index.vector_stores.lancedb.base.LanceDBVectorStore": "lancedb",
}
"""The classes the partitioned query reads (the store table's, by module and name)."""
