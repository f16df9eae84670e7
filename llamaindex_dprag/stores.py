"""The LlamaIndex store table: what each supported vector store's scores are, and its exact query.

One place for every LlamaIndex entry point that reads a store
(``DPQueryEngine.from_index``, ``from_retriever(VectorIndexRetriever)``, and
:class:`~llamaindex_dprag.sources.IndexSource` under both):
:func:`read_vector_store` looks at the store *object* (its class, FAISS index
type, Chroma or Qdrant collection configuration) and returns a
:class:`StoreReading`: the :class:`~dprag_core.retrieval.stores.StoreFacts`
(the metric of the similarities the query returns, how its results are exact,
or what is refused and why) and an exact ``query(VectorStoreQuery)``.

=====================  ================================  =====================================
store                  ``similarities`` (``metric``)     exact query
=====================  ================================  =====================================
SimpleVectorStore      ``cosine``                        its own brute force
FaissVectorStore       ``squared_l2`` (L2 index),        flat indexes only (HNSW, IVF, PQ
                       ``cosine`` / ``inner_product``    refused); no metadata filters
ChromaVectorStore      the collection's distance:        exact ranking computed from the
                       ``squared_l2`` /                  stored vectors (a full scan; its own
                       ``cosine_distance`` /             query returns exp(-distance) of an
                       ``ip_distance``                   approximate HNSW search)
PGVectorStore          ``cosine`` (1 - cosine distance)  index scans off in each query's
                                                         transaction (a sequential scan)
QdrantVectorStore      ``cosine`` / ``inner_product`` /  ``search_params=SearchParams(exact=True)``
                       ``l2`` / ``manhattan``            (quantization ignored)
LanceDBVectorStore     the vector index's distance, else ``bypass_vector_index()``: a flat scan
                       ``squared_l2`` (its own query     (its own query probes the IVF index)
                       returns exp(-distance))
=====================  ================================  =====================================

Only these classes are read (a subclass may override ``query``); any other
store has no facts, and the engine refuses it unless the user declares
``score_direction`` and ``exact_search=True``.

>>> from llama_index.core.vector_stores import SimpleVectorStore
>>> read_vector_store(SimpleVectorStore()).facts.metric
'cosine'
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import clients
from dprag_core.retrieval.embedding_record import chroma_recorded_model
from dprag_core.retrieval.scores import read_score
from dprag_core.retrieval.stores import StoreFacts

__all__ = [
    "SUPPORTED_STORES",
    "Query",
    "StoreReading",
    "read_vector_store",
    "recorded_model",
    "stored_count",
]

Query = Callable[..., VectorStoreQueryResult]
"""``query(VectorStoreQuery, **kwargs)``: the store's top k, best first."""

SUPPORTED_STORES = (
    "SimpleVectorStore, FaissVectorStore (flat index), ChromaVectorStore, PGVectorStore, "
    "QdrantVectorStore, LanceDBVectorStore"
)


@dataclass(frozen=True)
class StoreReading:
    """The facts about one vector store and how to query it exactly.

    ``querier()`` gives the query for one question (a store ranked by a full
    scan ranks once per question); ``filters``: whether its query applies
    metadata filters (FAISS raises on them); ``own_query_exact``: whether the
    store's *own* ``query`` (what a retriever of the user's calls) is exact too
    (brute force, a flat index), False where only dprag's query is (Chroma,
    pgvector, Qdrant, LanceDB) and for a store the table does not know.
    """

    facts: StoreFacts
    querier: Callable[[], Query]
    filters: bool = True
    own_query_exact: bool = False


def read_vector_store(vector_store: Any) -> StoreReading:
    """The table's reading of ``vector_store`` (module docstring); no facts for an unknown class."""
    cls = type(vector_store)
    reader = _TABLE.get(f"{cls.__module__}.{cls.__qualname__}")
    if reader is None:  # a declared store: queried as it is, when it is queried
        return _fixed(StoreFacts(cls.__name__), lambda q, **kw: vector_store.query(q, **kw))
    return reader(vector_store)


