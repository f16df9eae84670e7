"""The LangChain store table: what each supported vector store's scores are, and its exact search.

One place for every LangChain entry point (``DPRAGChain(vectorstore=...)``,
``retriever=store.as_retriever(...)``, ``DPRetriever``): :func:`read_store` looks
at the store *object* (its class, distance strategy, FAISS index type, Chroma
or Qdrant collection configuration) and returns a :class:`StoreReading`: the
:class:`~dprag_core.retrieval.stores.StoreFacts` (which metric its raw scores
are, how its results are exact, or what is refused and why) and
:meth:`StoreReading.searcher`, **the exact (filtered) search of each store**:
``searcher(filter)`` returns the store's exact top k among the documents
``filter`` selects (``None``: all of them), with raw scores, best first. A
filter is in the store's own format (the second table) and keeps the search
exact: it selects documents by their own metadata, and the top k of the
selected documents is the first k of one fixed ranking.
:meth:`StoreReading.equals` builds the store's filter for
``metadata[key] == value``.

======================  ==================================  ===================================
store                   raw score (``metric``)              exact search
======================  ==================================  ===================================
InMemoryVectorStore     ``cosine``                          its own brute force
FAISS (community)       ``squared_l2`` (L2 index),          flat indexes only (``IndexFlat*``,
                        ``cosine`` / ``inner_product``      under an ID map or a normalisation);
                        (inner-product index, unit-norm     HNSW, IVF, PQ, LSH refused
                        or not)
Chroma                  ``squared_l2`` / ``cosine_distance``  HNSW only, no exact mode: the
                        / ``ip_distance`` (collection       exact ranking is computed from the
                        ``space``)                          stored vectors (a full scan)
PGVector                ``cosine_distance`` / ``l2`` /      each query runs with index scans
(langchain-postgres)    ``negative_inner_product``          off (``SET LOCAL enable_indexscan
                        (``distance_strategy``)             = off``): a sequential, exact scan
PGVectorStore (v2,      ``cosine_distance`` / ``l2`` /      the same, through its per-query
langchain-postgres)     ``inner_product`` (q·v, best        ``index_query_options`` hook;
                        first) (``distance_strategy``)      hybrid search refused
QdrantVectorStore       ``cosine`` / ``inner_product`` /    ``SearchParams(exact=True)``,
                        ``l2`` / ``manhattan`` (collection  quantization ignored; dense mode
                        vector params)                      only
LanceDB (community)     ``squared_l2`` / ``cosine_distance``  ``bypass_vector_index()``: a flat
                        / ``ip_distance`` (the vector       scan, never the IVF index
                        index's metric, else ``l2``)
======================  ==================================  ===================================

Filters, each store's own format, each applied exactly:

==========================  =====================================  ===========================
store                       ``filter``                             how it stays exact
==========================  =====================================  ===========================
InMemoryVectorStore         ``Callable[[Document], bool]``         applied before ranking
FAISS                       a dict or a callable on the metadata   applied to the whole flat
                                                                   ranking (``fetch_k`` = N)
Chroma                      a ``where`` dict                       only the filtered vectors
                                                                   are read and ranked
PGVector, PGVectorStore     a ``filter`` dict (``$eq``, ``$in``)   a ``WHERE`` on the
                                                                   sequential scan
QdrantVectorStore           a ``models.Filter``                    applied by the exact scan
LanceDB                     an SQL string (or its dict form)       applied before the flat
                                                                   scan (``prefilter=True``)
==========================  =====================================  ===========================

Only these classes are read (a subclass may override the search): any other
store, and these in a configuration the table does not know, have no facts,
and the adapters refuse them unless the user declares the score function and
``exact_search=True`` (a filter is then passed to its
``similarity_search_with_score(question, k, filter=...)``, under the same
declaration).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> read_store(InMemoryVectorStore(DeterministicFakeEmbedding(size=4))).facts.metric
'cosine'
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval import clients
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.embeddings import NormalizedEmbeddings, embedded_once

__all__ = ["SUPPORTED_STORES", "Search", "StoreReading", "read_store"]

Search = Callable[[str, int], list[tuple[Document, float]]]
"""``search(question, k)``: the store's first k for the question with raw scores, best first."""

Searcher = Callable[[Any], Search]
"""``searcher(filter)``: one query's exact search among the documents ``filter`` selects."""

SUPPORTED_STORES = (
    "InMemoryVectorStore, langchain-community FAISS (flat index), langchain-chroma Chroma, "
    "langchain-postgres PGVector and PGVectorStore, langchain-qdrant QdrantVectorStore "
    "(dense), langchain-community LanceDB"
)


