"""The LangChain store registry: each vector store's registered reading, and the one lookup.

Every LangChain entry point (``DPRAGChain(vectorstore=...)``,
``retriever=store.as_retriever(...)``, ``DPRetriever``, ``partition=``) reads a
store through :func:`read_store`, which looks its class up in :data:`STORES`
(a :class:`~dprag_core.retrieval.registry.StoreRegistry`) and calls the
registration's ``read(store, partition)``. That returns a :class:`StoreReading`:
the :class:`~dprag_core.retrieval.stores.StoreFacts` (which metric its raw
scores are, how its results are exact, or what is refused and the fix), how
to embed a question (``embed``), **the exact search** (``search(filter)``: the
store's exact top k for a query vector among the documents ``filter``
selects, in the store's own filter format, with raw scores, best first), the
**cell filter** (``cell_filter(cells)``: the store's own filter keeping a
public partition's probed cells) and ``equals`` (the store's filter for
``metadata[key] == value``).

A partitioned search is that same exact search with the cell filter of each
question's probed cells (:func:`read_store` with ``partition=``): no store
writes a second searcher. The stores dprag registers itself, one module each,
are in :mod:`langchain_dprag.registered` (each module's docstring says what its
scores are, how its search is exact and how its cells are filtered); a store of
your own is one module that calls :func:`register` (docs/new-store.md).

A class that is not registered has no facts, and the adapters refuse it unless
the user declares the score function and ``exact_search=True`` (a filter is
then passed to its ``similarity_search_with_score(question, k, filter=...)``,
under the same declaration). Registrations match exact classes unless they
say ``subclasses=True`` (a subclass may override the search).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> read_store(InMemoryVectorStore(DeterministicFakeEmbedding(size=4))).facts.metric
'cosine'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval.cell_search import partitioned_exact
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition, check_partition
from dprag_core.retrieval.registry import Cells, StoreRegistry, StoreSupport
from dprag_core.retrieval.stores import StoreFacts, refusal

__all__ = [
    "STORES",
    "LangChainStore",
    "Search",
    "StoreReading",
    "UnitCounter",
    "VectorSearch",
    "read_store",
    "register",
    "tag_documents",
]

Search = Callable[[str, int], list[tuple[Document, float]]]
"""``search(question, k)``: the store's first k for the question with raw scores, best first."""

VectorSearch = Callable[[Sequence[float], int], list[tuple[Document, float]]]
"""``search(vector, k)``: the store's exact first k for a query vector, raw scores, best first."""

Adder = Callable[[Any, list[Document], PublicPartition, "list[str] | None"], list[str]]
"""``add(store, documents, partition, ids)``: add documents with their cells, their ids."""

UnitCounter = Callable[[Any, str, Mapping[str, Any], int], Mapping[str, int]]
"""``records(store, key, units, limit)``: per unit (``str`` of its ``metadata[key]``, mapped to
one raw value of it), how many stored documents it has, exact up to ``limit`` (a count above
``limit`` may read as ``limit + 1``)."""


@dataclass(frozen=True)
class StoreReading:
    """One store object as its registration reads it: facts, exact search, cell filter.

    ``embed(question)``: the query vector (the store's embeddings);
    ``search(filter)``: the exact search by vector among the documents
    ``filter`` selects (``None``: all); together they are :meth:`searcher`.
    ``own``: the store's ``similarity_search_with_score``, used only where
    ``search`` is None (a refused or declared store: refused or declared
    when the app is built). ``cell_filter(cells)``: the store's filter for
    the documents of :class:`~dprag_core.retrieval.registry.Cells` (``None``:
    not partitioned); ``equals(key, value)``: its filter for
    ``metadata[key] == value``. ``own_search_exact``: whether the store's *own*
    ``similarity_search`` (what a retriever of the user's calls) is exact too
    (brute force, a flat index); False where only dprag's search is.
    """

    facts: StoreFacts
    embed: Callable[[str], Sequence[float]] | None = None
    search: Callable[[Any], VectorSearch] | None = None
    own: Callable[..., list[tuple[Document, float]]] | None = None
    cell_filter: Callable[[Cells], Any] | None = None
    equals: Callable[[str, Any], Any] | None = field(default=None)
    own_search_exact: bool = False

    def searcher(self, filter: Any = None) -> Search:
        """``search(question, k)`` for one query, exact among the documents ``filter`` selects.

        The question is embedded once per searcher (one searcher per query).
        """
        if self.search is None or self.embed is None:
            if self.own is None:
                raise ValueError(f"{self.facts.store}: no search")
            return partial(self.own, filter=filter) if filter is not None else self.own
        by_vector, embed = self.search(filter), self.embed
        vectors: dict[str, Sequence[float]] = {}

        def search(question: str, k: int) -> list[tuple[Document, float]]:
            if question not in vectors:
                vectors.clear()
                vectors[question] = list(embed(question))
            return by_vector(vectors[question], k)

        return search


