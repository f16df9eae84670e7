"""An empty store is refused when the app is built, with a clear error, before any charge.

The check runs once, at build time (``refuse_empty`` says why that is public): the
core PrivateRAG over an empty FaissCorpus, LangChain's DPRAGChain and DPRetriever
over an empty InMemoryVectorStore, LlamaIndex's DPQueryEngine over an empty
SimpleVectorStore and an empty FAISS store. The same apps over one record build.
"""

from __future__ import annotations

import numpy as np
import pytest
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.faiss_corpus import FaissCorpus

EMPTY = "it holds no vector"


def budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(10.0, 1e-3))


def test_core_private_rag() -> None:
    corpus = FaissCorpus(dim=2)
    retriever = corpus.as_retriever(lambda q: np.array([1.0, 0.0]))
    acc = budget()
    with pytest.raises(ValueError, match=f"FaissRetriever: {EMPTY}.*Fix: add the documents"):
        PrivateRAG(ToyMechanism(k=3), retriever, accountant=acc)
    assert acc.queries == 0 and acc.spent_epsilon == 0.0
    corpus.add(["a"], ["x"], np.array([[1.0, 0.0]]))
    PrivateRAG(ToyMechanism(k=3), retriever, accountant=acc)


def test_langchain_chain_and_retriever() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_dprag import DPRAGChain, DPRetriever

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    acc = budget()
    with pytest.raises(ValueError, match=f"InMemoryVectorStore.*{EMPTY}"):
        DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=acc)
    with pytest.raises(ValueError, match=EMPTY):
        DPRetriever(vectorstore=store, epsilon=1.0, accountant=acc, k=4)
    assert acc.queries == 0 and acc.spent_epsilon == 0.0
    store.add_texts(["a record"])
    DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=acc)


@pytest.mark.parametrize("kind", ["simple", "faiss"])
def test_llamaindex_engine(kind: str) -> None:
    from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex
    from llama_index.core.schema import TextNode

    from llamaindex_dprag import DPQueryEngine
    from llamaindex_dprag.vector_stores import cosine_faiss_store

    def index(nodes: list[TextNode]) -> VectorStoreIndex:
        store = cosine_faiss_store(dim=8) if kind == "faiss" else None
        storage = StorageContext.from_defaults(vector_store=store)
        return VectorStoreIndex(
            nodes=nodes, storage_context=storage, embed_model=MockEmbedding(embed_dim=8)
        )

    acc = budget()
    with pytest.raises(ValueError, match=EMPTY):
        DPQueryEngine.from_index(index([]), mechanism=ToyMechanism(k=3), budget=acc)
    assert acc.queries == 0 and acc.spent_epsilon == 0.0
    DPQueryEngine.from_index(
        index([TextNode(text="a record")]), mechanism=ToyMechanism(k=3), budget=acc
    )