@dataclass(frozen=True)
class StoreReading:
    """The facts about one store and its exact (filtered) search.

    ``searcher(filter)`` gives the search for one query, exact among the
    documents ``filter`` (the store's own format, module docstring) selects,
    ``None`` for all: a store ranked by a full scan (Chroma) ranks once per
    query and serves every k from that ranking. ``equals(key, value)``: the
    store's filter for ``metadata[key] == value`` (``None`` for a store the
    table does not know). ``own_search_exact``: whether the store's *own*
    ``similarity_search`` (what a retriever of the user's calls) is exact too
    (brute force, a flat index); False where only dprag's search is (Chroma,
    pgvector, Qdrant, LanceDB, whose own searches use their indexes) and for a
    store the table does not know.
    """

    facts: StoreFacts
    searcher: Searcher
    equals: Callable[[str, Any], Any] | None = field(default=None)
    own_search_exact: bool = False


def read_store(store: VectorStore) -> StoreReading:
    """The table's reading of ``store`` (module docstring); no facts for an unknown class."""
    cls = type(store)
    reader = _TABLE.get(f"{cls.__module__}.{cls.__qualname__}")
    if reader is None:  # a declared store: its own search, the filter passed as it is
        return StoreReading(
            StoreFacts(cls.__name__), partial(_own, store.similarity_search_with_score)
        )
    return reader(store)


def _own(search: Callable[..., list[tuple[Document, float]]], filter: Any, **fixed: Any) -> Search:
    """``search`` with ``filter`` (only when given) and ``fixed`` keywords."""
    if filter is not None:
        fixed = {**fixed, "filter": filter}
    return partial(search, **fixed) if fixed else search


def _by_vector(
    search: Callable[..., list[tuple[Document, float]]],
    embed: Callable[[str], Sequence[float]],
    filter: Any,
    **fixed: Any,
) -> Search:
    """:func:`_own` over the store's search by vector, the question embedded once per searcher
    (:func:`~langchain_dprag.embeddings.embedded_once`)."""
    by_vector: Callable[..., list[tuple[Document, float]]] = _own(search, filter, **fixed)
    vector = embedded_once(embed)
    return lambda question, k: by_vector(vector(question), k)


def _refused(name: str, refused: str, store: Any) -> StoreReading:
    return StoreReading(
        StoreFacts(name, refused=refused), partial(_own, store.similarity_search_with_score)
    )


def _unit_norm(store: Any) -> bool:
    embeddings = getattr(store, "embeddings", None)
    return bool(getattr(store, "_normalize_L2", False)) or isinstance(
        embeddings, NormalizedEmbeddings
    )


def _metadata_dict(key: str, value: Any) -> dict[str, Any]:
    return {key: value}


def _metadata_eq(key: str, value: Any) -> dict[str, Any]:
    return {key: {"$eq": value}}


def _in_memory(store: Any) -> StoreReading:
    facts = StoreFacts(
        "InMemoryVectorStore", metric="cosine", exact="brute force (every stored vector scored)"
    )
    search = partial(
        _by_vector,
        store.similarity_search_with_score_by_vector,
        lambda question: store.embedding.embed_query(question),
    )
    return StoreReading(facts, search, _document_eq, own_search_exact=True)


def _document_eq(key: str, value: Any) -> Callable[[Document], bool]:
    return lambda doc: bool(doc.metadata.get(key) == value)


def _faiss(store: Any) -> StoreReading:
    index = clients.faiss_index(store.index, normalised=_unit_norm(store))
    name = f"FAISS ({index.kind})"
    if not index.flat:
        refused = (
            f"its {index.kind} index is approximate and cannot be asked for exact results "
            "(one added document can push several others out of the top k, which the DP "
            "guarantee does not allow). Fix: build the store with a flat index: "
            "FAISS.from_documents(docs, embeddings) (IndexFlatL2) or "
            "faiss_inner_product(docs, embeddings) (IndexFlatIP, cosine)"
        )
        return _refused(name, refused, store)
    if index.unreadable is not None:  # a flat index behind a transform: declared, not read
        facts = StoreFacts(f"{name} with {index.unreadable}")
        return StoreReading(facts, partial(_faiss_searcher, store), own_search_exact=True)
    facts = StoreFacts(name, metric=index.metric, exact=clients.FLAT_EXACT)
    searcher = partial(_faiss_searcher, store)
    return StoreReading(facts, searcher, _metadata_dict, own_search_exact=True)


