"""Real stores of both frameworks, filled through dprag's partition helpers (tests/cell_cases.py).

Rows carry their own vectors (an embeddings table keyed by text; the question
``"Q"`` embeds as the case's query vector), documents their unit in metadata
``ref``. ``LC_CELL_KINDS`` / ``LI_CELL_KINDS``: one configuration per store.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from cell_cases import DIM, QUERY, QUESTION, Row
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from store_cases import MILVUS_METRICS, QDRANT_DISTANCES, li_vector_store

from dprag_core.retrieval.cells import PublicPartition

LC_CELL_KINDS = (
    "inmemory",
    "faiss",
    "chroma_cosine",
    "pgvector_cosine",
    "qdrant_cosine",
    "lancedb_l2",
    "milvus_cosine",
)
LI_CELL_KINDS = (
    "simple",
    "faiss",
    "chroma_cosine",
    "pgvector",
    "qdrant_cosine",
    "lancedb_l2",
    "milvus_cosine",
)


class RowEmbeddings(Embeddings):
    """Each row's text embeds as its vector; the question as ``query``."""

    def __init__(self, rows: Sequence[Row], query: Sequence[float] = QUERY) -> None:
        self.table = {r.text: list(r.vector) for r in rows}
        self.table[QUESTION] = list(query)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table.get(t, [1.0] + [0.0] * (DIM - 1)) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table.get(text, [1.0] + [0.0] * (DIM - 1))


def lc_cell_store(
    kind: str,
    rows: Sequence[Row],
    partition: PublicPartition,
    pg_url: str | None = None,
    query: Sequence[float] = QUERY,
) -> Any:
    """A LangChain store of ``kind`` holding ``rows``, added with their cells."""
    from langchain_dprag.cells import add_documents, partitioned_faiss

    emb = RowEmbeddings(rows, query)
    docs = [
        Document(page_content=r.text, metadata={"ref": r.unit}, id=str(uuid.uuid4())) for r in rows
    ]
    if kind == "faiss":
        return partitioned_faiss(docs, emb, partition)
    store = lc_empty(kind, emb, pg_url)
    add_documents(store, docs, partition)
    return store


def lc_empty(
    kind: str, emb: Embeddings, pg_url: str | None = None, lance_mode: str = "append"
) -> Any:
    """An empty LangChain store of ``kind`` with embeddings ``emb`` (LanceDB: ``lance_mode``)."""
    store, _, metric = kind.partition("_")
    name = f"c{uuid.uuid4().hex[:12]}"
    if store == "inmemory":
        from langchain_core.vectorstores import InMemoryVectorStore

        return InMemoryVectorStore(emb)
    if store == "chroma":
        import chromadb
        from langchain_chroma import Chroma

        return Chroma(
            collection_name=name,
            embedding_function=emb,
            client=chromadb.EphemeralClient(),
            collection_configuration={"hnsw": {"space": metric}},
        )
    if store == "pgvector":
        from langchain_postgres import PGVector

        return PGVector(
            emb,
            connection=pg_url,
            collection_name=name,
            distance_strategy=metric,
            embedding_length=DIM,
            use_jsonb=True,
        )
    if store == "qdrant":
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client = QdrantClient(":memory:")
        distance = models.Distance(QDRANT_DISTANCES[metric])
        client.create_collection(
            name, vectors_config=models.VectorParams(size=DIM, distance=distance)
        )
        return QdrantVectorStore(client, name, emb, distance=distance)
    if store == "lancedb":
        import tempfile
        import warnings

        import lancedb

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.vectorstores import LanceDB

        return LanceDB(
            connection=lancedb.connect(tempfile.mkdtemp(prefix="dprag-lance-")),
            embedding=emb,
            table_name=name,
            distance=metric,
            mode=lance_mode,
        )
    if store == "milvus":
        import tempfile
        from pathlib import Path

        from milvus_stores import lc_milvus

        folder = Path(tempfile.mkdtemp(prefix="dprag-milvus-"))
        return lc_milvus(folder, emb, metric=MILVUS_METRICS[metric])
    raise ValueError(kind)


def li_query_embedding(query: Sequence[float]) -> Any:
    """A LlamaIndex embedding model that embeds every query as ``query``."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class Fixed(BaseEmbedding):
        def _get_query_embedding(self, text: str) -> list[float]:
            return list(query)

        async def _aget_query_embedding(self, text: str) -> list[float]:
            return list(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return [1.0] + [0.0] * (DIM - 1)

    return Fixed(model_name="fixed")


def li_cell_index(
    kind: str,
    rows: Sequence[Row],
    partition: PublicPartition,
    pg_url: str | None = None,
    query: Sequence[float] = QUERY,
) -> Any:
    """A LlamaIndex ``VectorStoreIndex`` of ``kind`` over ``rows``, nodes tagged with cells."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llamaindex_dprag.cells import partitioned_faiss_store, tag_nodes

    nodes = li_nodes(rows)
    if kind == "faiss":
        vector_store = partitioned_faiss_store(partition)
    else:
        vector_store = li_vector_store(kind, pg_url)
    storage = StorageContext.from_defaults(vector_store=vector_store)
    index = VectorStoreIndex(
        tag_nodes(nodes, partition), storage_context=storage, embed_model=li_query_embedding(query)
    )
    return index


def li_nodes(rows: Sequence[Row]) -> list[Any]:
    """LlamaIndex ``TextNode`` s of ``rows``: their text, unit (``ref``) and vector."""
    from llama_index.core.schema import TextNode

    return [
        TextNode(
            id_=str(uuid.uuid5(uuid.NAMESPACE_URL, r.id)),
            text=r.text,
            metadata={"ref": r.unit},
            embedding=list(r.vector),
        )
        for r in rows
    ]


def brute_force_in_cells(
    rows: Sequence[Row], partition: PublicPartition, k: int, query: Sequence[float] = QUERY
) -> list[str]:
    """The ids of the exact top k by cosine among the rows of the query's probed cells."""
    cells = set(partition.probe(np.asarray(query)))
    vectors = np.array([r.vector for r in rows])
    inside = [r for r, c in zip(rows, partition.assign(vectors), strict=True) if c in cells]
    cos = {
        r.id: float(np.asarray(r.vector) @ np.asarray(query)) / float(np.linalg.norm(r.vector))
        for r in inside
    }
    return sorted(cos, key=lambda i: (-cos[i], i))[:k]


def record_selections(monkeypatch: Any) -> list[list[Any]]:
    """Record the candidates every ``DPThreshold.select`` is given (the DP threshold's input)."""
    from dprag_core.retrieval.threshold import DPThreshold

    seen: list[list[Any]] = []
    select = DPThreshold.select

    def recording(self: DPThreshold, docs: Any, *, rng: Any = None) -> Any:
        seen.append(list(docs))
        return select(self, docs, rng=rng)

    monkeypatch.setattr(DPThreshold, "select", recording)
    return seen


def audit_selections(selections: Sequence[list[Any]], seed: int) -> float:
    """The ε lower bound of the DP threshold (cosine bounds, k = 4) and the vote on D, D'."""
    from retrieval_audit import TRIALS, threshold_votes

    from dprag_core.audit import audit_epsilon

    gen = np.random.default_rng(seed)
    outputs = [
        threshold_votes(s, QUESTION, bounds=(-1.0, 1.0), k=4, trials=TRIALS, rng=gen)
        for s in selections
    ]
    return audit_epsilon(*outputs).epsilon_lower_bound
