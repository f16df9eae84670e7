"""langchain-chroma's ``Chroma``: the collection's distance; no exact mode, so dprag ranks.

=================  ================================================================
score              the collection's space: ``squared_l2`` (``l2``),
                   ``cosine_distance`` (``cosine``), ``ip_distance`` (``ip``)
exact search       Chroma's HNSW has no exact mode: the stored vectors are read
                   and ranked exactly (:class:`~dprag_core.retrieval.clients.ChromaScan`),
                   refused above :data:`~dprag_core.retrieval.clients.CHROMA_EXACT_LIMIT`
                   vectors; a filter is a ``where`` dict: only those vectors are read
cell filter        ``where={"dprag_cell": {"$in": cells}}`` (no size limit: only the
                   probed cells are read)
count, dimension   the collection's ``count()``, one stored vector
=================  ================================================================

Private attribute read: ``_collection`` (the chromadb collection: langchain-chroma
has no public accessor for it; its vectors, count and space are then read
through chromadb's public API). The embeddings are its public ``embeddings``.

>>> SUPPORT.partitioned
'Chroma'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.embedding_record import chroma_recorded_model
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
)

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    space = clients.chroma_space(store._collection)
    name = f"Chroma (space {space!r})"
    metric = clients.CHROMA_METRICS.get(space)
    if store.embeddings is None:
        refused = (
            "it has no embedding function, and dprag embeds the question to rank the "
            "stored vectors exactly. Fix: Chroma(..., embedding_function=the embeddings "
            "its documents were embedded with)"
        )
        return own_reading(store, StoreFacts(name, refused=refused))
    if metric is None:
        return own_reading(store, StoreFacts(name))
    too_large = None if partition is not None else clients.chroma_too_large(store._collection)
    if too_large is not None:
        return own_reading(store, StoreFacts(name, refused=too_large))
    facts = StoreFacts(name, metric=metric, exact=clients.CHROMA_EXACT)
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, store, metric),
        cell_filter=lambda cells: cell_search.chroma_where(cells.key, cells.cells),
        equals=lambda key, value: {key: {"$eq": value}},
    )


def _search(store: Any, metric: str, filter: Any) -> VectorSearch:
    scans: dict[tuple[float, ...], clients.ChromaScan] = {}

    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        key = tuple(vector)
        if key not in scans:  # one question per search; a new one rescans
            scans.clear()
            scans[key] = clients.ChromaScan(store._collection, metric, list(vector), filter)
        return [
            (Document(page_content=text, metadata=dict(meta), id=i), raw)
            for i, text, meta, raw in scans[key].first(k)
        ]

    return search


def _dimension(store: Any) -> int | None:
    found = store._collection.get(limit=1, include=["embeddings"])["embeddings"]
    return None if found is None or len(found) == 0 else len(found[0])


SUPPORT = register(
    LangChainStore(
        ("langchain_chroma.vectorstores.Chroma",),
        "langchain-chroma Chroma",
        _read,
        count=lambda store: int(store._collection.count()),
        dimension=_dimension,
        recorded_model=lambda store: chroma_recorded_model(store._collection),
        partitioned="Chroma",
    )
)
