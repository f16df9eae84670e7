"""A store that records which embedding model made its vectors, and an app naming another,
is refused when the app is built, before any charge, naming the parameter.

Real chromadb collections (an in-process client) record the embedding function
they were created with in their configuration; one created with a function whose
config names ``BAAI/bge-small-en-v1.5`` is opened through LangChain's Chroma and
LlamaIndex's ChromaVectorStore with an embedding object that names another model
(refused: ``embedding_function`` / ``embed_model``, nothing spent) and with one
naming the same model under another spelling (built). A collection created
without a function (chromadb records ``"default"`` then) and an embedding object
that names no model are not checked.
"""

from __future__ import annotations

import itertools
from typing import Any

import chromadb
import pytest
from chromadb.utils.embedding_functions import register_embedding_function
from langchain_core.embeddings import DeterministicFakeEmbedding
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from dprag_core.retrieval.embedding_record import chroma_recorded_model

RECORDED = "BAAI/bge-small-en-v1.5"
DIM = 8
NAMES = (f"records-{i}" for i in itertools.count())
CLIENT = chromadb.EphemeralClient()


@register_embedding_function
class RecordingFunction(chromadb.EmbeddingFunction):  # type: ignore[type-arg, misc]
    """A chromadb embedding function whose config names its model (as chromadb's own do)."""

    def __init__(self, model_name: str = RECORDED) -> None:
        self.model_name = model_name

    def __call__(self, input: list[str]) -> list[list[float]]:
        return [[1.0] * DIM for _ in input]

    @staticmethod
    def name() -> str:
        return "dprag-test-recording"

    def get_config(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> RecordingFunction:
        return RecordingFunction(config["model_name"])


class Named(DeterministicFakeEmbedding):
    """LangChain embeddings that name their model (as HuggingFaceEmbeddings' model_name)."""

    model_name: str = ""


def collection(function: Any) -> Any:
    """A new collection of one record (its vector given, so the function is never run)."""
    made = CLIENT.create_collection(next(NAMES), embedding_function=function)
    made.add(ids=["a"], documents=["a record"], embeddings=[[0.5] * DIM])
    return made


def budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(10.0, 1e-3))


def test_chroma_records_the_model_of_a_named_function_only() -> None:
    assert chroma_recorded_model(collection(RecordingFunction())) == RECORDED
    assert chroma_recorded_model(collection(None)) is None  # chromadb's "default"


def lc_chain(made: Any, model_name: str, acc: InMemoryCorpusAccountant) -> Any:
    from langchain_chroma import Chroma

    from langchain_dprag import DPRAGChain

    store = Chroma(
        client=CLIENT,
        collection_name=made.name,
        embedding_function=Named(size=DIM, model_name=model_name),
    )
    return DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=1), accountant=acc)


def test_langchain_chroma_naming_another_model_is_refused() -> None:
    made, acc = collection(RecordingFunction()), budget()
    with pytest.raises(ValueError, match=r"'BAAI/bge-small-en-v1.5'.*Fix: pass embedding_function"):
        lc_chain(made, "sentence-transformers/all-MiniLM-L6-v2", acc)
    assert acc.queries == 0 and acc.spent_epsilon == 0.0
    lc_chain(made, "bge-small-en-v1.5", acc)  # the same model, without its organisation
    lc_chain(made, "", acc)  # an embedding object that names no model: not checked
    lc_chain(collection(None), "sentence-transformers/all-MiniLM-L6-v2", acc)


def li_engine(made: Any, model_name: str, acc: InMemoryCorpusAccountant) -> Any:
    from llama_index.core import MockEmbedding, VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from llamaindex_dprag import DPQueryEngine

    embed = MockEmbedding(embed_dim=DIM, model_name=model_name)
    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=made), embed_model=embed
    )
    return DPQueryEngine.from_index(
        index,
        mechanism=ToyMechanism(k=1),
        budget=acc,
        score_direction="distance",  # Chroma's space "l2": squared distances on unit vectors
        score_range=(0.0, 4.0),
    )


def test_llamaindex_chroma_naming_another_model_is_refused() -> None:
    made, acc = collection(RecordingFunction()), budget()
    with pytest.raises(ValueError, match=r"'BAAI/bge-small-en-v1.5'.*Fix: pass embed_model"):
        li_engine(made, "text-embedding-3-small", acc)
    assert acc.queries == 0 and acc.spent_epsilon == 0.0
    li_engine(made, "baai/BGE-small-en-v1.5", acc)
    li_engine(made, "unknown", acc)  # MockEmbedding's default: names no model
    li_engine(collection(None), "text-embedding-3-small", acc)
