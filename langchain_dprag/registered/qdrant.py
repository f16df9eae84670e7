"""langchain-qdrant's ``QdrantVectorStore`` (dense mode): the collection's distance, exact=True.

=================  ================================================================
score              the collection's vector distance: ``cosine`` (Cosine),
                   ``inner_product`` (Dot), ``l2`` (Euclid), ``manhattan``
exact search       ``SearchParams(exact=True)``, quantization ignored; a filter is a
                   ``models.Filter``, applied by the exact scan
cell filter        ``MatchAny`` on ``metadata.dprag_cell`` (a payload index on a
                   server, made by :func:`~langchain_dprag.cells.add_documents`); in
                   local mode, which scans every point anyway, the exact ranking is
                   walked (:func:`~dprag_core.retrieval.cell_search.first_in_cells`)
count, dimension   the collection's exact count and vector size
document id        the point's id (``metadata["_id"]``, which langchain-qdrant
                   sets; ``Document.id`` it leaves unset)
refused            sparse and hybrid modes
=================  ================================================================

Private attributes read: none of the store's (``client``, ``collection_name``,
``vector_name``, ``metadata_payload_key``, ``retrieval_mode`` are public); the
client's ``_client`` tells local mode apart
(:func:`~dprag_core.retrieval.clients.qdrant_local`).

>>> SUPPORT.partitioned
'QdrantVectorStore'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.registry import Cells
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


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    from langchain_qdrant import RetrievalMode

    if store.retrieval_mode != RetrievalMode.DENSE:
        name = f"QdrantVectorStore ({store.retrieval_mode.value} mode)"
        refused = (
            "sparse and hybrid modes score with corpus statistics or fuse two rankings, so "
            "one added document changes other documents' scores. Fix: "
            "QdrantVectorStore(..., retrieval_mode=RetrievalMode.DENSE)"
        )
        return own_reading(store, StoreFacts(name, refused=refused))
    distance = clients.qdrant_distance(store.client, store.collection_name, store.vector_name)
    facts = StoreFacts(
        f"QdrantVectorStore (distance {distance!r})",
        metric=clients.QDRANT_METRICS.get(distance or ""),
        exact=clients.QDRANT_EXACT,
    )
    if clients.qdrant_local(store.client) and partition is not None:
        cell_filter: Any = partial(_Walk, partition=partition)
    else:
        cell_filter = partial(_in_cells, store.metadata_payload_key)
    return StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=partial(_search, store),
        cell_filter=cell_filter,
        equals=partial(_equals, store.metadata_payload_key),
    )


@dataclass(frozen=True)
class _Walk:
    """Local mode's cell filter: it has no payload index and scans every point anyway."""

    cells: Cells
    partition: PublicPartition


def _search(store: Any, filter: Any) -> VectorSearch:
    if isinstance(filter, _Walk):  # walk the exact ranking, keep the probed cells' points
        return partial(_walk, store, filter)

    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            list(vector), k=k, filter=filter, search_params=clients.qdrant_exact_params()
        )
        return [(_with_point_id(doc), score) for doc, score in found]

    return search


def _with_point_id(doc: Document) -> Document:
    """``doc`` with ``Document.id`` set to its point's id (``metadata["_id"]``).

    langchain-qdrant leaves ``Document.id`` unset and puts two keys of its own in
    the metadata: ``_id`` (the point's id: the one the app gave when it added the
    document) and ``_collection_name``. Without an id, a document's id would be a
    hash of its metadata, the collection's name included, so one document would get
    another id in another collection, and ties would be cut another way. With it,
    a document's id is its point's, as every other store's documents carry theirs.

    >>> _with_point_id(Document("a", metadata={"_id": 7, "_collection_name": "c"})).id
    '7'
    """
    point = doc.metadata.get("_id")
    if doc.id or point is None:
        return doc
    return Document(page_content=doc.page_content, metadata=doc.metadata, id=str(point))


def _walk(store: Any, walk: _Walk, vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
    exact, key = _search(store, None), walk.cells.key
    return cell_search.first_in_cells(
        lambda n: exact(vector, n),
        k, walk.cells.cells, lambda pair: pair[0].metadata.get(key),
        score=lambda pair: pair[1], ident=lambda pair: str(pair[0].id),
        partition=walk.partition,
    )  # fmt: skip


def _in_cells(payload_key: str, cells: Cells) -> Any:
    return cell_search.qdrant_filter(f"{payload_key}.{cells.key}", cells.cells)


def _equals(payload_key: str, key: str, value: Any) -> Any:
    from qdrant_client import models

    condition = models.FieldCondition(
        key=f"{payload_key}.{key}", match=models.MatchValue(value=value)
    )
    return models.Filter(must=[condition])


def _add(
    store: Any, documents: list[Document], partition: PublicPartition, ids: list[str] | None
) -> list[str]:
    """Tagged documents added, then a payload index on the cell (a server; not local mode)."""
    from qdrant_client import models

    tagged, _ = tag_documents(store, documents, partition)
    added = list(store.add_documents(tagged, ids=ids))
    if not clients.qdrant_local(store.client):  # local mode scans every point anyway
        store.client.create_payload_index(
            store.collection_name,
            f"{store.metadata_payload_key}.{CELL_KEY}",
            field_schema=models.PayloadSchemaType.INTEGER,
        )
    return added


def _dimension(store: Any) -> int | None:
    vectors = store.client.get_collection(store.collection_name).config.params.vectors
    params = vectors.get(store.vector_name) if isinstance(vectors, dict) else vectors
    return None if params is None else int(params.size)


SUPPORT = register(
    LangChainStore(
        ("langchain_qdrant.qdrant.QdrantVectorStore",),
        "langchain-qdrant QdrantVectorStore (dense)",
        _read,
        count=lambda store: int(store.client.count(store.collection_name, exact=True).count),
        dimension=_dimension,
        partitioned="QdrantVectorStore",
        add=_add,
    )
)
