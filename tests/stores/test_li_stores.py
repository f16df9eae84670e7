"""LlamaIndex against the real stores: the one-line switch, order, exactness, audits.

For every store of the table (SimpleVectorStore, FAISS L2 and cosine, Chroma
l2/cosine/ip, PGVectorStore, Qdrant Cosine/Dot/Euclid): the direction of its
scores is read from the store object (a distance store needs
``score_direction="distance"``, and says so), the top k is the brute-force
cosine top k with non-increasing scores, ``from_index`` and
``from_retriever(index.as_retriever())`` give the same candidates, and the
worst-case threshold audit stays within its claim while the inverted reading
(the mutation: ``ChromaVectorStore``'s exp(-distance) read with a similarity
threshold, or a similarity read as a distance) exceeds it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from retrieval_audit import EPSILON, UNITS, Recorder, accountant, audit_pair, histograms
from store_cases import (
    DIM,
    LI_KINDS,
    QUESTION,
    Row,
    brute_force,
    li_index,
    needs_pg,
    query_vector,
    random_rows,
    threshold_rows,
)

from llamaindex_dprag import DPQueryEngine
from llamaindex_dprag import sources as li_sources
from llamaindex_dprag.sources import IndexSource

METRICS = {
    "simple": "cosine",
    "faiss_l2": "squared_l2",
    "faiss_cosine": "cosine",
    "chroma_l2": "squared_l2",
    "chroma_cosine": "cosine_distance",
    "chroma_ip": "ip_distance",
    "pgvector": "cosine",
    "qdrant_cosine": "cosine",
    "qdrant_dot": "inner_product",
    "qdrant_euclid": "l2",
    "lancedb_l2": "squared_l2",
    "milvus_ip": "inner_product",
    "milvus_cosine": "cosine",
    "milvus_l2": "squared_l2",
}
DISTANCE = {"squared_l2", "cosine_distance", "ip_distance", "l2"}


def _raw(metric: str, cos: float) -> float:
    """The store's raw score of a unit vector at cosine ``cos`` with the question."""
    return {
        "cosine": cos,
        "inner_product": cos,
        "cosine_distance": 1 - cos,
        "ip_distance": 1 - cos,
        "squared_l2": 2 - 2 * cos,
        "l2": math.sqrt(max(0.0, 2 - 2 * cos)),
    }[metric]


def _direction(kind: str) -> dict[str, str]:
    return {"score_direction": "distance"} if METRICS[kind] in DISTANCE else {}


def _index(request: pytest.FixtureRequest, kind: str, rows: list[Row]) -> Any:
    pg = request.getfixturevalue("pg_url") if needs_pg(kind) else None
    return li_index(kind, rows, pg)


@pytest.mark.parametrize("kind", LI_KINDS)
def test_store_read_from_the_object_is_exact_and_ordered(
    request: pytest.FixtureRequest, kind: str
) -> None:
    rows = random_rows()
    index = _index(request, kind, rows)
    metric = METRICS[kind]
    source = IndexSource(index, unit_key="ref", **_direction(kind))
    assert source.reading.facts.metric == metric and source.exact
    docs = source.bind(QUESTION)(QUESTION, 12)
    assert [d.unit for d in docs] == brute_force(rows, 12)
    scores = [d.score for d in docs]
    assert scores == sorted(scores, reverse=True)  # non-increasing along the ranking
    cosine = {r.ref: float(np.asarray(r.vector) @ query_vector()) for r in rows}
    sign = -1.0 if metric in DISTANCE else 1.0
    expected = [sign * _raw(metric, cosine[d.unit]) for d in docs]
    assert scores == pytest.approx(expected, abs=1e-4)
    if metric in DISTANCE:  # the default reads similarities: refused, with the fix
        with pytest.raises(
            ValueError, match=r"returns distance scores.*score_direction='distance'"
        ):
            IndexSource(index)


@pytest.mark.parametrize("kind", LI_KINDS)
def test_one_line_switch(request: pytest.FixtureRequest, kind: str) -> None:
    rows = random_rows()
    index = _index(request, kind, rows)
    seen = []
    for build, source in ((DPQueryEngine.from_index, index),
                          (DPQueryEngine.from_retriever, index.as_retriever())):  # fmt: skip
        recorder = Recorder(UNITS)
        engine = build(
            source, mechanism=recorder, budget=accountant(), unit_key="ref", **_direction(kind)
        )
        assert engine.query(QUESTION).metadata["epsilon"] == EPSILON
        seen.append([d.unit for d in recorder.seen[-1][1]])
    assert seen[0] == seen[1] == brute_force(rows, UNITS)


