"""The LangChain Runnable and LlamaIndex query engine over a released DP datastore."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from llama_index.core.base.embeddings.base import BaseEmbedding

from dprag_core.datastore import DPSimHashDatastore, embedding_keys
from langchain_dprag.datastore import DPDatastoreClassifier
from llamaindex_dprag.datastore import DPDatastoreQueryEngine

TEXTS = ["heart valve artery pulse"] * 40 + ["skin rash itch mole"] * 40


def _vector(text: str) -> list[float]:
    out = np.zeros(32)
    for word in text.split():
        out[zlib.crc32(word.encode()) % 32] += 1.0
    return out.tolist()


class BagOfWords(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return _vector(text)


class LlamaBagOfWords(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return _vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return _vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return _vector(query)


@pytest.fixture(scope="module")
def store() -> DPSimHashDatastore:
    keys = embedding_keys(BagOfWords().embed_documents, TEXTS)
    labels = np.array([0] * 40 + [1] * 40)
    return DPSimHashDatastore.release(
        keys, labels, num_classes=2, epsilon=4.0, tables=8, bits=3, rng=0
    )


def test_langchain_runnable_classifies(store: DPSimHashDatastore) -> None:
    clf = DPDatastoreClassifier(store=store, embeddings=BagOfWords(), labels=["cardio", "derma"])
    out = clf.invoke("rash on the skin")
    assert out["label"] == "derma" and out["epsilon"] == 4.0
    assert [o["label"] for o in clf.batch(["artery pulse", "itch mole"])] == ["cardio", "derma"]


def test_langchain_runnable_refuses_non_private_store() -> None:
    keys = embedding_keys(BagOfWords().embed_documents, TEXTS)
    exact = DPSimHashDatastore.non_private(keys, np.array([0] * 40 + [1] * 40), num_classes=2)
    with pytest.raises(ValueError, match="store"):
        DPDatastoreClassifier(store=exact, embeddings=BagOfWords(), labels=["a", "b"])


def test_llamaindex_query_engine_classifies(store: DPSimHashDatastore) -> None:
    engine = DPDatastoreQueryEngine(store=store, embed_model=LlamaBagOfWords(), labels=["c", "d"])
    response = engine.query("valve heart")
    assert str(response) == "c"
    assert response.metadata is not None and response.metadata["epsilon"] == 4.0
    assert response.source_nodes == []
    assert engine.classify(["itch skin", "pulse artery"]) == ["d", "c"]
    with pytest.raises(ValueError, match="labels"):
        DPDatastoreQueryEngine(store=store, embed_model=LlamaBagOfWords(), labels=["x"])
