"""dprag's own stores through the store kit (``dprag_core.testing.stores``), as a third
party's would be: one subclass per store and framework, one method that builds the store.

The kit checks what these stores' parametrized tests used to repeat per store (registered
facts, score semantics, exact ranking, ties, filters, partitioned search) and adds D vs
D + x; the store-specific attacks stay in test_lc_stores.py, test_li_stores.py,
test_lc_cells.py, test_li_cells.py and test_store_corners.py.
"""

from __future__ import annotations

import tempfile
import uuid
import warnings
from typing import Any

import pytest

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.testing.stores import LangChainStoreSuite, LlamaIndexStoreSuite


def _name() -> str:
    return f"kit{uuid.uuid4().hex[:12]}"


# -- LangChain -------------------------------------------------------------------------


class TestInMemoryVectorStore(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        from langchain_core.vectorstores import InMemoryVectorStore

        store = InMemoryVectorStore(embeddings)
        store.add_documents(documents)
        return store


class TestFAISS(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.vectorstores import FAISS

        return FAISS.from_documents(documents, embeddings, ids=[d.id for d in documents])

    def make_partitioned_store(
        self, documents: list[Any], embeddings: Any, partition: PublicPartition
    ) -> Any:
        from langchain_dprag.cells import partitioned_faiss

        return partitioned_faiss(documents, embeddings, partition, ids=[d.id for d in documents])


class TestChroma(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        import chromadb
        from langchain_chroma import Chroma

        store = Chroma(
            collection_name=_name(),
            embedding_function=embeddings,
            client=chromadb.EphemeralClient(),
            collection_configuration={"hnsw": {"space": "cosine"}},
        )
        store.add_documents(documents, ids=[d.id for d in documents])
        return store


class TestQdrantVectorStore(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client, name = QdrantClient(":memory:"), _name()
        params = models.VectorParams(size=self.dim, distance=models.Distance.EUCLID)
        client.create_collection(name, vectors_config=params)
        store = QdrantVectorStore(client, name, embeddings, distance=models.Distance.EUCLID)
        store.add_documents(documents, ids=[d.id for d in documents])
        return store


class TestLanceDB(LangChainStoreSuite):
    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        import lancedb

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.vectorstores import LanceDB

        store = LanceDB(
            connection=lancedb.connect(tempfile.mkdtemp(prefix="dprag-kit-")),
            embedding=embeddings, table_name=_name(), distance="l2", mode="append",
        )  # fmt: skip
        store.add_documents(documents, ids=[d.id for d in documents])
        return store


class TestPGVector(LangChainStoreSuite):
    @pytest.fixture(autouse=True)
    def _server(self, pg_url: str) -> None:
        self.url = pg_url

    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        from langchain_postgres import PGVector

        store = PGVector(
            embeddings, connection=self.url, collection_name=_name(),
            distance_strategy="cosine", embedding_length=self.dim, use_jsonb=True,
        )  # fmt: skip
        store.add_documents(documents, ids=[d.id for d in documents])
        return store


# -- LlamaIndex ------------------------------------------------------------------------


class TestSimpleVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        from llama_index.core.vector_stores import SimpleVectorStore

        return SimpleVectorStore()


class TestFaissVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        from llamaindex_dprag import cosine_faiss_store

        return cosine_faiss_store(dim=self.dim)

    def make_partitioned_vector_store(self, partition: PublicPartition) -> Any:
        from llamaindex_dprag.cells import partitioned_faiss_store

        return partitioned_faiss_store(partition)


class TestChromaVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        import chromadb
        from llama_index.vector_stores.chroma import ChromaVectorStore

        collection = chromadb.EphemeralClient().create_collection(
            _name(), configuration={"hnsw": {"space": "l2"}}, embedding_function=None
        )
        return ChromaVectorStore(chroma_collection=collection)


class TestLlamaQdrantVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        from llama_index.vector_stores.qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client, name = QdrantClient(":memory:"), _name()
        params = models.VectorParams(size=self.dim, distance=models.Distance.DOT)
        client.create_collection(name, vectors_config={"text-dense": params})
        return QdrantVectorStore(collection_name=name, client=client)


class TestLanceDBVectorStore(LlamaIndexStoreSuite):
    def make_vector_store(self) -> Any:
        from llama_index.vector_stores.lancedb import LanceDBVectorStore

        return LanceDBVectorStore(uri=tempfile.mkdtemp(prefix="dprag-kit-"), table_name=_name())


class TestLlamaPGVectorStore(LlamaIndexStoreSuite):
    @pytest.fixture(autouse=True)
    def _server(self, pg_url: str) -> None:
        self.url = pg_url

    def make_vector_store(self) -> Any:
        from llama_index.vector_stores.postgres import PGVectorStore

        return PGVectorStore(  # async: never used here, but it must be an async driver
            connection_string=self.url, async_connection_string=self.url,
            table_name=_name(), embed_dim=self.dim,
        )  # fmt: skip