def _tau(metric: str) -> float:
    """τ at cosine 0.5 in the engine's units (distances negated)."""
    return -_raw(metric, 0.5) if metric in DISTANCE else 0.5


def _threshold_hists(
    request: pytest.FixtureRequest, kind: str, tau: float, *, with_new_unit: bool
) -> list[tuple[int, int]]:
    index = _index(request, kind, threshold_rows(with_new_unit=with_new_unit))
    recorder = Recorder(None, tau=tau)
    DPQueryEngine.from_index(
        index, mechanism=recorder, budget=accountant(), unit_key="ref", **_direction(kind)
    ).query(QUESTION)
    return histograms(recorder.seen, UNITS)


@pytest.mark.parametrize("kind", LI_KINDS)
def test_threshold_audit_within_claim_and_the_inverted_reading_fails(
    request: pytest.FixtureRequest, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    metric = METRICS[kind]
    tau = _tau(metric)
    d, d_prime = (_threshold_hists(request, kind, tau, with_new_unit=n) for n in (False, True))
    assert audit_pair(d, d_prime, seed=41).epsilon_lower_bound <= EPSILON
    # the mutation: the direction read the wrong way round, with the threshold its user
    # meant (a distance read as a similarity above 1.0; a similarity as a distance)
    wrong = "similarity" if metric in DISTANCE else "distance"
    monkeypatch.setattr(li_sources, "_direction", lambda reading, given: wrong)
    tau = 1.0 if metric in DISTANCE else 0.5
    d, d_prime = (_threshold_hists(request, kind, tau, with_new_unit=n) for n in (False, True))
    assert audit_pair(d, d_prime, seed=42).epsilon_lower_bound > EPSILON


def test_faiss_hnsw_is_refused_with_the_exact_alternative() -> None:
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore
    from store_cases import li_embedding, li_nodes

    storage = StorageContext.from_defaults(
        vector_store=FaissVectorStore(faiss_index=faiss.IndexHNSWFlat(DIM, 8))
    )
    index = VectorStoreIndex(
        li_nodes(random_rows()), storage_context=storage, embed_model=li_embedding()
    )
    for exact_search in (False, True):  # a declaration never overrides what dprag knows
        with pytest.raises(ValueError, match=r"IndexHNSWFlat index is approximate.*IndexFlatL2"):
            DPQueryEngine.from_index(
                index,
                mechanism=Recorder(UNITS),
                budget=accountant(),
                score_direction="distance",
                exact_search=exact_search,
            )


def test_chroma_hnsw_is_approximate_where_the_exact_scan_is_not() -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery

    rows = random_rows(n=300, seed=3)
    index = li_index("chroma_cosine", rows, ef_search=1, ef_construction=2, max_neighbors=2)
    source = IndexSource(index, unit_key="ref", score_direction="distance")
    assert [d.unit for d in source.bind(QUESTION)(QUESTION, 10)] == brute_force(rows, 10)
    own = index.vector_store.query(
        VectorStoreQuery(query_embedding=query_vector().tolist(), similarity_top_k=10)
    )
    assert [n.metadata["ref"] for n in own.nodes] != brute_force(rows, 10)


def test_pgvector_exact_scan_bypasses_an_hnsw_index(pg_url: str) -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery
    from sqlalchemy import create_engine, text

    rows = random_rows(n=300, seed=4)
    hnsw = {"hnsw_m": 2, "hnsw_ef_construction": 4, "hnsw_ef_search": 1,
            "hnsw_dist_method": "vector_cosine_ops"}  # fmt: skip
    # its hnsw path binds SET parameters, which only psycopg2 interpolates client-side
    index = li_index("pgvector", rows, pg_url.replace("+psycopg", "+psycopg2"), hnsw_kwargs=hnsw)
    store = index.vector_store
    admin = create_engine(pg_url)
    with admin.begin() as connection:  # a role setting that pushes the planner to the index
        connection.execute(text("ALTER ROLE postgres SET enable_seqscan = off"))
    try:
        store._engine.dispose()  # new connections take the role's settings
        query = VectorStoreQuery(query_embedding=query_vector().tolist(), similarity_top_k=10)
        own = [n.metadata["ref"] for n in store.query(query).nodes]
        assert own != brute_force(rows, 10)  # the HNSW index (ef_search 1): approximate
        source = IndexSource(index, unit_key="ref")
        assert [d.unit for d in source.bind(QUESTION)(QUESTION, 10)] == brute_force(rows, 10)
    finally:
        with admin.begin() as connection:
            connection.execute(text("ALTER ROLE postgres RESET ALL"))
        admin.dispose()
        store._engine.dispose()
