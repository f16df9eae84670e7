"""The partitioned search on LangChain's stores: cells written at insert, probed cells searched.

A :class:`~dprag_core.retrieval.cells.PublicPartition` gives every document the
cell of its vector when it is added, and every question a fixed number of
probed cells; the chain's or retriever's ``partition=`` then asks the store for
the exact top k among the documents of those cells only, in the store's own
exact search with its registered cell filter
(:func:`~langchain_dprag.stores.read_store`; each store's filter and the index
that serves it: its module in :mod:`langchain_dprag.registered`).

Add documents with :func:`add_documents` (it computes the cells, refuses
vectors the partition was fitted on, refuses an add that would give one
privacy unit more than the partition's public ``max_unit_records`` documents,
and creates the store's index on the cell); a document added without a cell
is never found by the partitioned search (a loss of recall, not of privacy:
what is found still depends on each document alone). Whatever the store,
what a question retrieves is the first k of one fixed ranking of the documents
in its probed cells, so one added unit is inserted into it and nothing else
moves (docs/design.md §11).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.documents import Document
>>> from dprag_core.retrieval.cells import PublicPartition
>>> partition = PublicPartition.random(dim=8, cells=4, probes=2)
>>> store = partitioned_faiss([Document("a"), Document("b")], DeterministicFakeEmbedding(size=8),
...                          partition)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval import cell_search
from dprag_core.retrieval.cells import PublicPartition, check_partition
from dprag_core.retrieval.stores import refusal
from dprag_core.retrieval.unit_records import check_added_units
from dprag_core.validation import missing_extra
from langchain_dprag.embeddings import NormalizedEmbeddings
from langchain_dprag.stores import (
    STORES,
    LangChainStore,
    StoreReading,
    read_store,
    tag_documents,
)

__all__ = ["add_documents", "partitioned_faiss", "partitioned_reading", "tag_documents"]


# -- writing ---------------------------------------------------------------------------


def partitioned_faiss(
    documents: Sequence[Document],
    embedding: Embeddings,
    partition: PublicPartition,
    *,
    ids: Sequence[str] | None = None,
    unit_key: str | None = None,
) -> Any:
    """A langchain-community ``FAISS`` store over the partition's ``IndexIVFFlat`` (cosine).

    Its embeddings are normalised (:class:`~langchain_dprag.embeddings.NormalizedEmbeddings`)
    and every later ``add_documents`` goes through the partition too. ``documents``
    are added by :func:`add_documents` (``unit_key``: the chain's, so that one unit's
    documents are bounded by the partition's ``max_unit_records``); add later ones
    the same way (the store's own ``add_documents`` assigns cells but counts no unit).
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
        add_documents(store, documents, partition, ids=ids, unit_key=unit_key)
    return store


def add_documents(
    store: VectorStore,
    documents: Sequence[Document],
    partition: PublicPartition,
    *,
    ids: Sequence[str] | None = None,
    unit_key: str | None = None,
) -> list[str]:
    """Add ``documents`` to ``store`` with their cells; the ids the store gives them.

    ``unit_key``: the metadata key that names a document's privacy unit (the
    chain's or retriever's ``unit_key``; ``None``: each document is its own
    unit). With it, every document must carry that key, and the add is
    refused (ValueError naming ``unit_key`` and the bound, nothing written)
    when a unit would then hold more than ``partition.max_unit_records``
    documents in the store: those stored already (counted by the store's
    registration, ``unit_records``: exact up to the bound) plus those given.
    The refusal depends on that unit's own documents only
    (:mod:`~dprag_core.retrieval.unit_records`).

    Each document's vector is embedded with the store's embeddings, its cell
    (:meth:`~dprag_core.retrieval.cells.PublicPartition.assign`) written to
    ``metadata["dprag_cell"]`` (FAISS: the list it goes to), after refusing
    vectors the partition was fitted on (:func:`tag_documents`). The store's
    registration adds them (``add``) and creates its index on the cell if
    missing (Qdrant server: a payload index; PGVector: a B-tree; LanceDB: a
    bitmap index, made again after each add; rows it does not cover yet are
    scanned, so the search stays exact). A LanceDB store in
    ``mode="overwrite"`` (LangChain's default) whose table exists is refused:
    its add would replace the table.
    """
    partition = check_partition(partition)
    support = STORES.lookup(store)
    if support is None or support.partitioned is None:
        raise refusal(
            type(store).__name__,
            "it is not a store dprag partitions",
            f"use one of {STORES.labels(partitioned=True)}",
        )
    docs = list(documents)
    id_list = None if ids is None else list(ids)
    if not docs:
        return []
    if unit_key is not None:
        _check_units(store, support, docs, unit_key, partition.max_unit_records)
    add = support.add if isinstance(support, LangChainStore) else None
    if add is not None:
        return add(store, docs, partition, id_list)
    tagged, _ = tag_documents(store, docs, partition)
    return list(store.add_documents(tagged, ids=id_list))


COUNT_QUESTION = "how many records does this unit hold"
"""The public text embedded as the query vector of a unit's count (any vector would do)."""


def _check_units(
    store: VectorStore, support: Any, docs: list[Document], unit_key: str, bound: int
) -> None:
    """Refuse the add if a unit would hold more than ``bound`` documents in ``store``."""
    counter = getattr(support, "unit_records", None) or _searched_records
    check_added_units(
        [d.metadata for d in docs],
        unit_key,
        bound=bound,
        stored=lambda units: counter(store, unit_key, units, bound),
        what="document",
    )


def _searched_records(
    store: VectorStore, key: str, units: Mapping[str, Any], limit: int
) -> dict[str, int]:
    """Per unit, its stored documents, by the store's exact search with its ``equals`` filter.

    One search per unit, for the first ``limit + 1``: exact up to ``limit``.
    """
    support = STORES.lookup(store)
    if support is not None and support.count is not None and support.count(store) == 0:
        return {}
    reading = read_store(store)
    if reading.search is None or reading.embed is None or reading.equals is None:
        raise refusal(
            reading.facts.store,
            "dprag cannot count one unit's documents in it",
            "register the store with unit_records (docs/new-store.md)",
        )
    vector = list(reading.embed(COUNT_QUESTION))
    equals = reading.equals
    return {
        unit: len(reading.search(equals(key, value))(vector, limit + 1))
        for unit, value in units.items()
    }


# -- reading ---------------------------------------------------------------------------


def partitioned_reading(store: VectorStore, partition: PublicPartition) -> StoreReading:
    """The registered reading of ``store``, its exact search restricted to the probed cells.

    :func:`~langchain_dprag.stores.read_store` with ``partition``: refused
    (ValueError naming the store and the fix) for a store dprag does not
    partition, and for a FAISS store whose index is not the partition's.
    """
    return read_store(store, partition)
