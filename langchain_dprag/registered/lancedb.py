"""langchain-community's ``LanceDB``: the vector index's distance; a flat scan, never the index.

=================  ================================================================
score              the metric of the vector column's index, else LanceDB's
                   default ``l2``: ``squared_l2`` / ``cosine_distance`` /
                   ``ip_distance``
exact search       ``bypass_vector_index()``: a flat scan; a filter is an SQL
                   string (or its dict form), applied before the scan
                   (``prefilter=True``)
cell filter        ``metadata.dprag_cell IN (...)``, a bitmap index on it (made by
                   :func:`~langchain_dprag.cells.add_documents`, again after each add)
count, dimension   not counted; the table's vector column type
unit's records     ``count_rows`` with the equality filter on the unit key
refused            no table yet (nothing added); adding in ``mode="overwrite"``
=================  ================================================================

Private attribute read: ``_vector_key`` (the vector column's name: the store
has no public accessor for it).

>>> SUPPORT.label
'langchain-community LanceDB'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.stores import StoreFacts, refusal
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
    tag_documents,
)

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    if store.get_table() is None:  # nothing added yet: no table, no metric to read
        refused = (
            "it has no table yet (no texts were added), so its distance metric cannot be "
            "read. Fix: add the texts first (LanceDB.from_texts, add_texts), then build the app"
        )
        return own_reading(store, StoreFacts("LanceDB (empty)", refused=refused))
    distance = clients.lance_distance(store.get_table(), store._vector_key)
    facts = StoreFacts(
        f"LanceDB (distance {distance!r})",
        metric=clients.LANCE_METRICS.get(distance),
        exact=clients.LANCE_EXACT,
    )
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, store, distance),
        cell_filter=lambda cells: cell_search.lance_where(f"metadata.{cells.key}", cells.cells),
        equals=cell_search.lance_equals,
    )


def _search(store: Any, distance: str, filter: Any) -> VectorSearch:
    from langchain_community.vectorstores.lancedb import to_lance_filter

    where = to_lance_filter(filter) if isinstance(filter, dict) else filter

    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found = clients.lance_exact(
            store.get_table(),
            list(vector),
            column=store._vector_key,
            distance=distance,
            k=k,
            where=where,
        )
        pairs: list[tuple[Document, float]] = store.results_to_docs(found, score=True)
        return pairs

    return search


def _add(
    store: Any, documents: list[Document], partition: PublicPartition, ids: list[str] | None
) -> list[str]:
    """Refuse ``mode="overwrite"``; add tagged documents; make the bitmap index again.

    In ``mode="overwrite"`` (LangChain's default) its ``add_texts`` would replace
    the table's rows with the new ones: the corpus would be the last batch added
    (LanceDB Cloud, with an ``api_key``, always appends).
    """
    if store.mode == "overwrite" and store.api_key is None and store.get_table() is not None:
        raise refusal(
            'LanceDB(mode="overwrite")',
            "adding would replace every row of its table with the new documents",
            'open the store with LanceDB(..., mode="append")',
        )
    tagged, _ = tag_documents(store, documents, partition)
    added = list(store.add_documents(tagged, ids=ids))
    cell_search.lance_cell_index(store.get_table(), f"metadata.{CELL_KEY}")
    return added


def _unit_records(store: Any, key: str, units: Mapping[str, Any], limit: int) -> Mapping[str, int]:
    """Per unit, its rows: ``count_rows`` with the equality filter (no table yet: none)."""
    table = store.get_table()
    if table is None:
        return {}
    return {
        unit: int(table.count_rows(cell_search.lance_equals(key, value)))
        for unit, value in units.items()
    }


def _dimension(store: Any) -> int | None:
    table = store.get_table()
    if table is None:
        return None
    return int(table.schema.field(store._vector_key).type.list_size)


SUPPORT = register(
    LangChainStore(
        ("langchain_community.vectorstores.lancedb.LanceDB",),
        "langchain-community LanceDB",
        _read,
        dimension=_dimension,
        partitioned="LanceDB",
        add=_add,
        unit_records=_unit_records,
    )
)
