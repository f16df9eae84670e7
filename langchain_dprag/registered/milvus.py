"""langchain-milvus's ``Milvus`` (one dense vector field): a FLAT index, its metric, exact.

=================  ================================================================
score              the vector index's metric: ``cosine`` (COSINE), ``inner_product``
                   (IP), ``squared_l2`` (L2: Milvus returns the squared distance)
exact search       a ``FLAT`` index (Milvus Lite: also ``BRUTE_FORCE``), searched with
                   its own metric; any other index is approximate and refused (Milvus
                   has no per-query exact mode). A filter is a Milvus boolean
                   expression (``expr``), applied before the scan ranks
cell filter        ``dprag_cell in [...]`` on the field the first tagged batch creates
                   (or a dynamic field)
documents, ids     the store's own ``similarity_search_with_score_by_vector``; each
                   document's id is its primary key (which the store leaves in
                   ``metadata``)
count, dimension   ``count(*)`` of the collection; the vector field's ``dim``
refused            several vector fields or a built-in function (BM25, hybrid
                   search: fused rankings, corpus statistics), any index but FLAT
=================  ================================================================

The same code runs against Milvus Lite (``connection_args={"uri": "./x.db"}``)
and a Milvus server or cluster (``{"uri": "http://host:19530"}``); on a server,
growing segments are also searched exactly only with the server's interim
index off (:mod:`dprag_core.retrieval.milvus`).

Private attributes read: none (``client``, ``collection_name``, ``vector_fields``,
``embeddings``, ``builtin_func``, ``enable_dynamic_field`` are public); the
collection's fields, index and size are read with ``MilvusClient``'s public API.

>>> SUPPORT.partitioned
'Milvus'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval import milvus
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
)

__all__ = ["SUPPORT"]

_FLAT_FIX = (
    'Milvus(..., index_params={"index_type": "FLAT", "metric_type": "COSINE"}) for a new '
    "collection (an existing one: drop its vector index and create a FLAT one)"
)


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    fields = list(store.vector_fields)
    if len(fields) != 1 or store.builtin_func or not store.embeddings:
        refused = (
            "it searches several vector fields or a built-in function (BM25, text "
            "embedding): a fused ranking or corpus statistics, so one added document "
            "changes other documents' places. Fix: Milvus(embedding_function=one dense "
            "Embeddings) with no builtin_function"
        )
        return own_reading(store, StoreFacts("Milvus (multi-vector or function)", refused=refused))
    client, collection = store.client, store.collection_name
    index = milvus.vector_index(client, collection, fields[0])
    if index is None:
        refused = (
            "its collection or vector index does not exist yet (no texts were added), so its "
            "metric cannot be read. Fix: add the texts first (Milvus.from_documents, "
            "add_documents), then build the app"
        )
        return own_reading(store, StoreFacts("Milvus (empty)", refused=refused))
    facts = milvus.index_facts("Milvus", index, _FLAT_FIX)
    if facts.refused is not None or facts.metric is None:
        return own_reading(store, facts)
    if partition is not None and not _has_cell(store):
        refused = (
            f"its collection has no {CELL_KEY} field, so its search cannot keep a question's "
            "cells. Fix: add the documents with langchain_dprag.cells.add_documents (the "
            f"first batch creates the field), or Milvus(..., enable_dynamic_field=True)"
        )
        return own_reading(store, StoreFacts(facts.store, refused=refused))
    primary = milvus.primary_field(client, collection)
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, store, milvus.exact_params(index), primary),
        cell_filter=_in_cells,
        equals=milvus.equals_expr,
        own_search_exact=True,
    )


def _has_cell(store: Any) -> bool:
    fields = milvus.field_names(store.client, store.collection_name)
    return CELL_KEY in fields or bool(store.enable_dynamic_field)


def _search(store: Any, params: dict[str, Any], primary: str | None, expr: Any) -> VectorSearch:
    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found = store.similarity_search_with_score_by_vector(
            list(vector), k=k, param=params, expr=expr
        )
        return [(_with_id(doc, primary), score) for doc, score in found]

    return search


def _with_id(doc: Document, primary: str | None) -> Document:
    """``doc`` with its primary key as its id (the store leaves the key in ``metadata``)."""
    key = doc.metadata.get(primary) if primary is not None else None
    if key is None:
        return doc
    return Document(page_content=doc.page_content, metadata=doc.metadata, id=str(key))


def _in_cells(cells: Cells) -> str:
    return milvus.in_expr(cells.key, cells.cells)


def _dimension(store: Any) -> int | None:
    fields = list(store.vector_fields)
    if len(fields) != 1:
        return None
    return milvus.vector_dimension(store.client, store.collection_name, fields[0])


SUPPORT = register(
    LangChainStore(
        ("langchain_milvus.vectorstores.milvus.Milvus",),
        "langchain-milvus Milvus (FLAT index)",
        _read,
        count=lambda store: milvus.count(store.client, store.collection_name),
        dimension=_dimension,
        partitioned="Milvus",
    )
)
