"""Corpora with known vectors, and the real stores built over them, for both frameworks.

Every store is built from the same rows (a reference, a text, a unit vector);
the question ``"A"`` has the query vector ``q``. Texts carry the audit labels of
tests/retrieval_audit.py (``"A:1 ..."`` votes 1 for question A). Vectors are
unit-norm, so every metric ranks as the cosine does and the brute-force cosine
ranking is the exact answer for each store.

Store kinds (one configuration each): LangChain ``LC_KINDS``, LlamaIndex
``LI_KINDS``; the name says the store and its metric.
"""

from __future__ import annotations

import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

DIM = 8
QUESTION = "A"

LC_KINDS = (
    "inmemory",
    "faiss_l2",
    "faiss_ip",
    "chroma_l2",
    "chroma_cosine",
    "chroma_ip",
    "pgvector_cosine",
    "pgvector_l2",
    "pgvector_inner",
    "pgvector2_cosine",
    "pgvector2_l2",
    "pgvector2_inner",
    "qdrant_cosine",
    "qdrant_dot",
    "qdrant_euclid",
    "lancedb_l2",
    "milvus_cosine",
    "milvus_ip",
    "milvus_l2",
)
LI_KINDS = (
    "simple",
    "faiss_l2",
    "faiss_cosine",
    "chroma_l2",
    "chroma_cosine",
    "chroma_ip",
    "pgvector",
    "qdrant_cosine",
    "qdrant_dot",
    "qdrant_euclid",
    "lancedb_l2",
    "milvus_ip",
    "milvus_cosine",
    "milvus_l2",
)


PG2_STRATEGIES = {"cosine": "COSINE_DISTANCE", "l2": "EUCLIDEAN", "inner": "INNER_PRODUCT"}
"""langchain-postgres's ``PGVectorStore`` (v2) distance strategies by kind suffix."""

MILVUS_METRICS = {"cosine": "COSINE", "ip": "IP", "l2": "L2"}
"""Milvus's metric types by kind suffix."""

QDRANT_DISTANCES = {"cosine": "Cosine", "dot": "Dot", "euclid": "Euclid", "manhattan": "Manhattan"}


@dataclass(frozen=True)
class Row:
    """One document: its reference (metadata ``ref``, the privacy unit), text and vector;
    ``metadata``: more metadata keys (``ref`` and ``group`` win over them)."""

    ref: str
    text: str
    vector: tuple[float, ...]
    metadata: tuple[tuple[str, Any], ...] = ()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def query_vector(seed: int = 0) -> np.ndarray:
    """The question's unit vector."""
    return _unit(np.random.default_rng(seed).normal(size=DIM))


def at_cosine(q: np.ndarray, c: float, rng: np.random.Generator) -> tuple[float, ...]:
    """A unit vector whose cosine with ``q`` is ``c``."""
    u = rng.normal(size=DIM)
    u = _unit(u - (u @ q) * q)
    return tuple(float(a) for a in c * q + np.sqrt(1.0 - c * c) * u)


def random_rows(n: int = 40, seed: int = 1) -> list[Row]:
    """``n`` random unit vectors (labels irrelevant)."""
    rng = np.random.default_rng(seed)
    return [
        Row(f"r{i:02d}", f"A:0 r{i:02d}", tuple(float(a) for a in _unit(rng.normal(size=DIM))))
        for i in range(n)
    ]


NEAR, FAR = 31, 9


def threshold_rows(*, with_new_unit: bool, seed: int = 2) -> list[Row]:
    """The worst case for a threshold read the wrong way round (tests/stores/test_*_audit).

    31 near documents (cosine 0.6 to 0.9 with the question, vote 0) and 9 far
    ones (cosine -0.9 to -0.6, vote 1); D' adds x (cosine 0.95, vote 1). Read
    right, τ = 0.5 (cosine) keeps the near ones: the first four slots change by
    x alone. Read inverted, the search grown from 32 candidates stops on D'
    (its first 32 are all near: nothing above τ) but runs to the end on D (the
    32nd is far) and keeps the far ones: every slot changes.
    """
    q, rng = query_vector(), np.random.default_rng(seed)
    rows = [Row(f"n{i:02d}", f"A:0 n{i:02d}", at_cosine(q, c, rng)) for i, c in
            enumerate(np.linspace(0.9, 0.6, NEAR))]  # fmt: skip
    rows += [Row(f"f{i:02d}", f"A:1 f{i:02d}", at_cosine(q, c, rng)) for i, c in
             enumerate(np.linspace(-0.6, -0.9, FAR))]  # fmt: skip
    if with_new_unit:
        rows.append(Row("x", "A:1 x", at_cosine(q, 0.95, rng)))
    return rows


def _metadata(row: Row) -> dict[str, Any]:
    """``ref`` (the unit) and ``group``: ``"even"`` or ``"odd"`` by the ref's last digit
    (over the row's own ``metadata``)."""
    return {**dict(row.metadata), "ref": row.ref,
            "group": "odd" if row.ref[-1] in "13579" else "even"}  # fmt: skip