def _faiss_searcher(store: Any, filter: Any) -> Search:
    vector = embedded_once(store._embed_query)  # its own search's embedding, once per query
    if filter is None:
        return lambda question, k: store.similarity_search_with_score_by_vector(vector(question), k)

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        # the whole flat ranking, then the filter: its own search filters its first
        # fetch_k only (20 by default), which is not the top k of the filtered documents
        every = max(k, int(store.index.ntotal))
        found: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            vector(question), k, filter=filter, fetch_k=every
        )
        return found

    return search


def _chroma(store: Any) -> StoreReading:
    space = clients.chroma_space(store._collection)
    name = f"Chroma (space {space!r})"
    metric = clients.CHROMA_METRICS.get(space)
    if store._embedding_function is None:
        refused = (
            "it has no embedding function, and dprag embeds the question to rank the "
            "stored vectors exactly. Fix: Chroma(..., embedding_function=the embeddings "
            "its documents were embedded with)"
        )
        return _refused(name, refused, store)
    if metric is None:
        return StoreReading(StoreFacts(name), partial(_own, store.similarity_search_with_score))
    too_large = clients.chroma_too_large(store._collection)
    if too_large is not None:
        return _refused(name, too_large, store)
    facts = StoreFacts(name, metric=metric, exact=clients.CHROMA_EXACT)
    return StoreReading(facts, partial(_chroma_searcher, store, metric), _metadata_eq)


def _chroma_searcher(store: Any, metric: str, filter: Any) -> Search:
    scans: dict[str, clients.ChromaScan] = {}

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        if question not in scans:  # one question per searcher; a new one rescans
            scans.clear()
            embedding: Embeddings = store._embedding_function
            query = embedding.embed_query(question)
            scans[question] = clients.ChromaScan(store._collection, metric, query, filter)
        return [
            (Document(page_content=text, metadata=dict(meta), id=i), raw)
            for i, text, meta, raw in scans[question].first(k)
        ]

    return search


_PG_STRATEGIES = {"cosine": "cosine_distance", "l2": "l2", "inner": "negative_inner_product"}


def _pgvector(store: Any) -> StoreReading:
    strategy = getattr(store._distance_strategy, "value", store._distance_strategy)
    name = f"PGVector (distance_strategy {strategy!r})"
    if store.async_mode:
        refused = (
            "it was made in async mode, and dprag searches synchronously (each query in a "
            "worker thread). Fix: PGVector(..., connection=a synchronous URL or Engine)"
        )
        return _refused(name, refused, store)
    metric = _PG_STRATEGIES.get(str(strategy))
    if metric is None:
        return StoreReading(StoreFacts(name), partial(_own, store.similarity_search_with_score))
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact.session_maker = clients.exact_session_maker(store._engine)
    facts = StoreFacts(name, metric=metric, exact=clients.PG_EXACT)
    search = partial(
        _by_vector,
        exact.similarity_search_with_score_by_vector,
        lambda question: store.embeddings.embed_query(question),
    )
    return StoreReading(facts, search, _metadata_eq)


_PG2_STRATEGIES = {
    "COSINE_DISTANCE": "cosine_distance",  # pgvector's cosine_distance(): 1 - cos
    "EUCLIDEAN": "l2",  # l2_distance()
    "INNER_PRODUCT": "inner_product",  # inner_product(): q.v, ordered by <#> (best first)
}


def _pgvector_store(store: Any) -> StoreReading:
    vs = store._PGVectorStore__vs  # the async store it wraps (v2 keeps its state there)
    strategy = getattr(vs.distance_strategy, "name", str(vs.distance_strategy))
    name = f"PGVectorStore (distance_strategy {strategy})"
    if vs.hybrid_search_config is not None:
        refused = (
            "its hybrid search fuses the vector ranking with a full-text ranking scored with "
            "corpus statistics, so one added document changes other documents' places. Fix: "
            "PGVectorStore.create_sync(..., hybrid_search_config=None)"
        )
        return _refused(name, refused, store)
    metric = _PG2_STRATEGIES.get(strategy)
    if metric is None:
        return StoreReading(StoreFacts(name), partial(_own, store.similarity_search_with_score))

    exact = copy.copy(vs)  # the user's store keeps its own options
    exact.index_query_options = _exact_scan()
    facts = StoreFacts(name, metric=metric, exact=clients.PG_EXACT)
    return StoreReading(
        facts, partial(_pgvector_store_searcher, store._engine, exact), _metadata_eq
    )


@cache
def _exact_scan() -> Any:
    """``index_query_options`` that make a v2 query exact: its per-query ``SET LOCAL`` hook."""
    from langchain_postgres.v2.indexes import QueryOptions

    @dataclass
    class ExactScan(QueryOptions):
        def to_parameter(self) -> list[str]:
            return list(clients.PG_EXACT_SETTINGS)

        def to_string(self) -> str:
            return ", ".join(clients.PG_EXACT_SETTINGS)

    return ExactScan()


