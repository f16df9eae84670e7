"""llama-index's ``FaissVectorStore``: its index says the metric; only flat indexes are exact.

=================  ================================================================
score              ``squared_l2`` (L2 index), ``cosine`` / ``inner_product``
                   (inner-product index, under a normalisation or not)
exact search       flat indexes only (HNSW, IVF, PQ refused); no metadata filters
cell filter        the partition's ``IndexIVFFlat``
                   (:func:`~llamaindex_dprag.cells.partitioned_faiss_store`): the
                   probed lists are scanned (``search_preassigned``)
count              ``ntotal`` of its index
=================  ================================================================

No private attribute is read: its public ``client`` is the FAISS index.

>>> SUPPORT.partitioned
'FaissVectorStore (partitioned_faiss_store)'
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from dprag_core.retrieval import cell_search, clients
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts, refusal
from llamaindex_dprag.stores import LlamaIndexStore, Query, StoreReading, own_query, register

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    if partition is not None:
        index = store.client
        problem = cell_search.faiss_partition_problem(index, partition)
        if problem is not None:
            raise refusal(f"FaissVectorStore ({type(index).__name__})", problem,
                          "build it with partitioned_faiss_store(partition)")  # fmt: skip
        cell_search.faiss_bind(index, partition)
        facts = StoreFacts("FaissVectorStore (partitioned IndexIVFFlat)", metric="cosine")
        return StoreReading(
            facts, lambda cells: _in_lists(store, cells), cell_filter=_cells, filters=False
        )
    index = clients.faiss_index(store.client)
    name = f"FaissVectorStore ({index.kind})"
    if not index.flat:
        refused = (
            f"its {index.kind} index is approximate and cannot be asked for exact results (one "
            "added document can push several others out of the top k, which the DP guarantee "
            "does not allow). Fix: FaissVectorStore(faiss_index=faiss.IndexFlatL2(dim)), or "
            "cosine_faiss_store(dim=dim) (a flat inner-product index on normalised vectors)"
        )
        return own_query(store, StoreFacts(name, refused=refused), filters=False)
    if index.unreadable is not None:  # a flat index behind a transform: declared, not read
        facts = StoreFacts(f"{name} with {index.unreadable}")
    else:
        facts = StoreFacts(name, metric=index.metric, exact=clients.FLAT_EXACT)
    return StoreReading(facts, lambda restriction: store.query, filters=False, own_query_exact=True)


def _cells(cells: Cells, q: VectorStoreQuery) -> Cells:
    return cells


def _in_lists(store: Any, cells: Cells) -> Query:
    def query(q: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        vector = np.asarray(q.query_embedding or (), dtype=np.float32)
        scores, rows = cell_search.faiss_search(
            store.client, vector, cells.cells, q.similarity_top_k
        )
        return VectorStoreQueryResult(similarities=scores.tolist(), ids=[str(i) for i in rows])

    return query


SUPPORT = register(
    LlamaIndexStore(
        ("llama_index.vector_stores.faiss.base.FaissVectorStore",),
        "FaissVectorStore (flat index)",
        _read,
        count=lambda store: int(store.client.ntotal),
        partitioned="FaissVectorStore (partitioned_faiss_store)",
    )
)
