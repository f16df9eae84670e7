"""langchain-community's ``FAISS``: its index says the metric; only flat indexes are exact.

=================  ================================================================
score              ``squared_l2`` (L2 index), ``cosine`` (inner-product index on
                   unit-norm vectors) or ``inner_product``: the index's
                   ``metric_type``, read under ID maps and a normalisation
exact search       flat indexes only (``IndexFlat*``); HNSW, IVF, PQ, LSH refused.
                   A filter (a dict or a callable on the metadata) is applied to
                   the whole flat ranking (``fetch_k`` = N)
cell filter        the partition's ``IndexIVFFlat`` (made by
                   :func:`~langchain_dprag.cells.partitioned_faiss`): the probed
                   lists are scanned (``search_preassigned``)
count, dimension   ``index.ntotal``, ``index.d``
unit's records     its docstore's documents, read through ``index_to_docstore_id``
=================  ================================================================

Private attributes read: ``_embed_query`` (FAISS's own embedding of a
question, which normalises it when the store was made with
``normalize_L2=True``) and ``_normalize_L2`` (whether it does).

>>> SUPPORT.label
'FAISS (langchain-community, flat index)'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from langchain_core.documents import Document

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts, refusal
from langchain_dprag.embeddings import NormalizedEmbeddings
from langchain_dprag.stores import (
    LangChainStore,
    StoreReading,
    VectorSearch,
    own_reading,
    register,
)

__all__ = ["SUPPORT", "bind"]


def _unit_norm(store: Any) -> bool:
    return bool(getattr(store, "_normalize_L2", False)) or isinstance(
        store.embeddings, NormalizedEmbeddings
    )


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    if partition is not None:
        bind(store, partition)
        facts = StoreFacts("FAISS (partitioned IndexIVFFlat)", metric="cosine")
        return StoreReading(
            facts, embed=store._embed_query, search=partial(_search, store), cell_filter=_lists
        )
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
        return own_reading(store, StoreFacts(name, refused=refused))
    if index.unreadable is not None:  # a flat index behind a transform: declared, not read
        facts = StoreFacts(f"{name} with {index.unreadable}")
        return StoreReading(
            facts, embed=store._embed_query, search=partial(_search, store), own_search_exact=True
        )
    facts = StoreFacts(name, metric=index.metric, exact=clients.FLAT_EXACT)
    return StoreReading(
        facts,
        embed=store._embed_query,
        search=partial(_search, store),
        equals=lambda key, value: {key: value},
        own_search_exact=True,
    )


def _lists(cells: Cells) -> Cells:
    return cells  # the partition's index: its lists are the cells


def _search(store: Any, filter: Any) -> VectorSearch:
    if isinstance(filter, Cells):
        return partial(_in_lists, store, filter)

    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        if filter is None:
            return store.similarity_search_with_score_by_vector(list(vector), k)  # type: ignore[no-any-return]
        # the whole flat ranking, then the filter: its own search filters its first
        # fetch_k only (20 by default), which is not the top k of the filtered documents
        every = max(k, int(store.index.ntotal))
        found: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            list(vector), k, filter=filter, fetch_k=every
        )
        return found

    return search


def _in_lists(
    store: Any, cells: Cells, vector: Sequence[float], k: int
) -> list[tuple[Document, float]]:
    query = np.asarray(vector, dtype=np.float32)
    scores, rows = cell_search.faiss_search(store.index, query, cells.cells, k)
    out = []
    for score, row in zip(scores.tolist(), rows.tolist(), strict=True):
        found = store.docstore.search(store.index_to_docstore_id[row])
        out.append((found if isinstance(found, Document) else Document(""), score))
    return out


def bind(store: Any, partition: PublicPartition) -> None:
    """Refuse a FAISS store whose index is not the partition's; make its adds the partition's."""
    problem = cell_search.faiss_partition_problem(store.index, partition)
    if problem is not None:
        raise refusal(
            f"FAISS ({type(store.index).__name__})",
            problem,
            "build it with partitioned_faiss(documents, embeddings, partition)",
        )
    cell_search.faiss_bind(store.index, partition)


def _add(
    store: Any, documents: list[Document], partition: PublicPartition, ids: list[str] | None
) -> list[str]:
    """The partition's index assigns each vector its list: no tag in the metadata."""
    bind(store, partition)
    return list(store.add_documents(documents, ids=ids))


def _unit_records(store: Any, key: str, units: Mapping[str, Any], limit: int) -> Mapping[str, int]:
    """Per unit, how many of its documents have it in ``metadata[key]`` (one docstore pass)."""
    found: Counter[str] = Counter()
    for stored in store.index_to_docstore_id.values():
        doc = store.docstore.search(stored)
        value = doc.metadata.get(key) if isinstance(doc, Document) else None
        if value is not None and str(value) in units:
            found[str(value)] += 1
    return found


SUPPORT = register(
    LangChainStore(
        ("langchain_community.vectorstores.faiss.FAISS",),
        "FAISS (langchain-community, flat index)",
        _read,
        count=lambda store: int(store.index.ntotal),
        dimension=lambda store: int(store.index.d),
        partitioned="FAISS (partitioned_faiss)",
        add=_add,
        unit_records=_unit_records,
    )
)