def _fixed(
    facts: StoreFacts, query: Query, *, filters: bool = True, own_exact: bool = False
) -> StoreReading:
    return StoreReading(facts, lambda: query, filters, own_exact)


def _simple(store: Any) -> StoreReading:
    facts = StoreFacts(
        "SimpleVectorStore", metric="cosine", exact="brute force (every stored vector scored)"
    )
    return _fixed(facts, store.query, own_exact=True)


def _faiss(store: Any) -> StoreReading:
    index = clients.faiss_index(store._faiss_index)
    name = f"FaissVectorStore ({index.kind})"
    if not index.flat:
        refused = (
            f"its {index.kind} index is approximate and cannot be asked for exact results (one "
            "added document can push several others out of the top k, which the DP guarantee "
            "does not allow). Fix: FaissVectorStore(faiss_index=faiss.IndexFlatL2(dim)), or "
            "cosine_faiss_store(dim=dim) (a flat inner-product index on normalised vectors)"
        )
        return _fixed(StoreFacts(name, refused=refused), store.query, filters=False)
    if index.unreadable is not None:  # a flat index behind a transform: declared, not read
        facts = StoreFacts(f"{name} with {index.unreadable}")
        return _fixed(facts, store.query, filters=False, own_exact=True)
    facts = StoreFacts(name, metric=index.metric, exact=clients.FLAT_EXACT)
    return _fixed(facts, store.query, filters=False, own_exact=True)


def _chroma(store: Any) -> StoreReading:
    space = clients.chroma_space(store._collection)
    metric = clients.CHROMA_METRICS.get(space)
    name = f"ChromaVectorStore (space {space!r})"
    if metric is None:
        return _fixed(StoreFacts(name), store.query)
    too_large = clients.chroma_too_large(store._collection)
    if too_large is not None:
        return _fixed(StoreFacts(name, refused=too_large), store.query)
    facts = StoreFacts(name, metric=metric, exact=clients.CHROMA_EXACT)
    return StoreReading(facts, partial(_chroma_querier, store, metric))


def _chroma_querier(store: Any, metric: str) -> Query:
    scans: dict[tuple[Any, ...], clients.ChromaScan] = {}

    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        from llama_index.vector_stores.chroma.base import _to_chroma_filter

        where = _to_chroma_filter(q.filters) if q.filters is not None else kwargs.get("where")
        key = (tuple(q.query_embedding or ()), repr(where))
        if key not in scans:  # one question per querier; a new one rescans
            scans.clear()
            scans[key] = clients.ChromaScan(
                store._collection, metric, list(q.query_embedding or ()), where
            )
        first = scans[key].first(q.similarity_top_k)
        return VectorStoreQueryResult(
            nodes=[_stored_node(i, text, meta) for i, text, meta, _ in first],
            similarities=[raw for *_, raw in first],
            ids=[i for i, *_ in first],
        )

    return query


def _stored_node(node_id: str, text: str | None, metadata: Any) -> Any:
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


def _pgvector(store: Any) -> StoreReading:
    store._initialize()  # connects now: refused when built, never at query time
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact._session = clients.exact_session_maker(store._engine)
    facts = StoreFacts("PGVectorStore", metric="cosine", exact=clients.PG_EXACT)
    return _fixed(facts, exact.query)


def _qdrant(store: Any) -> StoreReading:
    client = store.client
    if client is None or not store._collection_exists(store.collection_name):
        name = "QdrantVectorStore"
        refused = (
            "its collection does not exist yet (or it has no synchronous client), so dprag "
            "cannot read its distance. Fix: build the index (add the documents) first, with "
            "QdrantVectorStore(client=QdrantClient(...), ...)"
        )
        return _fixed(StoreFacts(name, refused=refused), store.query)
    distance = clients.qdrant_distance(client, store.collection_name, store.dense_vector_name)
    metric = clients.QDRANT_METRICS.get(distance or "")
    facts = StoreFacts(
        f"QdrantVectorStore (distance {distance!r})", metric=metric, exact=clients.QDRANT_EXACT
    )
    return _fixed(facts, partial(_qdrant_exact, store))


