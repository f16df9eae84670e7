"""langchain-core's ``InMemoryVectorStore``: cosine similarities, its own brute force.

=================  ================================================================
score              ``cosine`` (higher = closer)
exact search       its own brute force (every stored vector scored); a filter is a
                   ``Callable[[Document], bool]`` applied before ranking
cell filter        ``metadata["dprag_cell"] in cells``, a callable filter
count, dimension   its ``store`` dict (the documented attribute that holds the records)
=================  ================================================================

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
>>> SUPPORT.read(store, None).facts.exact
'brute force (every stored vector scored)'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from langchain_core.documents import Document

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.registry import Cells
from dprag_core.retrieval.stores import StoreFacts
from langchain_dprag.stores import LangChainStore, StoreReading, VectorSearch, register

__all__ = ["SUPPORT"]


def _read(store: Any, partition: PublicPartition | None) -> StoreReading:
    facts = StoreFacts(
        "InMemoryVectorStore", metric="cosine", exact="brute force (every stored vector scored)"
    )
    return StoreReading(
        facts,
        embed=store.embedding.embed_query,
        search=partial(_search, store),
        cell_filter=_in_cells,
        equals=_equals,
        own_search_exact=True,
    )


def _search(store: Any, filter: Any) -> VectorSearch:
    def search(vector: Sequence[float], k: int) -> list[tuple[Document, float]]:
        found: list[tuple[Document, float]] = store.similarity_search_with_score_by_vector(
            list(vector), k=k, filter=filter
        )
        return found

    return search


def _in_cells(cells: Cells) -> Callable[[Document], bool]:
    wanted = set(cells.cells)
    return lambda doc: doc.metadata.get(cells.key) in wanted


def _equals(key: str, value: Any) -> Callable[[Document], bool]:
    return lambda doc: bool(doc.metadata.get(key) == value)


def _dimension(store: Any) -> int | None:
    first = next(iter(store.store.values()), None)
    return None if first is None else len(first["vector"])


SUPPORT = register(
    LangChainStore(
        ("langchain_core.vectorstores.in_memory.InMemoryVectorStore",),
        "InMemoryVectorStore",
        _read,
        count=lambda store: len(store.store),
        dimension=_dimension,
        partitioned="InMemoryVectorStore",
    )
)
