"""The partitioned search on LangChain's stores: cells written at insert, probed cells searched.

A :class:`~dprag_core.retrieval.cells.PublicPartition` gives every document the
cell of its vector when it is added, and every question a fixed number of
probed cells; the chain's or retriever's ``partition=`` then asks the store for
the exact top k among the documents of those cells only, in the store's own
filtered exact search (:mod:`dprag_core.retrieval.cell_search`):

=====================  ===============================================================
store                  cells and search
=====================  ===============================================================
FAISS (community)      an ``IndexIVFFlat`` of the partition's cells
                       (:func:`partitioned_faiss`); the probed lists are scanned
Chroma                 ``metadata["dprag_cell"]``; the vectors of the probed cells are
                       read (``where``) and ranked exactly
PGVector               ``cmetadata->>'dprag_cell' IN (...)`` in the exact transaction,
                       served by a B-tree on it (created by :func:`add_documents`)
QdrantVectorStore      ``metadata.dprag_cell`` with ``MatchAny`` and ``exact=True``; a
                       payload index on it (created by :func:`add_documents`)
LanceDB (community)    ``metadata.dprag_cell IN (...)`` prefilter of the flat scan, a
                       bitmap index on it (created by :func:`add_documents`)
InMemoryVectorStore    a filter on ``metadata["dprag_cell"]``
=====================  ===============================================================

Add documents with :func:`add_documents` (it computes the cells, refuses
vectors the partition was fitted on, and creates the store's index on the
cell); a document added without a cell is never found by the partitioned
search (a loss of recall, not of privacy: what is found still depends on each
document alone). Whatever the store, what a question retrieves is the first k
of one fixed ranking of the documents in its probed cells, so one added unit is
inserted into it and nothing else moves (docs/design.md §11).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.documents import Document
>>> from dprag_core.retrieval.cells import PublicPartition
>>> partition = PublicPartition.random(dim=8, cells=4, probes=2)
>>> store = partitioned_faiss([Document("a"), Document("b")], DeterministicFakeEmbedding(size=8),
...                          partition)  # doctest: +SKIP
"""

from __future__ import annotations

import copy as _copy
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition, check_partition
from dprag_core.retrieval.stores import StoreFacts, refusal
from dprag_core.validation import missing_extra
from langchain_dprag.embeddings import NormalizedEmbeddings, embedded_once
from langchain_dprag.stores import Search, StoreReading, read_store

__all__ = ["PARTITIONED_STORES", "add_documents", "partitioned_faiss", "partitioned_reading"]

PARTITIONED_STORES = (
    "FAISS (partitioned_faiss), Chroma, PGVector, QdrantVectorStore, LanceDB, InMemoryVectorStore"
)


def _kind(store: VectorStore) -> str:
    cls = type(store)
    return _KINDS.get(f"{cls.__module__}.{cls.__qualname__}", "")


# -- writing ---------------------------------------------------------------------------


def partitioned_faiss(
    documents: Sequence[Document],
    embedding: Embeddings,
    partition: PublicPartition,
    *,
    ids: Sequence[str] | None = None,
) -> Any:
    """A langchain-community ``FAISS`` store over the partition's ``IndexIVFFlat`` (cosine).

    Its embeddings are normalised (:class:`~langchain_dprag.embeddings.NormalizedEmbeddings`)
    and every later ``add_documents`` goes through the partition too.
    """
    partition = check_partition(partition)
    with warnings.catch_warnings():  # langchain-community's sunset notice
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from langchain_community.docstore.in_memory import InMemoryDocstore
            from langchain_community.vectorstores import FAISS
            from langchain_community.vectorstores.utils import DistanceStrategy
        except ImportError as missing:
            raise missing_extra(
                "partitioned_faiss", missing, extra="langchain-faiss,faiss"
            ) from None
    store = FAISS(
        NormalizedEmbeddings(embedding),
        cell_search.faiss_partitioned_index(partition),
        InMemoryDocstore(),
        {},
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )
    if documents:
        store.add_documents(list(documents), ids=None if ids is None else list(ids))
    return store