@dataclass(frozen=True)
class LangChainStore(StoreSupport[StoreReading]):
    """A LangChain store's registration: :class:`~dprag_core.retrieval.registry.StoreSupport`
    plus ``add``, how :func:`~langchain_dprag.cells.add_documents` adds documents with their
    cells (``None``: the documents tagged with ``metadata["dprag_cell"]``, then the store's
    ``add_documents``), and ``unit_records``, how it counts the stored documents of the
    units an add names (:data:`UnitCounter`; ``None``: the registration's exact search with
    its ``equals`` filter, first ``limit + 1`` per unit)."""

    add: Adder | None = None
    unit_records: UnitCounter | None = None


STORES: StoreRegistry[StoreReading] = StoreRegistry(
    "langchain",
    builtins=tuple(
        f"langchain_dprag.registered.{name}"
        for name in (
            "in_memory",
            "faiss",
            "chroma",
            "pgvector",
            "pgvector_v2",
            "qdrant",
            "lancedb",
            "milvus",
        )
    ),
)
"""The LangChain registrations (dprag's own are imported on first use)."""

register = STORES.register
"""Register a :class:`LangChainStore` (its classes must not be registered yet); returns it."""


def own_reading(store: Any, facts: StoreFacts) -> StoreReading:
    """A reading with no exact search of dprag's: ``facts`` and the store's own search."""
    return StoreReading(facts, own=store.similarity_search_with_score)


def read_store(store: VectorStore, partition: PublicPartition | None = None) -> StoreReading:
    """The registered reading of ``store``; no facts for an unregistered class.

    With ``partition``: the exact search restricted to each question's probed
    cells (the registration's cell filter); refused (ValueError naming the
    store and the fix) for a store whose search cannot be restricted to cells.
    """
    support = STORES.lookup(store)
    if partition is None:
        if support is None:  # a declared store: its own search, the filter passed as it is
            return own_reading(store, StoreFacts(type(store).__name__))
        return support.read(store, None)
    partition = check_partition(partition)
    if support is None or support.partitioned is None:
        raise refusal(
            type(store).__name__,
            "dprag cannot search its cells",
            f"use one of {STORES.labels(partitioned=True)}",
        )
    reading = support.read(store, partition)
    facts = reading.facts
    if facts.refused is not None or facts.metric is None:  # open_store says why
        return reading
    if reading.search is None or reading.embed is None or reading.cell_filter is None:
        raise ValueError(f"{facts.store}: its registration has no cell filter")
    facts = StoreFacts(
        f"{facts.store}, partitioned", metric=facts.metric, exact=partitioned_exact(partition)
    )
    cells = partial(_in_cells, reading.search, reading.cell_filter, partition)
    return StoreReading(facts, embed=reading.embed, search=cells)


def _in_cells(
    search: Callable[[Any], VectorSearch],
    cell_filter: Callable[[Cells], Any],
    partition: PublicPartition,
    filter: Any,
) -> VectorSearch:
    """The exact search with the cell filter of the query's probed cells (no other filter)."""
    if filter is not None:
        raise ValueError("partition= searches without filter")
    searches: dict[Cells, VectorSearch] = {}

    def first(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        cells = Cells(partition.probe(vector))
        if cells not in searches:  # one question per search: a full scan ranks once
            searches.clear()
            searches[cells] = search(cell_filter(cells))
        return searches[cells](vector, k)

    return first


def tag_documents(
    store: Any, documents: Sequence[Document], partition: PublicPartition
) -> tuple[list[Document], npt.NDArray[np.float64]]:
    """``documents`` with their cell in ``metadata["dprag_cell"]``, and their vectors.

    Each is embedded with the store's embeddings; refused (ValueError, nothing
    tagged) when a vector is among the partition's training vectors.
    """
    embeddings = getattr(store, "embeddings", None)
    if embeddings is None:
        raise refusal(type(store).__name__, "it has no embeddings", "give the store its embeddings")
    texts = [d.page_content for d in documents]
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float64)
    partition.refuse_training(vectors)
    tagged = [
        Document(page_content=d.page_content, metadata={**d.metadata, CELL_KEY: int(c)}, id=d.id)
        for d, c in zip(documents, partition.assign(vectors), strict=True)
    ]
    return tagged, vectors
