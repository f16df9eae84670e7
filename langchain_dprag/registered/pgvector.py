"""langchain-postgres's ``PGVector``: its distance strategy; each query scans sequentially.

=================  ================================================================
score              ``distance_strategy``: ``cosine_distance`` (cosine), ``l2``
                   (euclidean), ``negative_inner_product`` (inner)
exact search       each query's transaction runs with index scans off (``SET LOCAL
                   enable_indexscan = off``): a sequential, exact scan; a filter is
                   a ``filter`` dict (``$eq``, ``$in``), a ``WHERE`` on that scan
cell filter        ``{"dprag_cell": {"$in": cells}}``, served by a B-tree on
                   ``cmetadata->>'dprag_cell'`` (made by
                   :func:`~langchain_dprag.cells.add_documents`)
count, dimension   not counted; ``embedding_length``
refused            async mode (dprag searches synchronously)
=================  ================================================================

Private attributes read: ``_distance_strategy``, ``_engine`` (to open the exact
sessions: ``session_maker`` is replaced on a copy of the store, the user's
store keeps its own), ``_embedding_length`` and ``_make_sync_session``
(creating the cell index); langchain-postgres has no public accessors for them.

>>> SUPPORT.label
'langchain-postgres PGVector'
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
from langchain_core.documents import Document

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
    tag_documents,
)

__all__ = ["SUPPORT"]

_STRATEGIES = {"cosine": "cosine_distance", "l2": "l2", "inner": "negative_inner_product"}


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    strategy = getattr(store._distance_strategy, "value", store._distance_strategy)
    name = f"PGVector (distance_strategy {strategy!r})"
    if store.async_mode:
        refused = (
            "it was made in async mode, and dprag searches synchronously (each query in a "
            "worker thread). Fix: PGVector(..., connection=a synchronous URL or Engine)"
        )
        return own_reading(store, StoreFacts(name, refused=refused))
    metric = _STRATEGIES.get(str(strategy))
    if metric is None:
        return own_reading(store, StoreFacts(name))
    exact = copy.copy(store)  # the user's store keeps its own sessions
    exact.session_maker = clients.exact_session_maker(store._engine)
    facts = StoreFacts(name, metric=metric, exact=clients.PG_EXACT)
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, exact),
        cell_filter=lambda cells: {cells.key: {"$in": list(cells.cells)}},
        equals=lambda key, value: {key: {"$eq": value}},
    )


def _search(exact: Any, filter: Any) -> VectorSearch:
    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found: list[tuple[Document, float]] = exact.similarity_search_with_score_by_vector(
            list(vector), k=k, filter=filter
        )
        return found

    return search


def _add(
    store: Any, documents: list[Document], partition: PublicPartition, ids: list[str] | None
) -> list[str]:
    """Tagged documents added with the vectors already computed, then the B-tree on the cell."""
    tagged, vectors = tag_documents(store, documents, partition)
    texts = [d.page_content for d in tagged]
    metadatas = [d.metadata for d in tagged]
    added = store.add_embeddings(texts, np.asarray(vectors).tolist(), metadatas, ids=ids)
    table = store.EmbeddingStore.__tablename__
    with store._make_sync_session() as session:
        cell_search.pg_cell_index(
            session,
            table=table,
            name=f"{table}_{CELL_KEY}",
            expression=f"(cmetadata ->> '{CELL_KEY}')",
        )
        session.commit()
    return list(added)


def _dimension(store: Any) -> int | None:
    length = store._embedding_length
    return None if length is None else int(length)


SUPPORT = register(
    LangChainStore(
        ("langchain_postgres.vectorstores.PGVector",),
        "langchain-postgres PGVector",
        _read,
        dimension=_dimension,
        partitioned="PGVector",
        add=_add,
    )
)
