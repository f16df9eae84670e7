"""The LangChain store table: what each supported vector store's scores are, and its exact search.

One place for every LangChain entry point (``DPRAGChain(vectorstore=...)``,
``retriever=store.as_retriever()``, ``DPRetriever``): :func:`read_store` looks
at the store *object* (its class, distance strategy, FAISS index type, Chroma
or Qdrant collection configuration) and returns a :class:`StoreReading`: the
:class:`~dprag_core.retrieval.stores.StoreFacts` (which metric its raw scores
are, how its results are exact, or what is refused and why) and a search that
returns the store's exact top k with raw scores, best first.

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
QdrantVectorStore       ``cosine`` / ``inner_product`` /    ``SearchParams(exact=True)``,
                        ``l2`` / ``manhattan`` (collection  quantization ignored; dense mode
                        vector params)                      only
LanceDB (community)     ``squared_l2`` / ``cosine_distance``  ``bypass_vector_index()``: a flat
                        / ``ip_distance`` (the vector       scan, never the IVF index
                        index's metric, else ``l2``)
======================  ==================================  ===================================

Only these classes are read (a subclass may override the search): any other
store, and these in a configuration the table does not know, have no facts,
and the adapters refuse them unless the user declares the score function and
``exact_search=True``.

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> read_store(InMemoryVectorStore(DeterministicFakeEmbedding(size=4))).facts.metric
'cosine'
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval import clients
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.embeddings import NormalizedEmbeddings

__all__ = ["SUPPORTED_STORES", "Search", "StoreReading", "read_store"]

Search = Callable[[str, int], list[tuple[Document, float]]]
"""``search(question, k)``: the store's first k for the question with raw scores, best first."""

SUPPORTED_STORES = (
    "InMemoryVectorStore, langchain-community FAISS (flat index), langchain-chroma Chroma, "
    "langchain-postgres PGVector, langchain-qdrant QdrantVectorStore (dense), "
    "langchain-community LanceDB"
)


@dataclass(frozen=True)
class StoreReading:
    """The facts about one store and how to search it.

    ``searcher()`` gives the search for one query: a store ranked by a full
    scan (Chroma) ranks once per query and serves every k from that ranking.
    """

    facts: StoreFacts
    searcher: Callable[[], Search]


def read_store(store: VectorStore) -> StoreReading:
    """The table's reading of ``store`` (module docstring); no facts for an unknown class."""
    cls = type(store)
    reader = _TABLE.get(f"{cls.__module__}.{cls.__qualname__}")
    if reader is None:
        return _fixed(StoreFacts(cls.__name__), store.similarity_search_with_score)
    return reader(store)


def _fixed(facts: StoreFacts, search: Search) -> StoreReading:
    return StoreReading(facts, lambda: search)


def _unit_norm(store: Any) -> bool:
    embeddings = getattr(store, "embeddings", None)
    return bool(getattr(store, "_normalize_L2", False)) or isinstance(
        embeddings, NormalizedEmbeddings
    )


def _in_memory(store: Any) -> StoreReading:
    facts = StoreFacts(
        "InMemoryVectorStore", metric="cosine", exact="brute force (every stored vector scored)"
    )
    return _fixed(facts, store.similarity_search_with_score)


def _faiss(store: Any) -> StoreReading:
    index = clients.faiss_index(store.index, normalised=_unit_norm(store))
    name = f"FAISS ({index.kind})"
    search = store.similarity_search_with_score
    if index.unreadable is not None:
        return _fixed(StoreFacts(f"{name} with {index.unreadable}"), search)
    if not index.flat:
        refused = (
            f"its {index.kind} index is approximate and cannot be asked for exact results "
            "(one added document can push several others out of the top k, which the DP "
            "guarantee does not allow). Fix: build the store with a flat index: "
            "FAISS.from_documents(docs, embeddings) (IndexFlatL2) or "
            "faiss_inner_product(docs, embeddings) (IndexFlatIP, cosine)"
        )
        return _fixed(StoreFacts(name, refused=refused), search)
    return _fixed(StoreFacts(name, metric=index.metric, exact=clients.FLAT_EXACT), search)