def _pgvector_store_searcher(engine: Any, exact: Any, filter: Any) -> Search:
    service = exact.embedding_service
    if callable(getattr(service, "embed_query_inline_template", None)):  # embedded in SQL

        def in_sql(question: str, k: int) -> list[tuple[Document, float]]:
            found: list[tuple[Document, float]] = engine._run_as_sync(
                exact.asimilarity_search_with_score(question, k, filter)
            )
            return found

        return in_sql
    vector = embedded_once(lambda question: engine._run_as_sync(service.aembed_query(question)))

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        found: list[tuple[Document, float]] = engine._run_as_sync(
            exact.asimilarity_search_with_score_by_vector(vector(question), k, filter)
        )
        return found

    return search


def _qdrant(store: Any) -> StoreReading:
    from langchain_qdrant import RetrievalMode

    if store.retrieval_mode != RetrievalMode.DENSE:
        name = f"QdrantVectorStore ({store.retrieval_mode.value} mode)"
        refused = (
            "sparse and hybrid modes score with corpus statistics or fuse two rankings, so "
            "one added document changes other documents' scores. Fix: "
            "QdrantVectorStore(..., retrieval_mode=RetrievalMode.DENSE)"
        )
        return _refused(name, refused, store)
    distance = clients.qdrant_distance(store.client, store.collection_name, store.vector_name)
    name = f"QdrantVectorStore (distance {distance!r})"
    metric = clients.QDRANT_METRICS.get(distance or "")
    searcher = partial(
        _by_vector,
        store.similarity_search_with_score_by_vector,
        lambda question: store.embeddings.embed_query(question),
        search_params=clients.qdrant_exact_params(),
    )
    facts = StoreFacts(name, metric=metric, exact=clients.QDRANT_EXACT)
    return StoreReading(facts, searcher, partial(_qdrant_eq, store.metadata_payload_key))


def _qdrant_eq(payload_key: str, key: str, value: Any) -> Any:
    from qdrant_client import models

    condition = models.FieldCondition(
        key=f"{payload_key}.{key}", match=models.MatchValue(value=value)
    )
    return models.Filter(must=[condition])


def _lancedb(store: Any) -> StoreReading:
    if store.get_table() is None:  # nothing added yet: no table, no metric to read
        refused = (
            "it has no table yet (no texts were added), so its distance metric cannot be "
            "read. Fix: add the texts first (LanceDB.from_texts, add_texts), then build the app"
        )
        return _refused("LanceDB (empty)", refused, store)
    distance = clients.lance_distance(store.get_table(), store._vector_key)
    facts = StoreFacts(
        f"LanceDB (distance {distance!r})",
        metric=clients.LANCE_METRICS.get(distance),
        exact=clients.LANCE_EXACT,
    )
    return StoreReading(facts, partial(_lance_searcher, store, distance), _lance_eq)


def _lance_eq(key: str, value: Any) -> str:
    if not key.isidentifier():
        raise ValueError(f"key must be an identifier for a LanceDB filter, got {key!r}")
    if isinstance(value, str):
        literal = "'" + value.replace("'", "''") + "'"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        literal = repr(value)
    else:
        raise TypeError(f"value must be a str, int or float, got {type(value).__name__}")
    return f"metadata.`{key}` = {literal}"


def _lance_searcher(store: Any, distance: str, filter: Any) -> Search:
    from langchain_community.vectorstores.lancedb import to_lance_filter

    where = to_lance_filter(filter) if isinstance(filter, dict) else filter
    vector = embedded_once(lambda question: store._embedding.embed_query(question))

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        found = clients.lance_exact(
            store.get_table(),
            vector(question),
            column=store._vector_key,
            distance=distance,
            k=k,
            where=where,
        )
        pairs: list[tuple[Document, float]] = store.results_to_docs(found, score=True)
        return pairs

    return search


_TABLE: dict[str, Callable[[Any], StoreReading]] = {
    "langchain_core.vectorstores.in_memory.InMemoryVectorStore": _in_memory,
    "langchain_community.vectorstores.faiss.FAISS": _faiss,
    "langchain_chroma.vectorstores.Chroma": _chroma,
    "langchain_postgres.vectorstores.PGVector": _pgvector,
    "langchain_postgres.v2.vectorstores.PGVectorStore": _pgvector_store,
    "langchain_qdrant.qdrant.QdrantVectorStore": _qdrant,
    "langchain_community.vectorstores.lancedb.LanceDB": _lancedb,
}
"""The supported classes, by module and name (module docstring)."""