def _qdrant_exact(store: Any, q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
    result: VectorStoreQueryResult = store.query(
        q, **{**kwargs, "search_params": clients.qdrant_exact_params()}
    )
    return result


def _lancedb(store: Any) -> StoreReading:
    if store._table is None:
        refused = (
            "its table does not exist yet, so dprag cannot read its vector index. Fix: "
            "build the index (add the documents) first"
        )
        return _fixed(StoreFacts("LanceDBVectorStore", refused=refused), store.query)
    distance = clients.lance_distance(store.table, store.vector_column_name)
    facts = StoreFacts(
        f"LanceDBVectorStore (distance {distance!r})",
        metric=clients.LANCE_METRICS.get(distance),
        exact=clients.LANCE_EXACT,
    )
    return _fixed(facts, partial(_lance_query, store, distance))


def _lance_query(
    store: Any, distance: str, q: VectorStoreQuery, **kwargs: Any
) -> VectorStoreQueryResult:
    from llama_index.vector_stores.lancedb.base import _to_lance_filter

    where = kwargs.get("where")
    if q.filters is not None:
        where = _to_lance_filter(q.filters, store._metadata_keys)
    rows = clients.lance_exact(
        store.table,
        list(q.query_embedding or ()),
        column=store.vector_column_name,
        distance=distance,
        k=q.similarity_top_k,
        where=where,
    ).to_pylist()
    return VectorStoreQueryResult(
        nodes=[_stored_node(r["id"], r.get(store.text_key), r.get("metadata")) for r in rows],
        similarities=[read_score(r["_distance"]) for r in rows],
        ids=[r["id"] for r in rows],
    )


_TABLE: dict[str, Callable[[Any], StoreReading]] = {
    "llama_index.core.vector_stores.simple.SimpleVectorStore": _simple,
    "llama_index.vector_stores.faiss.base.FaissVectorStore": _faiss,
    "llama_index.vector_stores.chroma.base.ChromaVectorStore": _chroma,
    "llama_index.vector_stores.postgres.base.PGVectorStore": _pgvector,
    "llama_index.vector_stores.qdrant.base.QdrantVectorStore": _qdrant,
    "llama_index.vector_stores.lancedb.base.LanceDBVectorStore": _lancedb,
}
"""The supported classes, by module and name (module docstring)."""


_CHROMA = "llama_index.vector_stores.chroma.base.ChromaVectorStore"

_COUNTERS: dict[str, Callable[[Any], int | None]] = {
    "llama_index.core.vector_stores.simple.SimpleVectorStore": lambda s: len(s.data.embedding_dict),
    "llama_index.vector_stores.faiss.base.FaissVectorStore": lambda s: int(s._faiss_index.ntotal),
    "llama_index.vector_stores.chroma.base.ChromaVectorStore": lambda s: int(s._collection.count()),
}


def recorded_model(vector_store: object) -> str | None:
    """The embedding model ``vector_store`` records having made its vectors, or None: a
    ChromaVectorStore's collection (:mod:`~dprag_core.retrieval.embedding_record`); the
    other classes record none."""
    cls = type(vector_store)
    if f"{cls.__module__}.{cls.__qualname__}" != _CHROMA:
        return None
    return chroma_recorded_model(vector_store._collection)  # type: ignore[attr-defined]


def stored_count(vector_store: object) -> int | None:
    """How many vectors ``vector_store`` holds, or None where it is not read (other classes):
    an empty store is refused when the engine is built
    (:func:`~dprag_core.retrieval.stores.refuse_empty`).

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> stored_count(SimpleVectorStore())
    0
    """
    cls = type(vector_store)
    counter = _COUNTERS.get(f"{cls.__module__}.{cls.__qualname__}")
    return None if counter is None else counter(vector_store)