def brute_force(rows: list[Row], k: int, q: np.ndarray | None = None) -> list[str]:
    """The refs of the exact top ``k`` by cosine (ties by ref)."""
    q = query_vector() if q is None else q
    cos = {r.ref: float(np.asarray(r.vector) @ q) for r in rows}
    return sorted(cos, key=lambda ref: (-cos[ref], ref))[:k]


# -- LangChain -------------------------------------------------------------------------


class TableEmbeddings(Embeddings):
    """Each text's vector from the rows; the question's is ``q``; anything else e_1."""

    def __init__(self, rows: list[Row]) -> None:
        self.table = {r.text: list(r.vector) for r in rows}
        self.table[QUESTION] = query_vector().tolist()

    def _vector(self, text: str) -> list[float]:
        return self.table.get(text, [1.0] + [0.0] * (DIM - 1))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def _ordered_uuid(ref: str) -> str:
    """A fresh UUID whose first bytes are ``ref``'s: ids sort as the refs do in every store
    built from the same rows (a tie broken by id ranks the same records first)."""
    head = ref.encode("utf-8", "surrogatepass")[:4].ljust(4, b"\0").hex()
    return str(uuid.UUID(head + uuid.uuid4().hex[8:]))


def _documents(rows: list[Row], *, uuids: bool = False) -> tuple[list[Document], list[str]]:
    """Documents with ids unique to this store (PGVector's ids are unique across collections),
    in the order of their refs."""
    ids = [_ordered_uuid(r.ref) if uuids else f"{r.ref}-{uuid.uuid4().hex[:8]}" for r in rows]
    docs = [Document(page_content=r.text, metadata=_metadata(r), id=i) for r, i in
            zip(rows, ids, strict=True)]  # fmt: skip
    return docs, ids


def _name() -> str:
    return f"c{uuid.uuid4().hex[:12]}"


def lc_store(kind: str, rows: list[Row], pg_url: str | None = None, **options: Any) -> Any:
    """A LangChain store of ``kind`` (LC_KINDS) holding ``rows``."""
    emb = TableEmbeddings(rows)
    store, _, metric = kind.partition("_")
    if store == "inmemory":
        from langchain_core.vectorstores import InMemoryVectorStore

        mem = InMemoryVectorStore(emb)
        mem.add_documents(_documents(rows)[0])
        return mem
    if store == "faiss":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.vectorstores import FAISS
            from langchain_community.vectorstores.utils import DistanceStrategy

        strategy = DistanceStrategy.EUCLIDEAN_DISTANCE
        if metric == "ip":
            strategy = DistanceStrategy.MAX_INNER_PRODUCT
        return FAISS.from_documents(_documents(rows)[0], emb, distance_strategy=strategy)
    if store == "chroma":
        import chromadb
        from langchain_chroma import Chroma

        chroma = Chroma(
            collection_name=_name(),
            embedding_function=emb,
            client=chromadb.EphemeralClient(),
            collection_configuration={"hnsw": {"space": metric, **options}},
        )
        docs, ids = _documents(rows)
        chroma.add_documents(docs, ids=ids)
        return chroma
    if store == "pgvector":
        from langchain_postgres import PGVector

        pg = PGVector(
            emb, connection=pg_url, collection_name=_name(), distance_strategy=metric,
            embedding_length=DIM, use_jsonb=True,
        )  # fmt: skip
        docs, ids = _documents(rows, uuids=True)
        pg.add_documents(docs, ids=ids)
        return pg
    if store == "pgvector2":
        return pg_vector_store(rows, pg_url, metric, **options)
    if store == "qdrant":
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        distance = QDRANT_DISTANCES[metric]
        client = QdrantClient(":memory:")
        name = _name()
        client.create_collection(
            name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance(distance))
        )
        qdrant = QdrantVectorStore(client, name, emb, distance=models.Distance(distance))
        docs, ids = _documents(rows, uuids=True)
        qdrant.add_documents(docs, ids=ids)
        return qdrant
    if store == "lancedb":
        import lancedb

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.vectorstores import LanceDB

        lance = LanceDB(
            connection=lancedb.connect(tempfile.mkdtemp(prefix="dprag-lance-")),
            embedding=emb, table_name=_name(), distance=metric,
        )  # fmt: skip
        docs, ids = _documents(rows)
        lance.add_documents(docs, ids=ids)
        return lance
    if store == "milvus":
        from milvus_stores import lc_milvus

        folder = Path(tempfile.mkdtemp(prefix="dprag-milvus-"))
        return lc_milvus(folder, emb, _documents(rows)[0], metric=MILVUS_METRICS[metric])
    raise ValueError(kind)


