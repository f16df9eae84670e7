"""langchain-postgres's ``PGVectorStore`` (v2): its distance strategy; exact per-query scans.

=================  ================================================================
score              ``distance_strategy``: ``cosine_distance`` (COSINE_DISTANCE),
                   ``l2`` (EUCLIDEAN), ``inner_product`` (INNER_PRODUCT: q·v,
                   ordered best first)
exact search       its per-query ``index_query_options`` hook sets index scans off
                   (a sequential, exact scan); a filter is a ``filter`` dict
cell filter        none (not partitioned)
count, dimension   not counted; the ``vector(n)`` type of its embedding column
refused            hybrid search (fused with a corpus-statistics text ranking)
=================  ================================================================

Private attributes read: ``_PGVectorStore__vs`` (the async store it wraps,
where v2 keeps its distance strategy, hybrid configuration and query options:
the sync class exposes none of them) and ``_engine`` (its ``_run_as_sync``
runs the async search on the engine's own loop, as the sync class does).

>>> SUPPORT.partitioned is None
True
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval import clients
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
)

__all__ = ["SUPPORT"]

_STRATEGIES = {
    "COSINE_DISTANCE": "cosine_distance",  # pgvector's cosine_distance(): 1 - cos
    "EUCLIDEAN": "l2",  # l2_distance()
    "INNER_PRODUCT": "inner_product",  # inner_product(): q.v, ordered by <#> (best first)
}


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    vs = store._PGVectorStore__vs  # the async store it wraps (v2 keeps its state there)
    strategy = getattr(vs.distance_strategy, "name", str(vs.distance_strategy))
    name = f"PGVectorStore (distance_strategy {strategy})"
    if vs.hybrid_search_config is not None:
        refused = (
            "its hybrid search fuses the vector ranking with a full-text ranking scored with "
            "corpus statistics, so one added document changes other documents' places. Fix: "
            "PGVectorStore.create_sync(..., hybrid_search_config=None)"
        )
        return own_reading(store, StoreFacts(name, refused=refused))
    metric = _STRATEGIES.get(strategy)
    if metric is None:
        return own_reading(store, StoreFacts(name))
    exact = copy.copy(vs)  # the user's store keeps its own options
    exact.index_query_options = _exact_scan()
    facts = StoreFacts(name, metric=metric, exact=clients.PG_EXACT)
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, store._engine, exact),
        equals=lambda key, value: {key: {"$eq": value}},
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


def _search(engine: Any, exact: Any, filter: Any) -> VectorSearch:
    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found: list[tuple[Document, float]] = engine._run_as_sync(
            exact.asimilarity_search_with_score_by_vector(list(vector), k, filter)
        )
        return found

    return search


def _dimension(store: Any) -> int | None:
    """The ``vector(n)`` type of its embedding column."""
    from sqlalchemy import text

    vs = store._PGVectorStore__vs
    query = text(
        "SELECT a.atttypmod FROM pg_catalog.pg_attribute AS a "
        "WHERE a.attrelid = pg_catalog.to_regclass(:table) AND a.attname = :column"
    )
    table = f'"{vs.schema_name}"."{vs.table_name}"'

    async def read() -> int | None:
        async with vs.engine.connect() as conn:
            found = await conn.execute(query, {"table": table, "column": vs.embedding_column})
            row = found.first()
        return None if row is None or int(row[0]) <= 0 else int(row[0])

    result: int | None = store._engine._run_as_sync(read())
    return result


SUPPORT = register(
    LangChainStore(
        ("langchain_postgres.v2.vectorstores.PGVectorStore",),
        "langchain-postgres PGVectorStore",
        _read,
        dimension=_dimension,
    )
)