def add_documents(
    store: VectorStore,
    documents: Sequence[Document],
    partition: PublicPartition,
    *,
    ids: Sequence[str] | None = None,
) -> list[str]:
    """Add ``documents`` to ``store`` with their cells; the ids the store gives them.

    Each document's vector is embedded with the store's embeddings, its cell
    (:meth:`~dprag_core.retrieval.cells.PublicPartition.assign`) written to
    ``metadata["dprag_cell"]`` (FAISS: the list it goes to), after refusing
    vectors the partition was fitted on. The store's index on the cell is
    created if missing (Qdrant server: a payload index; PGVector: a B-tree,
    and the batch's rows written in cell order, so a cell's rows share pages;
    LanceDB: a bitmap index, made again after each add; rows it does not
    cover yet are scanned, so the search stays exact). A LanceDB store in
    ``mode="overwrite"`` (LangChain's default) whose table exists is refused:
    its add would replace the table.
    """
    partition = check_partition(partition)
    kind = _kind(store)
    docs = list(documents)
    id_list = None if ids is None else list(ids)
    if not docs:
        return []
    if kind == "faiss":
        _bind_faiss(store, partition)
        return store.add_documents(docs, ids=id_list)
    if not kind:
        raise refusal(
            type(store).__name__,
            "it is not a store dprag partitions",
            f"use one of {PARTITIONED_STORES}",
        )
    embeddings = store.embeddings
    if embeddings is None:
        raise refusal(type(store).__name__, "it has no embeddings", "give the store its embeddings")
    if kind == "lancedb":
        _refuse_overwrite(store)
    texts = [d.page_content for d in docs]
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float64)
    partition.refuse_training(vectors)
    cells = partition.assign(vectors)
    tagged = [
        Document(page_content=d.page_content, metadata={**d.metadata, CELL_KEY: int(c)}, id=d.id)
        for d, c in zip(docs, cells, strict=True)
    ]
    if kind == "pgvector":  # no second embedding; rows written cell by cell (cell_search)
        order = np.argsort(cells, kind="stable").tolist()
        target: Any = store
        written = target.add_embeddings(
            [texts[i] for i in order],
            vectors[order].tolist(),
            [tagged[i].metadata for i in order],
            ids=None if id_list is None else [id_list[i] for i in order],
        )
        added = [""] * len(order)
        for i, given in zip(order, written, strict=True):
            added[i] = given
    else:
        added = store.add_documents(tagged, ids=id_list)
    _index_cells(store, kind)
    return list(added)


def _refuse_overwrite(store: Any) -> None:
    """Refuse adding to a LanceDB table in ``mode="overwrite"`` (LangChain's default).

    Its ``add_texts`` would replace the table's rows with the new ones: the
    corpus would be the last batch added, not every document (LanceDB Cloud,
    with an ``api_key``, always appends).
    """
    if store.mode == "overwrite" and store.api_key is None and store.get_table() is not None:
        raise refusal(
            'LanceDB(mode="overwrite")',
            "adding would replace every row of its table with the new documents",
            'open the store with LanceDB(..., mode="append")',
        )


def _index_cells(store: Any, kind: str) -> None:
    """The store's own index on the cell, so its filtered search reads only those documents."""
    if kind == "qdrant":
        from qdrant_client import models

        if clients.qdrant_local(store.client):
            return  # local mode has no payload indexes: it scans every point anyway
        store.client.create_payload_index(
            store.collection_name,
            f"{store.metadata_payload_key}.{CELL_KEY}",
            field_schema=models.PayloadSchemaType.INTEGER,
        )
    elif kind == "lancedb":
        cell_search.lance_cell_index(store.get_table(), f"metadata.{CELL_KEY}")
    elif kind == "pgvector":
        table = store.EmbeddingStore.__tablename__
        with store._make_sync_session() as session:
            cell_search.pg_cell_index(
                session,
                table=table,
                name=f"{table}_{CELL_KEY}",
                expression=f"(cmetadata ->> '{CELL_KEY}')",
            )
            session.commit()


# -- reading ---------------------------------------------------------------------------


def partitioned_reading(store: VectorStore, partition: PublicPartition) -> StoreReading:
    """The store table's reading of ``store``, its search restricted to the probed cells.

    Refused (ValueError naming the store and the fix) for a store dprag does
    not partition, and for a FAISS store whose index is not the partition's.
    """
    partition = check_partition(partition)
    kind = _kind(store)
    name = type(store).__name__
    if not kind:
        raise refusal(name, "dprag cannot search its cells", f"use one of {PARTITIONED_STORES}")
    if kind == "faiss":
        _bind_faiss(store, partition)
        facts = StoreFacts("FAISS (partitioned IndexIVFFlat)", metric="cosine")
    elif kind == "chroma":  # no size limit: only the probed cells are read
        space = clients.chroma_space(store._collection)  # type: ignore[attr-defined]
        facts = StoreFacts(f"Chroma (space {space!r})", metric=clients.CHROMA_METRICS.get(space))
    else:
        facts = read_store(store).facts
    if facts.refused is not None or facts.metric is None:  # open_store says why
        return StoreReading(facts, lambda filter: store.similarity_search_with_score)
    metric = facts.metric
    exact = cell_search.partitioned_exact(partition)
    facts = StoreFacts(f"{facts.store}, partitioned", metric=metric, exact=exact)
    return StoreReading(facts, partial(_searcher, _SEARCHERS[kind], store, partition, metric))


def _searcher(
    make: Callable[[Any, PublicPartition, str], Search],
    store: Any,
    partition: PublicPartition,
    metric: str,
    filter: Any,
) -> Search:
    """One question's search of the probed cells (a filter is refused when the app is built)."""
    if filter is not None:
        raise ValueError("partition= searches without filter")
    return make(store, partition, metric)