def _chroma(store: Any) -> StoreReading:
    space = clients.chroma_space(store._collection)
    name = f"Chroma (space {space!r})"
    metric = clients.CHROMA_METRICS.get(space)
    if store._embedding_function is None:
        refused = (
            "it has no embedding function, and dprag embeds the question to rank the "
            "stored vectors exactly. Fix: Chroma(..., embedding_function=embeddings)"
        )
        return _fixed(StoreFacts(name, refused=refused), store.similarity_search_with_score)
    if metric is None:
        return _fixed(StoreFacts(name), store.similarity_search_with_score)
    facts = StoreFacts(name, metric=metric, exact=clients.CHROMA_EXACT)
    return StoreReading(facts, partial(_chroma_searcher, store, metric))


def _chroma_searcher(store: Any, metric: str) -> Search:
    scans: dict[str, clients.ChromaScan] = {}

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        if question not in scans:  # one question per searcher; a new one rescans
            scans.clear()
            embedding: Embeddings = store._embedding_function
            query = embedding.embed_query(question)
            scans[question] = clients.ChromaScan(store._collection, metric, query)
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
        return _fixed(StoreFacts(name, refused=refused), store.similarity_search_with_score)
    metric = _PG_STRATEGIES.get(str(strategy))
    if metric is None:
        return _fixed(StoreFacts(name), store.similarity_search_with_score)
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact.session_maker = clients.exact_session_maker(store._engine)
    return _fixed(
        StoreFacts(name, metric=metric, exact=clients.PG_EXACT), exact.similarity_search_with_score
    )


def _qdrant(store: Any) -> StoreReading:
    from langchain_qdrant import RetrievalMode

    if store.retrieval_mode != RetrievalMode.DENSE:
        name = f"QdrantVectorStore ({store.retrieval_mode.value} mode)"
        refused = (
            "sparse and hybrid modes score with corpus statistics or fuse two rankings, so "
            "one added document changes other documents' scores. Fix: "
            "QdrantVectorStore(..., retrieval_mode=RetrievalMode.DENSE)"
        )
        return _fixed(StoreFacts(name, refused=refused), store.similarity_search_with_score)
    distance = clients.qdrant_distance(store.client, store.collection_name, store.vector_name)
    name = f"QdrantVectorStore (distance {distance!r})"
    metric = clients.QDRANT_METRICS.get(distance or "")
    search = partial(
        store.similarity_search_with_score, search_params=clients.qdrant_exact_params()
    )
    return _fixed(StoreFacts(name, metric=metric, exact=clients.QDRANT_EXACT), search)


def _lancedb(store: Any) -> StoreReading:
    if store.get_table() is None:  # nothing added yet: no table, no metric to read
        refused = (
            "it has no table yet (no texts were added), so its distance metric cannot be "
            "read. Fix: add the texts first (LanceDB.from_texts, add_texts), then build the app"
        )
        return _fixed(StoreFacts("LanceDB (empty)", refused=refused), store.similarity_search)
    distance = clients.lance_distance(store.get_table(), store._vector_key)
    facts = StoreFacts(
        f"LanceDB (distance {distance!r})",
        metric=clients.LANCE_METRICS.get(distance),
        exact=clients.LANCE_EXACT,
    )
    return _fixed(facts, partial(_lance_search, store, distance))


def _lance_search(store: Any, distance: str, question: str, k: int) -> list[tuple[Document, float]]:
    found = clients.lance_exact(
        store.get_table(),
        store._embedding.embed_query(question),
        column=store._vector_key,
        distance=distance,
        k=k,
    )
    pairs: list[tuple[Document, float]] = store.results_to_docs(found, score=True)
    return pairs


_TABLE: dict[str, Callable[[Any], StoreReading]] = {
    "langchain_core.vectorstores.in_memory.InMemoryVectorStore": _in_memory,
    "langchain_community.vectorstores.faiss.FAISS": _faiss,
    "langchain_chroma.vectorstores.Chroma": _chroma,
    "langchain_postgres.vectorstores.PGVector": _pgvector,
    "langchain_qdrant.qdrant.QdrantVectorStore": _qdrant,
    "langchain_community.vectorstores.lancedb.LanceDB": _lancedb,
}
"""The supported classes, by module and name (module docstring)."""
