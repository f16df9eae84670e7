"""A store written outside dprag: defined, registered and tested here, as a third party would.

``ListStore`` (a LangChain ``VectorStore``) and ``ListVectorStore`` (a LlamaIndex
vector store) keep their vectors in a numpy scan of their own. Each is registered
from this module (one ``register`` call per framework, nothing changed in dprag) and
passes the store kit by subclassing it; the chain's and the query engine's store
read (``open_store``, ``IndexSource``) accept them. The kit can fail: a store
registered with the wrong metric fails its score-semantics check, one whose search
skips a document fails the exact ranking, and one whose ranking depends on the other
stored documents fails D vs D + x.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterOperator,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.registry import Cells, class_path
from dprag_core.retrieval.stores import StoreFacts
from dprag_core.testing.stores import LangChainStoreSuite, LlamaIndexStoreSuite
from langchain_dprag import stores as lc
from llamaindex_dprag import stores as li

# -- the stores: one numpy scan, two framework faces ---------------------------------------


class Scan:
    """Rows of (id, text, metadata, vector); the exact squared-L2 ranking of a query."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, dict[str, Any], np.ndarray]] = []

    def add(self, ident: str, text: str, metadata: dict[str, Any], vector: Sequence[float]) -> None:
        self.rows.append((ident, text, dict(metadata), np.asarray(vector, dtype=np.float64)))

    def first(
        self, vector: Sequence[float], k: int, keep: Callable[[dict[str, Any]], bool]
    ) -> list[tuple[str, str, dict[str, Any], float]]:
        q = np.asarray(vector, dtype=np.float64)
        rows = [r for r in self.rows if keep(r[2])]
        scored = [(i, t, m, float(np.sum((v - q) ** 2))) for i, t, m, v in rows]
        return sorted(scored, key=lambda r: (r[3], r[0]))[:k]


def _keep(where: dict[str, Iterable[Any]] | None) -> Callable[[dict[str, Any]], bool]:
    """``{key: allowed values}``: the stores' own filter format."""
    wanted = {key: set(values) for key, values in (where or {}).items()}
    return lambda meta: all(meta.get(key) in values for key, values in wanted.items())


class ListStore(VectorStore):
    """A LangChain store over a :class:`Scan` (squared L2 distances)."""

    def __init__(self, embedding: Embeddings) -> None:
        self.embedding, self.scan = embedding, Scan()

    @property
    def embeddings(self) -> Embeddings:
        return self.embedding

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        ids = ids or [f"id{len(self.scan.rows) + i}" for i in range(len(texts))]
        for ident, text, meta, vector in zip(
            ids, texts, metadatas, self.embedding.embed_documents(texts), strict=True
        ):
            self.scan.add(ident, text, meta, vector)
        return ids

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, filter: Any = None
    ) -> list[tuple[Document, float]]:
        found = self.scan.first(embedding, k, _keep(filter))
        return [(Document(page_content=t, metadata=m, id=i), s) for i, t, m, s in found]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        vector = self.embedding.embed_query(query)
        return self.similarity_search_with_score_by_vector(vector, k, kwargs.get("filter"))

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, **kwargs)]

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ListStore:
        store = cls(embedding)
        store.add_texts(texts, metadatas, **kwargs)
        return store


class ListVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over a :class:`Scan` (squared L2 distances)."""

    stores_text: bool = True
    _scan: Scan = PrivateAttr(default_factory=Scan)

    @property
    def client(self) -> Scan:
        return self._scan

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        for node in nodes:
            self._scan.add(node.node_id, node.get_content(), node.metadata, node.get_embedding())
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        raise NotImplementedError

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        where = kwargs.get("where") if query.filters is None else _where(query.filters)
        found = self._scan.first(query.query_embedding or [], query.similarity_top_k, _keep(where))
        return VectorStoreQueryResult(
            nodes=[TextNode(id_=i, text=t, metadata=m) for i, t, m, _ in found],
            similarities=[s for *_, s in found],
            ids=[i for i, *_ in found],
        )


def _where(filters: MetadataFilters) -> dict[str, list[Any]]:
    """LlamaIndex's ``==`` and ``in`` filters, all of them (AND), as the scan's format."""
    out: dict[str, list[Any]] = {}
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            out.update(_where(f))
        elif f.operator == FilterOperator.IN:
            out[f.key] = list(f.value)  # type: ignore[arg-type]
        else:
            out[f.key] = [f.value]
    return out


# -- the registrations: what a third party's integration module holds ------------------------


def _lc_read(
    store: ListStore, partition: PublicPartition | None, *, metric: str
) -> lc.StoreReading:
    facts = StoreFacts("ListStore", metric=metric, exact="brute force (a numpy scan)")
    return lc.StoreReading(
        facts,
        embed=store.embeddings.embed_query,
        search=lambda where: partial(_lc_search, store, where),
        cell_filter=lambda cells: {cells.key: list(cells.cells)},
        equals=lambda key, value: {key: [value]},
    )


def _lc_search(
    store: ListStore, where: Any, vector: Sequence[float], k: int
) -> list[tuple[Document, float]]:
    return store.similarity_search_with_score_by_vector(vector, k, where)


def _li_read(store: ListVectorStore, partition: PublicPartition | None) -> li.StoreReading:
    facts = StoreFacts("ListVectorStore", metric="squared_l2", exact="brute force (a numpy scan)")
    return li.StoreReading(
        facts,
        lambda restriction: lambda q, **kw: store.query(li.narrowed(q, restriction), **kw),
        cell_filter=li.metadata_cells,
    )


LC_SUPPORT = lc.register(
    lc.LangChainStore(
        (class_path(ListStore),),
        "ListStore (tests)",
        partial(_lc_read, metric="squared_l2"),
        count=lambda store: len(store.scan.rows),
        partitioned="ListStore",
    )
)
LI_SUPPORT = li.register(
    li.LlamaIndexStore(
        (class_path(ListVectorStore),),
        "ListVectorStore (tests)",
        _li_read,
        count=lambda store: len(store.client.rows),
        partitioned="ListVectorStore",
    )
)


# -- the kit, subclassed -------------------------------------------------------------------


class TestListStore(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        store = ListStore(embeddings)
        store.add_documents(documents, ids=[d.id for d in documents])
        return store


class TestListVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        return ListVectorStore()


def test_both_frameworks_accept_it_and_list_it() -> None:
    assert lc.STORES.lookup(ListStore(TestListStore().embeddings([]))) is LC_SUPPORT
    assert li.STORES.lookup(ListVectorStore()) is LI_SUPPORT
    assert "ListStore (tests)" in lc.STORES.labels()
    assert "ListVectorStore" in li.STORES.labels(partitioned=True)


# -- the kit fails stores that break what it checks ----------------------------------------


class WrongMetricStore(ListStore):
    """Registered as cosine similarities while it returns squared L2 distances."""


class SkippingStore(ListStore):
    """Its search skips the best document (an approximate index missing a neighbour)."""

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, filter: Any = None
    ) -> list[tuple[Document, float]]:
        return super().similarity_search_with_score_by_vector(embedding, k + 1, filter)[1:]


class CrowdedStore(ListStore):
    """Its scores are shifted by the number of stored documents: one added document moves all.

    Squared L2 plus a ranking penalty that depends on each document's index among
    the stored ones: adding x changes which documents come first.
    """

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, filter: Any = None
    ) -> list[tuple[Document, float]]:
        every = super().similarity_search_with_score_by_vector(
            embedding, len(self.scan.rows), filter
        )
        n = len(self.scan.rows)
        shifted = [(d, s + (0.5 if (hash(d.id) + n) % 2 else 0.0)) for d, s in every]
        return sorted(shifted, key=lambda pair: pair[1])[:k]


for broken, metric in ((WrongMetricStore, "cosine"), (SkippingStore, "squared_l2"),
                       (CrowdedStore, "squared_l2")):  # fmt: skip
    lc.register(
        lc.LangChainStore(
            (class_path(broken),),
            broken.__name__,
            partial(_lc_read, metric=metric),
            count=lambda store: len(store.scan.rows),
            partitioned=broken.__name__,
        )
    )


def _suite(cls: type[ListStore]) -> LangChainStoreSuite:
    class Broken(LangChainStoreSuite):
        def make_store(self, documents: list[Any], embeddings: Any) -> Any:
            store = cls(embeddings)
            store.add_documents(documents, ids=[d.id for d in documents])
            return store

    return Broken()


@pytest.mark.parametrize(
    ("cls", "check"),
    [
        (WrongMetricStore, "test_score_semantics"),
        (SkippingStore, "test_exact_ranking"),
        (SkippingStore, "test_partitioned_search"),
        (CrowdedStore, "test_d_vs_d_plus_x"),
    ],
)
def test_the_kit_fails_a_broken_store(cls: type[ListStore], check: str) -> None:
    suite = _suite(cls)
    with pytest.raises(AssertionError):
        getattr(suite, check)()


def test_the_kit_passes_the_same_checks_on_the_sound_store() -> None:
    suite = _suite(ListStore)
    for check in ("test_score_semantics", "test_exact_ranking", "test_partitioned_search",
                  "test_d_vs_d_plus_x"):  # fmt: skip
        getattr(suite, check)()


def test_an_unregistered_subclass_is_not_read_as_its_base() -> None:
    class Mine(ListStore):
        pass

    assert lc.STORES.lookup(Mine(TestListStore().embeddings([]))) is None
    assert isinstance(Cells((1,)), Cells)