def _bind_faiss(store: Any, partition: PublicPartition) -> None:
    """Refuse a FAISS store whose index is not the partition's; make its adds the partition's."""
    problem = cell_search.faiss_partition_problem(store.index, partition)
    if problem is not None:
        raise refusal(
            f"FAISS ({type(store.index).__name__})",
            problem,
            "build it with partitioned_faiss(documents, embeddings, partition)",
        )
    cell_search.faiss_bind(store.index, partition)


def _embed(store: Any, question: str) -> list[float]:
    embeddings: Embeddings = store.embeddings
    return list(embeddings.embed_query(question))


def _faiss_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    vector = embedded_once(store._embed_query)  # once per query (embeddings.embedded_once)

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        query = np.asarray(vector(question), dtype=np.float32)
        scores, rows = cell_search.faiss_search(store.index, query, partition.probe(query), k)
        out = []
        for score, row in zip(scores.tolist(), rows.tolist(), strict=True):
            found = store.docstore.search(store.index_to_docstore_id[row])
            out.append((found if isinstance(found, Document) else Document(""), score))
        return out

    return search


def _chroma_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    scans: dict[str, clients.ChromaScan] = {}

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        if question not in scans:  # one question per searcher
            scans.clear()
            query = _embed(store, question)
            where = cell_search.chroma_where(CELL_KEY, partition.probe(query))
            scans[question] = clients.ChromaScan(store._collection, metric, query, where)
        return [
            (Document(page_content=text, metadata=dict(meta), id=i), raw)
            for i, text, meta, raw in scans[question].first(k)
        ]

    return search


def _pgvector_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    vector = embedded_once(partial(_embed, store))  # once per query
    copy = _copy.copy(store)  # the user's store keeps its own sessions
    copy.session_maker = clients.exact_session_maker(  # index scans off, the cells' B-tree read
        store._engine, clients.PG_CELLS_SETTINGS
    )

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        query = vector(question)
        cells = {CELL_KEY: {"$in": list(partition.probe(query))}}
        pairs: list[tuple[Document, float]] = copy.similarity_search_with_score_by_vector(
            query, k=k, filter=cells
        )
        return pairs

    return search


def _qdrant_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    vector = embedded_once(partial(_embed, store))  # once per query
    key = f"{store.metadata_payload_key}.{CELL_KEY}"
    local = clients.qdrant_local(store.client)

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        query = vector(question)
        cells = partition.probe(query)
        if local:  # no payload index: walk the exact ranking (cell_search.first_in_cells)
            return cell_search.first_in_cells(
                lambda n: store.similarity_search_with_score_by_vector(query, k=n),
                k, cells, lambda pair: pair[0].metadata.get(CELL_KEY),
                score=lambda pair: pair[1], ident=lambda pair: str(pair[0].id),
                partition=partition,
            )  # fmt: skip
        pairs: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            query,
            k=k,
            filter=cell_search.qdrant_filter(key, cells),
            search_params=clients.qdrant_exact_params(),
        )
        return pairs

    return search


def _lancedb_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    vector = embedded_once(partial(_embed, store))  # once per query
    distance = clients.lance_distance(store.get_table(), store._vector_key)

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        query = vector(question)
        found = clients.lance_exact(
            store.get_table(),
            query,
            column=store._vector_key,
            distance=distance,
            k=k,
            where=cell_search.lance_where(f"metadata.{CELL_KEY}", partition.probe(query)),
        )
        pairs: list[tuple[Document, float]] = store.results_to_docs(found, score=True)
        return pairs

    return search


def _in_memory_searcher(store: Any, partition: PublicPartition, metric: str) -> Search:
    vector = embedded_once(partial(_embed, store))  # once per query

    def search(question: str, k: int) -> list[tuple[Document, float]]:
        query = vector(question)
        cells = set(partition.probe(query))
        pairs: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            query, k=k, filter=lambda doc: doc.metadata.get(CELL_KEY) in cells
        )
        return pairs

    return search


_SEARCHERS: dict[str, Callable[[Any, PublicPartition, str], Search]] = {
    "faiss": _faiss_searcher,
    "chroma": _chroma_searcher,
    "pgvector": _pgvector_searcher,
    "qdrant": _qdrant_searcher,
    "lancedb": _lancedb_searcher,
    "inmemory": _in_memory_searcher,
}

_KINDS = {
    "langchain_core.vectorstores.in_memory.InMemoryVectorStore": "inmemory",
    "langchain_community.vectorstores.faiss.FAISS": "faiss",
    "langchain_chroma.vectorstores.Chroma": "chroma",
    "langchain_postgres.vectorstores.PGVector": "pgvector",
    "langchain_qdrant.qdrant.QdrantVectorStore": "qdrant",
    "langchain_community.vectorstores.lancedb.LanceDB": "lancedb",
}
"""The classes the partitioned search reads (the store table's, by module and name)."""
