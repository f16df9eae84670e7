"""A store's embedding function must give vectors of the stored vectors' dimension: checked
when the app is built.

A store reopened with another embedding model (or the wrong one passed) would
accept the app and fail at the first query, after that query's charge. So when
the app is built, the dimension of the stored vectors is read from the store
object (the table's classes: FAISS ``index.d``, one stored vector of
InMemoryVectorStore or Chroma, the Qdrant collection's vector size, the LanceDB
table's vector column, PGVector's ``embedding_length``, PGVectorStore's
``vector(n)`` column type), a fixed public probe
text is embedded once with the store's embedding function, and a mismatch is
refused naming both. A store whose dimension cannot be read (an empty one, an
unknown class, PGVector without ``embedding_length``) is not checked.

An empty store is refused at the same time (:func:`check_not_empty`: the count
of InMemoryVectorStore, FAISS, Chroma and Qdrant is read; other stores are not
counted), and so is a Chroma collection that records another embedding model
than the one its embedding function names (:func:`check_embedding_model`,
:mod:`~dprag_core.retrieval.embedding_record`).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
>>> _ = store.add_texts(["a record"])
>>> store.embedding = DeterministicFakeEmbedding(size=3)  # another model
>>> check_dimension(store, "InMemoryVectorStore")
Traceback (most recent call last):
...
ValueError: InMemoryVectorStore: its stored vectors have 4 dimensions, but its embedding ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dprag_core.retrieval.embedding_record import (
    chroma_recorded_model,
    named_model,
    refuse_other_model,
)
from dprag_core.retrieval.stores import refusal, refuse_empty

__all__ = [
    "PROBE",
    "check_dimension",
    "check_embedding_model",
    "check_not_empty",
    "stored_count",
    "stored_dimension",
]

PROBE = "dprag embedding dimension probe"
"""The public text embedded once when an app is built (no document, no question)."""


def _in_memory(store: Any) -> int | None:
    first = next(iter(store.store.values()), None)
    return None if first is None else len(first["vector"])


def _faiss(store: Any) -> int | None:
    return int(store.index.d)


def _chroma(store: Any) -> int | None:
    found = store._collection.get(limit=1, include=["embeddings"])["embeddings"]
    return None if found is None or len(found) == 0 else len(found[0])


def _pgvector(store: Any) -> int | None:
    length = store._embedding_length
    return None if length is None else int(length)


def _pgvector_store(store: Any) -> int | None:
    """langchain-postgres's PGVectorStore (v2): the ``vector(n)`` type of its embedding column."""
    from sqlalchemy import text

    vs = store._PGVectorStore__vs  # the async store it wraps (v2 keeps its state there)
    query = text(
        "SELECT a.atttypmod FROM pg_catalog.pg_attribute AS a "
        "WHERE a.attrelid = pg_catalog.to_regclass(:table) AND a.attname = :column"
    )
    table = f'"{vs.schema_name}"."{vs.table_name}"'

    async def read() -> int | None:
        async with vs.engine.connect() as conn:
            found = await conn.execute(query, {"table": table, "column": vs.embedding_column})
            row = found.first()
        return None if row is None or int(row[0]) <= 0 else int(row[0])

    result: int | None = store._engine._run_as_sync(read())
    return result


def _qdrant(store: Any) -> int | None:
    vectors = store.client.get_collection(store.collection_name).config.params.vectors
    params = vectors.get(store.vector_name) if isinstance(vectors, dict) else vectors
    return None if params is None else int(params.size)


def _lancedb(store: Any) -> int | None:
    table = store.get_table()
    if table is None:
        return None
    return int(table.schema.field(store._vector_key).type.list_size)


_READERS: dict[str, Callable[[Any], int | None]] = {
    "langchain_core.vectorstores.in_memory.InMemoryVectorStore": _in_memory,
    "langchain_community.vectorstores.faiss.FAISS": _faiss,
    "langchain_chroma.vectorstores.Chroma": _chroma,
    "langchain_postgres.vectorstores.PGVector": _pgvector,
    "langchain_postgres.v2.vectorstores.PGVectorStore": _pgvector_store,
    "langchain_qdrant.qdrant.QdrantVectorStore": _qdrant,
    "langchain_community.vectorstores.lancedb.LanceDB": _lancedb,
}


def stored_dimension(store: object) -> int | None:
    """The dimension of ``store``'s stored vectors, or None where it cannot be read."""
    cls = type(store)
    reader = _READERS.get(f"{cls.__module__}.{cls.__qualname__}")
    return None if reader is None else reader(store)


_COUNTERS: dict[str, Callable[[Any], int | None]] = {
    "langchain_core.vectorstores.in_memory.InMemoryVectorStore": lambda s: len(s.store),
    "langchain_community.vectorstores.faiss.FAISS": lambda s: int(s.index.ntotal),
    "langchain_chroma.vectorstores.Chroma": lambda s: int(s._collection.count()),
    "langchain_qdrant.qdrant.QdrantVectorStore": lambda s: int(
        s.client.count(s.collection_name, exact=True).count
    ),
}


def stored_count(store: object) -> int | None:
    """How many vectors ``store`` holds, or None where it is not read (the other classes).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> stored_count(InMemoryVectorStore(DeterministicFakeEmbedding(size=4)))
    0
    """
    cls = type(store)
    counter = _COUNTERS.get(f"{cls.__module__}.{cls.__qualname__}")
    return None if counter is None else counter(store)


def check_not_empty(store: Any, name: str) -> None:
    """Refuse a store that holds no vector (:func:`~dprag_core.retrieval.stores.refuse_empty`
    says why this build-time check reveals nothing to whoever asks questions)."""
    refuse_empty(name, stored_count(store))


def check_dimension(store: Any, name: str) -> None:
    """Refuse (``ValueError`` naming ``name`` and both dimensions) an embedding function whose
    vectors do not have the stored vectors' dimension; one embedding of :data:`PROBE`."""
    stored = stored_dimension(store)
    embeddings = getattr(store, "embeddings", None)
    if stored is None or embeddings is None:
        return
    probed = len(embeddings.embed_query(PROBE))
    if probed != stored:
        raise refusal(
            name,
            f"its stored vectors have {stored} dimensions, but its embedding function gives "
            f"{probed} (one public probe text, embedded when the app is built, before any "
            "charge)",
            "give the store the embedding model its vectors were made with",
        )


def check_embedding_model(store: Any, name: str) -> None:
    """Refuse (``ValueError`` naming ``embedding_function``) a Chroma store whose collection
    records another embedding model than the one the store's embedding object names
    (:mod:`~dprag_core.retrieval.embedding_record`); other stores record none."""
    cls = type(store)
    if f"{cls.__module__}.{cls.__qualname__}" != "langchain_chroma.vectorstores.Chroma":
        return
    recorded = chroma_recorded_model(store._collection)
    refuse_other_model(
        name, recorded, named_model(getattr(store, "embeddings", None)), "embedding_function"
    )