def pg_vector_store(rows: list[Row], pg_url: str | None, metric: str, **options: Any) -> Any:
    """langchain-postgres's current ``PGVectorStore`` (v2): ``ref`` a column, the rest JSON.

    (``group`` stays in the JSON metadata: v2's filters name a column unquoted, and
    ``group`` is an SQL keyword.)
    """
    from langchain_postgres import Column, PGEngine, PGVectorStore
    from langchain_postgres.v2.indexes import DistanceStrategy

    assert pg_url is not None
    engine = PGEngine.from_connection_string(pg_url)
    table = _name()
    columns = [Column("ref", "TEXT")]
    engine.init_vectorstore_table(table, DIM, metadata_columns=columns)
    store = PGVectorStore.create_sync(
        engine, TableEmbeddings(rows), table, metadata_columns=["ref"],
        distance_strategy=DistanceStrategy[PG2_STRATEGIES[metric]], **options,
    )  # fmt: skip
    docs, ids = _documents(rows, uuids=True)
    store.add_documents(docs, ids=ids)
    return store


# -- LlamaIndex -----------------------------------------------------------------------


def li_embedding() -> Any:
    """A LlamaIndex embedding that embeds every query as ``q`` (nodes carry their vectors)."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class QueryTable(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return query_vector().tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return query_vector().tolist()

        def _get_text_embedding(self, text: str) -> list[float]:
            return [1.0] + [0.0] * (DIM - 1)

    return QueryTable(model_name="table")


def _node_id(ref: str) -> str:
    """A node id from the ref (a UUID: Qdrant needs one), also for a ref with a lone surrogate."""
    try:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, ref))
    except UnicodeEncodeError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, ref.encode("utf-8", "surrogatepass").hex()))


def li_nodes(rows: list[Row]) -> list[Any]:
    """LlamaIndex nodes for ``rows``, with their vectors (uuid ids: Qdrant needs them)."""
    from llama_index.core.schema import TextNode

    return [
        TextNode(
            id_=_node_id(r.ref),
            text=r.text,
            metadata=_metadata(r),
            embedding=list(r.vector),
        )
        for r in rows
    ]


def li_vector_store(kind: str, pg_url: str | None = None, **options: Any) -> Any:
    """An empty LlamaIndex vector store of ``kind`` (LI_KINDS)."""
    store, _, metric = kind.partition("_")
    if store == "simple":
        from llama_index.core.vector_stores import SimpleVectorStore

        return SimpleVectorStore()
    if store == "faiss":
        import faiss
        from llama_index.vector_stores.faiss import FaissVectorStore

        from llamaindex_dprag import cosine_faiss_store

        if metric == "cosine":
            return cosine_faiss_store(dim=DIM)
        return FaissVectorStore(faiss_index=faiss.IndexFlatL2(DIM))
    if store == "chroma":
        import chromadb
        from llama_index.vector_stores.chroma import ChromaVectorStore

        collection = chromadb.EphemeralClient().create_collection(
            _name(), configuration={"hnsw": {"space": metric, **options}}, embedding_function=None
        )
        return ChromaVectorStore(chroma_collection=collection)
    if store == "pgvector":
        from llama_index.vector_stores.postgres import PGVectorStore

        assert pg_url is not None
        return PGVectorStore(  # async: never used here, but it must be an async driver
            connection_string=pg_url,
            async_connection_string=pg_url.replace("+psycopg2", "+psycopg"),
            table_name=_name(), embed_dim=DIM, **options,
        )  # fmt: skip
    if store == "qdrant":
        from llama_index.vector_stores.qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        distance = QDRANT_DISTANCES[metric]
        client, name = QdrantClient(":memory:"), _name()
        client.create_collection(
            name,
            vectors_config={
                "text-dense": models.VectorParams(size=DIM, distance=models.Distance(distance))
            },
        )
        return QdrantVectorStore(collection_name=name, client=client)
    if store == "lancedb":
        from llama_index.vector_stores.lancedb import LanceDBVectorStore

        return LanceDBVectorStore(
            uri=tempfile.mkdtemp(prefix="dprag-lance-"), table_name=_name(), **options
        )
    if store == "milvus":
        from milvus_stores import li_milvus

        folder = Path(tempfile.mkdtemp(prefix="dprag-milvus-"))
        return li_milvus(folder, DIM, metric=MILVUS_METRICS[metric])
    raise ValueError(kind)


def li_index(kind: str, rows: list[Row], pg_url: str | None = None, **options: Any) -> Any:
    """A ``VectorStoreIndex`` over ``rows`` in a store of ``kind``."""
    from llama_index.core import StorageContext, VectorStoreIndex

    storage = StorageContext.from_defaults(vector_store=li_vector_store(kind, pg_url, **options))
    return VectorStoreIndex(li_nodes(rows), storage_context=storage, embed_model=li_embedding())


def needs_pg(kind: str) -> bool:
    """Whether ``kind`` needs the PostgreSQL server."""
    return kind.startswith("pgvector")
