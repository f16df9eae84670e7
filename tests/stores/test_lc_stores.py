"""LangChain against the real stores: the one-line switch, order, exactness, audits.

For every store of the table (InMemory, FAISS L2/IP, Chroma l2/cosine/ip,
PGVector and PGVectorStore (v2) cosine/l2/inner, Qdrant Cosine/Dot/Euclid,
LanceDB), with no score function
given: the store's metric is read from the store object, the top k is the
brute-force cosine top k, converted scores are the cosines (non-increasing),
``vectorstore=store`` and ``retriever=store.as_retriever()`` give the same
candidates, and the worst-case threshold audit (tests/stores/store_cases.py)
stays within its claim, while reading the scores the wrong way round (the
mutation: what the chain did with Chroma's distances) exceeds it. An
approximate index (FAISS HNSW) is refused, and taken as exact it fails the
top-n audit; the stores' own approximate searches (Chroma's HNSW, pgvector's
HNSW index) differ from brute force where dprag's exact path does not.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from retrieval_audit import (
    EPSILON,
    TAU,
    UNITS,
    Recorder,
    accountant,
    audit_pair,
    histograms,
)
from store_cases import (
    DIM,
    LC_KINDS,
    QUESTION,
    Row,
    TableEmbeddings,
    brute_force,
    lc_store,
    needs_pg,
    query_vector,
    random_rows,
    threshold_rows,
)

from dprag_core.retrieval import clients
from langchain_dprag import DPRAGChain, DPRetriever, ScoreFunction
from langchain_dprag import vectorstores as lc_vectorstores
from langchain_dprag.vectorstores import SCORE_FUNCTIONS, open_store

METRICS = {
    "inmemory": "cosine",
    "faiss_l2": "squared_l2",
    "faiss_ip": "inner_product",
    "chroma_l2": "squared_l2",
    "chroma_cosine": "cosine_distance",
    "chroma_ip": "ip_distance",
    "pgvector_cosine": "cosine_distance",
    "pgvector_l2": "l2",
    "pgvector_inner": "negative_inner_product",
    "pgvector2_cosine": "cosine_distance",
    "pgvector2_l2": "l2",
    "pgvector2_inner": "inner_product",
    "qdrant_cosine": "cosine",
    "qdrant_dot": "inner_product",
    "qdrant_euclid": "l2",
    "lancedb_l2": "squared_l2",
    "milvus_cosine": "cosine",
    "milvus_ip": "inner_product",
    "milvus_l2": "squared_l2",
}


def _store(request: pytest.FixtureRequest, kind: str, rows: list[Row], **options: Any) -> Any:
    pg = request.getfixturevalue("pg_url") if needs_pg(kind) else None
    return lc_store(kind, rows, pg, **options)


def _refs(recorder: Recorder) -> list[str]:
    return [d.unit for d in recorder.seen[-1][1]]


@pytest.mark.parametrize("kind", LC_KINDS)
def test_store_read_from_the_object_is_exact_and_ordered(
    request: pytest.FixtureRequest, kind: str
) -> None:
    rows = random_rows()
    opened = open_store(_store(request, kind, rows))
    assert opened.facts.metric == METRICS[kind] and opened.exact
    assert opened.score_function is SCORE_FUNCTIONS[METRICS[kind]]
    pairs = opened.searcher()(QUESTION, 12)
    assert [d.metadata["ref"] for d, _ in pairs] == brute_force(rows, 12)
    scores = [s for _, s in pairs]
    assert scores == sorted(scores, reverse=True)  # non-increasing along the ranking
    cosine = {r.ref: float(np.asarray(r.vector) @ query_vector()) for r in rows}
    assert scores == pytest.approx([cosine[d.metadata["ref"]] for d, _ in pairs], abs=1e-4)


@pytest.mark.parametrize("kind", LC_KINDS)
def test_one_line_switch(request: pytest.FixtureRequest, kind: str) -> None:
    rows = random_rows()
    store = _store(request, kind, rows)
    seen = []
    for source in ({"vectorstore": store}, {"retriever": store.as_retriever()}):
        recorder = Recorder(UNITS)
        chain = DPRAGChain(**source, mechanism=recorder, unit_key="ref", accountant=accountant())
        assert chain.invoke(QUESTION).epsilon == EPSILON
        seen.append(_refs(recorder))
    assert seen[0] == seen[1] == brute_force(rows, UNITS)
    selected = DPRetriever(
        vectorstore=store, epsilon=1.0, accountant=accountant(), k=4, unit_key="ref", rng=0
    ).invoke(QUESTION)
    assert {d.metadata["ref"] for d in selected} <= {r.ref for r in rows}


def _threshold_hists(
    request: pytest.FixtureRequest, kind: str, *, with_new_unit: bool
) -> list[tuple[int, int]]:
    store = _store(request, kind, threshold_rows(with_new_unit=with_new_unit))
    recorder = Recorder(None, tau=TAU)
    DPRAGChain(
        vectorstore=store, mechanism=recorder, unit_key="ref", accountant=accountant()
    ).invoke(QUESTION)
    return histograms(recorder.seen, UNITS)


def _inverted(facts: Any, given: Any) -> ScoreFunction:
    natural = SCORE_FUNCTIONS[facts.metric]
    return ScoreFunction("inverted", low=-1.0, high=1.0, transform=lambda r: -natural.transform(r))


@pytest.mark.parametrize("kind", LC_KINDS)
def test_threshold_audit_within_claim_and_the_inverted_reading_fails(
    request: pytest.FixtureRequest, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, d_prime = (_threshold_hists(request, kind, with_new_unit=new) for new in (False, True))
    assert audit_pair(d, d_prime, seed=31).epsilon_lower_bound <= EPSILON
    # the mutation: the store's scores read the wrong way round (Chroma's distances
    # read as similarities, as the chain did before the store table)
    monkeypatch.setattr(lc_vectorstores, "_score_function", _inverted)
    d, d_prime = (_threshold_hists(request, kind, with_new_unit=new) for new in (False, True))
    assert audit_pair(d, d_prime, seed=32).epsilon_lower_bound > EPSILON


# -- approximate indexes -------------------------------------------------------------


HNSW_SEED = 19
"""A corpus where one added document moves three others through the HNSW graph (efSearch 1)."""


def _hnsw_rows(*, labels: frozenset[str], with_new_unit: bool) -> list[Row]:
    rng = np.random.default_rng(HNSW_SEED)
    vectors = rng.normal(size=(64, DIM))
    rows = [
        Row(f"r{i:02d}", f"A:{int(f'r{i:02d}' in labels)} r{i:02d}", tuple(v / np.linalg.norm(v)))
        for i, v in enumerate(vectors)
    ]
    q = query_vector()
    x = q + 0.05 * rng.normal(size=DIM)
    if with_new_unit:
        rows.append(Row("x", f"A:{int('x' in labels)} x", tuple(x / np.linalg.norm(x))))
    return rows


def _faiss(rows: list[Row], *, hnsw: bool) -> Any:
    import faiss
    from langchain_core.documents import Document

    with warnings.catch_warnings():  # langchain-community's sunset notice
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.docstore.in_memory import InMemoryDocstore
        from langchain_community.vectorstores import FAISS

    index: Any = faiss.IndexFlatL2(DIM)
    if hnsw:
        index = faiss.IndexHNSWFlat(DIM, 2)
        index.hnsw.efConstruction, index.hnsw.efSearch = 2, 1
    store = FAISS(TableEmbeddings(rows), index, InMemoryDocstore(), {})
    store.add_documents(
        [Document(page_content=r.text, metadata={"ref": r.ref}, id=r.ref) for r in rows]
    )
    return store


def _top_units(store: Any) -> tuple[list[str], list[tuple[int, int]]]:
    recorder = Recorder(UNITS)
    DPRAGChain(
        vectorstore=store, mechanism=recorder, unit_key="ref", accountant=accountant()
    ).invoke(QUESTION)
    return _refs(recorder), histograms(recorder.seen, UNITS)


def test_faiss_hnsw_is_refused_and_taken_as_exact_fails_the_audit(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # HNSW insertion is deterministic on one thread
    request.addfinalizer(lambda: faiss.omp_set_num_threads(threads))
    no_labels = frozenset[str]()
    with pytest.raises(ValueError, match=r"IndexHNSWFlat index is approximate.*flat index"):
        DPRAGChain(
            vectorstore=_faiss(_hnsw_rows(labels=no_labels, with_new_unit=False), hnsw=True),
            mechanism=Recorder(UNITS),
            accountant=accountant(),
        )
    with monkeypatch.context() as m:  # the mutation: the approximate index taken as exact
        flat = clients.faiss_index

        def as_flat(index: Any, **kw: Any) -> clients.FaissIndex:
            read = flat(index, **kw)
            return clients.FaissIndex(read.kind, flat=True, metric=read.metric)

        m.setattr(clients, "faiss_index", as_flat)

        def hnsw(labels: frozenset[str], new: bool) -> Any:
            return _top_units(_faiss(_hnsw_rows(labels=labels, with_new_unit=new), hnsw=True))

        before, _ = hnsw(no_labels, False)
        after, _ = hnsw(no_labels, True)
        moved = frozenset(set(after) - set(before))  # vote 1: what the new unit brought in
        assert len(moved - {"x"}) >= 2  # more than one substitution
        approx = audit_pair(hnsw(moved, False)[1], hnsw(moved, True)[1], seed=33)
        assert approx.epsilon_lower_bound > EPSILON
    exact = [_top_units(_faiss(_hnsw_rows(labels=moved, with_new_unit=n), hnsw=False))[1]
             for n in (False, True)]  # fmt: skip
    assert audit_pair(*exact, seed=34).epsilon_lower_bound <= EPSILON


def test_chroma_hnsw_is_approximate_where_the_exact_scan_is_not(
    request: pytest.FixtureRequest,
) -> None:
    rows = random_rows(n=300, seed=3)
    options = {"ef_search": 1, "ef_construction": 2, "max_neighbors": 2}
    store = _store(request, "chroma_cosine", rows, **options)
    exact = [d.metadata["ref"] for d, _ in open_store(store).searcher()(QUESTION, 10)]
    assert exact == brute_force(rows, 10)
    own = [d.metadata["ref"] for d, _ in store.similarity_search_with_score(QUESTION, k=10)]
    assert own != exact  # the mutation dprag's path removes: Chroma's HNSW answer


def test_pgvector_exact_scan_bypasses_an_hnsw_index(request: pytest.FixtureRequest) -> None:
    from sqlalchemy import text

    rows = random_rows(n=300, seed=4)
    store = _store(request, "pgvector_cosine", rows)
    with store.session_maker() as session:  # an HNSW index the planner must use
        session.execute(
            text(
                "CREATE INDEX IF NOT EXISTS lc_hnsw ON langchain_pg_embedding USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = 2, ef_construction = 4)"
            )
        )
        session.execute(text("ALTER ROLE postgres SET enable_seqscan = off"))
        session.execute(text("ALTER ROLE postgres SET hnsw.ef_search = 1"))
        session.commit()
    try:
        store._engine.dispose()  # new connections take the role's settings
        own = [d.metadata["ref"] for d, _ in store.similarity_search_with_score(QUESTION, 10)]
        assert own != brute_force(rows, 10)  # the index, approximate (here: one row)
        exact = [d.metadata["ref"] for d, _ in open_store(store).searcher()(QUESTION, 10)]
        assert exact == brute_force(rows, 10)
    finally:
        with store.session_maker() as session:
            session.execute(text("ALTER ROLE postgres RESET ALL"))
            session.execute(text("DROP INDEX lc_hnsw"))
            session.commit()
        store._engine.dispose()


def test_lancedb_ivf_index_is_bypassed_and_its_metric_read() -> None:
    rows = random_rows(n=300, seed=5)
    store = lc_store("lancedb_l2", rows)
    store.get_table().create_index(
        metric="cosine", num_partitions=4, num_sub_vectors=2, vector_column_name="vector"
    )
    opened = open_store(store)
    assert opened.facts.metric == "cosine_distance"  # from the index, not the scores
    # the question, then documents' own texts as questions (TableEmbeddings gives each its
    # vector): dprag's search is exact on every one; the IVF-PQ index, trained at random,
    # may get one query's top 10 right, but not all nine
    questions = [(QUESTION, query_vector())] + [(r.text, np.asarray(r.vector)) for r in rows[:8]]
    differs = 0
    for question, vector in questions:
        exact = [d.metadata["ref"] for d, _ in opened.searcher()(question, 10)]
        assert exact == brute_force(rows, 10, vector), question
        own = [d.metadata["ref"] for d, _ in store.similarity_search_with_score(question, k=10)]
        differs += own != exact
    assert differs >= 1  # the IVF-PQ index answers the store's own search
