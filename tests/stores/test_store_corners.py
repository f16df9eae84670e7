"""The three store corners, on the real stores: D' and D = D' + x differ by at most one unit.

Each reproducer below failed before the fix (its mutation re-applies the old
code where that can be done in place) and passes now:

(a) **Scores of any real-number type.** LangChain's FAISS store (dprag's own
    ``faiss_inner_product`` too) returns ``numpy.float32`` scores, which the
    score reader took for NaN: the tie policy never ran, and with six units tied
    at the cut, rebuilding D in another insertion order moved 2 or 3 units of
    the top 10 (the proofs allow 1). Through ``DPRAGChain`` (store and
    retriever), ``DPRetriever`` and LlamaIndex's ``DPQueryEngine``.
(b) **langchain-postgres's PGVectorStore (v2)** was refused as unknown, and
    the fix the refusal named (``COSINE``) read its cosine *distances* as
    similarities. Now it is read with its own distance strategy and searched
    exactly (index scans off through its per-query options hook), and the old
    fix is refused naming the right function.
(c) **No approximate path behind retriever_honours_k.** A store's own
    retriever is taken apart and searched exactly, its ``filter`` applied by
    the store table's exact filtered search (Chroma's filtered HNSW, FAISS's
    ``fetch_k`` cut: both approximate); every other search keyword or search
    type, and a user's retriever searching a store whose own search is not
    exact, is refused naming the exact alternative.

And the refusals' fixes, followed, read the store right.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from retrieval_audit import Recorder, accountant
from store_cases import (
    DIM,
    LC_KINDS,
    QUESTION,
    Row,
    TableEmbeddings,
    at_cosine,
    brute_force,
    lc_store,
    li_index,
    needs_pg,
    query_vector,
    random_rows,
    threshold_rows,
)

from dprag_core.accounting.ledger import InMemoryLedger
from langchain_dprag import COSINE, DPRAGChain, DPRetriever, faiss_inner_product
from langchain_dprag import vectorstores as lc_vectorstores
from langchain_dprag.stores import read_store
from langchain_dprag.vectorstores import COSINE_DISTANCE, open_store
from llamaindex_dprag import DPQueryEngine
from llamaindex_dprag import sources as li_sources

TOP = 10


def _moved(before: list[str], after: list[str]) -> int:
    """How many units of ``after`` are not in ``before``."""
    return len(set(after) - set(before))


def _store(request: pytest.FixtureRequest, kind: str, rows: list[Row], **options: Any) -> Any:
    pg = request.getfixturevalue("pg_url") if needs_pg(kind) else None
    return lc_store(kind, rows, pg, **options)


def _chain_top(n: int = TOP, **source: Any) -> list[str]:
    recorder = Recorder(n)
    DPRAGChain(**source, mechanism=recorder, unit_key="ref", accountant=accountant()).invoke(
        QUESTION
    )
    return [d.unit for d in recorder.seen[-1][1] if not d.is_padding]


def _ledger_top(store: Any, *, tau: float = 0.3, **options: Any) -> list[str]:
    found = DPRetriever(
        vectorstore=store,
        ledger=InMemoryLedger(budget_per_unit=1e6),
        tau=tau,
        epsilon_query=1.0,
        k=TOP,
        unit_key="ref",
        **options,
    ).invoke(QUESTION)
    return [d.metadata["ref"] for d in found]


# -- (a) scores of any real-number type: the tie policy runs on FAISS's float32 ---------


def tied_rows(*, with_new_unit: bool, seed: int = 5) -> list[Row]:
    """7 units above, 6 tied at the cut of the top 10 (one vector), 10 below; x first."""
    q, rng = query_vector(), np.random.default_rng(seed)
    rows = [Row(f"a{i}", f"A:0 a{i}", at_cosine(q, 0.9 - 0.01 * i, rng)) for i in range(7)]
    tie = at_cosine(q, 0.5, rng)
    rows += [Row(f"t{i}", f"A:0 t{i}", tie) for i in range(6)]
    rows += [Row(f"b{i}", f"A:0 b{i}", at_cosine(q, 0.2 - 0.01 * i, rng)) for i in range(10)]
    if with_new_unit:
        rows.append(Row("x", "A:1 x", at_cosine(q, 0.95, rng)))
    return rows


def _shuffled(rows: list[Row], seed: int) -> list[Row]:
    out = list(rows)
    random.Random(seed).shuffle(out)
    return out


def _own_faiss(rows: list[Row]) -> Any:
    docs = [Document(page_content=r.text, metadata={"ref": r.ref}, id=r.ref) for r in rows]
    return faiss_inner_product(docs, TableEmbeddings(rows))


def _lc_faiss(rows: list[Row]) -> Any:
    return lc_store("faiss_l2", rows)


FAISS_BUILDS: dict[str, Callable[[list[Row]], Any]] = {
    "faiss_inner_product": _own_faiss,
    "FAISS.from_documents": _lc_faiss,
}
ENTRIES: dict[str, Callable[[Any], list[str]]] = {
    "DPRAGChain(vectorstore=)": lambda store: _chain_top(vectorstore=store),
    "DPRAGChain(retriever=)": lambda store: _chain_top(retriever=store.as_retriever()),
    "DPRetriever": _ledger_top,
}
ORDERS = range(6)


def _worst_moves(
    build: Callable[[list[Row]], Any], entry: Callable[[Any], list[str]]
) -> tuple[int, int]:
    """The most units any insertion order of D', and of D, moves from D' in its own order."""
    reference = entry(build(tied_rows(with_new_unit=False)))
    reordered = added = 0
    for seed in ORDERS:
        for new in (False, True):
            top = entry(build(_shuffled(tied_rows(with_new_unit=new), seed)))
            if new:
                added = max(added, _moved(reference, top))
            else:
                reordered = max(reordered, _moved(reference, top))
    return reordered, added


def test_faiss_scores_are_float32() -> None:
    store = _own_faiss(tied_rows(with_new_unit=False))
    assert type(store.similarity_search_with_score(QUESTION, 1)[0][1]) is np.float32


@pytest.mark.parametrize("build", FAISS_BUILDS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_ties_at_the_cut_move_one_unit_whatever_the_insertion_order(build: str, entry: str) -> None:
    reordered, added = _worst_moves(FAISS_BUILDS[build], ENTRIES[entry])
    assert reordered == 0 and added <= 1


def test_float32_read_as_nan_skips_the_tie_policy_and_moves_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutation: the reader before the fix (a float32 is not an int or float: NaN)."""

    def old_raw(pair: tuple[Document, float]) -> float:
        raw = pair[1]
        return float(raw) if isinstance(raw, (int, float)) else float("nan")

    monkeypatch.setattr(lc_vectorstores, "_raw", old_raw)
    reordered, added = _worst_moves(_own_faiss, ENTRIES["DPRAGChain(vectorstore=)"])
    assert reordered >= 1 and added >= 2


def _li_top(kind: str, rows: list[Row]) -> list[str]:
    recorder = Recorder(TOP)
    DPQueryEngine.from_index(
        li_index(kind, rows), mechanism=recorder, budget=accountant(), unit_key="ref"
    ).query(QUESTION)
    return [d.unit for d in recorder.seen[-1][1]]


def _li_worst(kind: str) -> int:
    reference = _li_top(kind, tied_rows(with_new_unit=False))
    return max(
        _moved(reference, _li_top(kind, _shuffled(tied_rows(with_new_unit=True), seed)))
        for seed in ORDERS
    )


@pytest.mark.parametrize("kind", ["faiss_cosine", "simple"])
def test_llamaindex_ties_move_one_unit_whatever_the_insertion_order(kind: str) -> None:
    assert _li_worst(kind) <= 1


def test_llamaindex_without_the_tie_policy_faiss_moves_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutation: FAISS's own order at the cut (its heap), no tie policy."""
    monkeypatch.setattr(li_sources, "tie_complete", lambda search, k, **_: list(search(k)))
    assert _li_worst("faiss_cosine") >= 2


# -- (b) langchain-postgres's PGVectorStore (v2) ---------------------------------------


def test_pgvector_store_charges_the_relevant_units_and_the_old_fix_is_refused(
    pg_url: str,
) -> None:
    """The issue's run: MuRAG's ledger charged 9 units on D' and none on D (distances as
    similarities); read with its own strategy the charges differ by x alone."""
    charged = []
    for new in (False, True):
        rows = threshold_rows(with_new_unit=new)
        store = lc_store("pgvector2_cosine", rows, pg_url)
        ledger = InMemoryLedger(budget_per_unit=10.0)
        found = DPRetriever(
            vectorstore=store, ledger=ledger, tau=0.5, epsilon_query=1.0, k=4, unit_key="ref"
        ).invoke(QUESTION)
        assert [d.metadata["ref"] for d in found] == brute_force(rows, 4)  # the most relevant
        remaining = ledger.remaining([r.ref for r in rows])
        charged.append({ref for ref, left in remaining.items() if left < 10.0})
    assert charged[1] - charged[0] == {"x"} and charged[0] <= charged[1]
    assert len(charged[0]) == 31  # the near ones (cosine 0.6 to 0.9), none of the far
    with pytest.raises(ValueError) as refused:  # the fix the old refusal suggested
        DPRAGChain(
            vectorstore=store,
            score_function=COSINE,
            exact_search=True,
            mechanism=Recorder(4),
            accountant=accountant(),
        )
    message = str(refused.value)
    assert "PGVectorStore (distance_strategy COSINE_DISTANCE): it returns cosine_distance" in (
        message
    )
    assert "dprag picks 'cosine_distance'" in message


def test_pgvector_store_exact_scan_bypasses_an_hnsw_index(pg_url: str) -> None:
    from langchain_postgres.v2.indexes import HNSWIndex, HNSWQueryOptions
    from sqlalchemy import create_engine, text

    rows = random_rows(n=300, seed=4)
    store = lc_store(
        "pgvector2_cosine", rows, pg_url, index_query_options=HNSWQueryOptions(ef_search=1)
    )
    store.apply_vector_index(HNSWIndex(m=2, ef_construction=4))
    admin = create_engine(pg_url)
    with admin.begin() as conn:  # the planner must use the index
        conn.execute(text("ALTER ROLE postgres SET enable_seqscan = off"))
    try:
        store._engine._run_as_sync(store._engine._pool.dispose())  # new connections: the role's
        own = [d.metadata["ref"] for d, _ in store.similarity_search_with_score(QUESTION, 10)]
        assert own != brute_force(rows, 10)  # the index, approximate
        exact = [d.metadata["ref"] for d, _ in open_store(store).searcher()(QUESTION, 10)]
        assert exact == brute_force(rows, 10)
        assert _chain_top(retriever=store.as_retriever()) == brute_force(rows, TOP)
    finally:
        with admin.begin() as conn:
            conn.execute(text("ALTER ROLE postgres RESET ALL"))
        admin.dispose()
        store._engine._run_as_sync(store._engine._pool.dispose())


def test_pgvector_store_hybrid_search_is_refused_and_the_fix_reads_it(pg_url: str) -> None:
    from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig

    rows = random_rows()
    hybrid = lc_store("pgvector2_cosine", rows, pg_url, hybrid_search_config=HybridSearchConfig())
    with pytest.raises(ValueError, match=r"hybrid search fuses.*hybrid_search_config=None"):
        open_store(hybrid)
    fixed = lc_store("pgvector2_cosine", rows, pg_url, hybrid_search_config=None)
    pairs = open_store(fixed).searcher()(QUESTION, 5)
    cosine = {r.ref: float(np.asarray(r.vector) @ query_vector()) for r in rows}
    assert [s for _, s in pairs] == pytest.approx([cosine[d.metadata["ref"]] for d, _ in pairs])


# -- (c) exact filtered search, and no approximate path behind retriever_honours_k -----


def _even(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.ref[-1] not in "13579"]


@pytest.mark.parametrize("kind", LC_KINDS)
def test_filtered_search_is_exact_and_moves_one_unit(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """On every store: the filtered top n is the brute-force top n of the filtered rows, on
    D' and D = D' + x (x nearest to the question, in the filter), by every entry point."""
    tops = []
    for new in (False, True):
        rows = random_rows(n=60, seed=7)
        if new:
            rows.append(
                Row("x", "A:1 x", at_cosine(query_vector(), 0.99, np.random.default_rng(8)))
            )
        store = _store(request, kind, rows)
        even = read_store(store).equals
        assert even is not None
        where = even("group", "even")
        expected = brute_force(_even(rows), TOP)
        retriever = store.as_retriever(search_kwargs={"filter": where, "k": 3})
        assert _chain_top(vectorstore=store, filter=where) == expected
        assert _chain_top(retriever=retriever) == expected
        assert _chain_top(retriever=retriever, retriever_honours_k=True) == expected
        assert _chain_top(retriever=retriever.bind(filter=where)) == expected
        assert _ledger_top(store, tau=-0.99, filter=where) == expected
        tops.append(expected)
    assert _moved(tops[0], tops[1]) == 1 and "x" in tops[1]


def test_chroma_filtered_hnsw_is_approximate_and_the_retriever_path_is_exact() -> None:
    """The reproducer: retriever_honours_k=True on a filtered Chroma retriever ran Chroma's
    filtered HNSW search; now it runs dprag's exact scan of the filtered vectors."""
    rows = random_rows(n=400, seed=3)
    store = lc_store("chroma_cosine", rows, ef_search=1, ef_construction=2, max_neighbors=2)
    where = {"group": {"$eq": "even"}}
    expected = brute_force(_even(rows), TOP)
    own = [d.metadata["ref"] for d in store.similarity_search(QUESTION, k=TOP, filter=where)]
    # the approximate path that was let in (how far it strays varies with hnswlib's threads)
    assert _moved(expected, own) >= 1
    retriever = store.as_retriever(search_kwargs={"filter": where})
    assert _chain_top(retriever=retriever, retriever_honours_k=True) == expected


def test_faiss_own_filter_cuts_at_fetch_k_and_dprag_filters_the_whole_ranking() -> None:
    rows = random_rows(n=60, seed=9)
    ranked = brute_force(rows, len(rows))
    wanted = ranked[25:45]  # beyond FAISS's default fetch_k of 20
    store = lc_store("faiss_l2", rows)
    where = {"ref": wanted}
    own = store.similarity_search_with_score(QUESTION, k=TOP, filter=where)
    assert own == []  # its first 20 hold none of them
    assert _chain_top(vectorstore=store, filter=where) == wanted[:TOP]


def _hnsw_faiss(rows: list[Row]) -> Any:
    import faiss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.docstore.in_memory import InMemoryDocstore
        from langchain_community.vectorstores import FAISS

    store = FAISS(TableEmbeddings(rows), faiss.IndexHNSWFlat(DIM, 4), InMemoryDocstore(), {})
    store.add_documents([Document(page_content=r.text, metadata={"ref": r.ref}) for r in rows])
    return store


def test_search_keywords_and_types_that_could_be_approximate_are_refused() -> None:
    rows = random_rows()
    chroma = lc_store("chroma_cosine", rows)
    hnsw = _hnsw_faiss(rows)
    refused = [
        (hnsw.as_retriever(search_kwargs={"k": 4, "fetch_k": 50}), r"fetch_k"),
        (hnsw.as_retriever(search_kwargs={"filter": {"ref": "r01"}}), r"IndexHNSWFlat index is"),
        (hnsw.as_retriever(), r"IndexHNSWFlat index is approximate"),
        (chroma.as_retriever(search_type="mmr"), r"search_type='mmr'"),
        (
            chroma.as_retriever(
                search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.1}
            ),
            r"search_type='similarity_score_threshold'",
        ),
        (chroma.as_retriever(search_kwargs={"where_document": {"$contains": "A"}}), "where_doc"),
        (chroma.as_retriever().bind(ef=4), r"search keywords \['ef'\]"),
    ]
    for retriever, match in refused:
        for promise in (False, True):
            with pytest.raises(ValueError, match=match) as error:
                DPRAGChain(
                    retriever=retriever,
                    retriever_honours_k=promise,
                    mechanism=Recorder(4),
                    accountant=accountant(),
                )
            if "search" in match:  # the exact alternative is named
                assert "store.as_retriever() (search_type='similarity')" in str(error.value)
    with pytest.raises(ValueError, match=r"filter= goes with vectorstore=.*search_kwargs"):
        DPRAGChain(
            retriever=chroma.as_retriever(),
            filter={"group": "even"},
            mechanism=Recorder(4),
            accountant=accountant(),
        )


class HoldsAStore(BaseRetriever):
    """A user's retriever over a store's own search (scores in metadata)."""

    stores: list[Any]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        pairs = self.stores[0].similarity_search_with_score(query, k=k)
        return [Document(d.page_content, id=d.id, metadata={**d.metadata, "score": s})
                for d, s in pairs]  # fmt: skip


def test_a_retriever_searching_an_inexact_store_is_refused_whatever_it_promises() -> None:
    rows = random_rows()
    for store in (lc_store("chroma_cosine", rows), lc_store("qdrant_cosine", rows)):
        for holder in (HoldsAStore(stores=[store]), HoldsAStore(stores=[store.as_retriever()])):
            with pytest.raises(ValueError, match=r"retriever_honours_k=True on HoldsAStore.*Fix"):
                DPRAGChain(
                    retriever=holder,
                    retriever_honours_k=True,
                    mechanism=Recorder(4),
                    accountant=accountant(),
                )
    # a brute-force store's own search is exact: the promise keeps its meaning
    exact = HoldsAStore(stores=[lc_store("inmemory", rows)])
    assert _chain_top(4, retriever=exact, retriever_honours_k=True) == brute_force(rows, 4)
    # dprag's own DPRetriever searches through the store table: it qualifies
    selector = DPRetriever(
        vectorstore=lc_store("chroma_cosine", rows),
        ledger=InMemoryLedger(budget_per_unit=1e6),
        tau=0.3,
        epsilon_query=1.0,
        k=4,
        unit_key="ref",
    )
    assert _chain_top(4, retriever=selector, retriever_honours_k=True) == brute_force(rows, 4)


# -- the refusals' fixes, followed, read the store right --------------------------------


class DistanceStore(InMemoryVectorStore):
    """A store dprag does not know, whose scores are cosine distances (exact: brute force)."""

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        pairs = super().similarity_search_with_score(query, k, **kwargs)
        return [(d, 1.0 - s) for d, s in pairs]


def _threshold_top(store: Any, score_function: Any) -> list[str]:
    found = DPRetriever(
        vectorstore=store,
        score_function=score_function,
        exact_search=True,
        epsilon=50.0,
        accountant=accountant(),
        k=4,
        unit_key="ref",
        rng=0,
    ).invoke(QUESTION)
    return [d.metadata["ref"] for d in found]


def test_the_unknown_store_fix_names_each_function_by_what_the_scores_are() -> None:
    rows = threshold_rows(with_new_unit=False)
    store = DistanceStore(TableEmbeddings(rows))
    store.add_documents([Document(r.text, metadata={"ref": r.ref}, id=r.ref) for r in rows])
    with pytest.raises(ValueError) as refused:
        DPRAGChain(vectorstore=store, mechanism=Recorder(4), accountant=accountant())
    message = str(refused.value)
    assert "a built-in such as" not in message
    for named in ("COSINE for a cosine similarity", "COSINE_DISTANCE for 1 - cos",
                  "SQUARED_L2_UNIT", "NEGATIVE_INNER_PRODUCT"):  # fmt: skip
        assert named in message
    near = {r.ref for r in rows if r.ref.startswith("n")}
    assert set(_threshold_top(store, COSINE_DISTANCE)) <= near  # followed: the nearest
    assert not set(_threshold_top(store, COSINE)) & near  # the old fix: the farthest


def test_an_approximate_faiss_index_behind_a_transform_is_refused_even_when_declared() -> None:
    import faiss

    rows = random_rows()
    store = _hnsw_faiss(rows)
    store.index = faiss.IndexPreTransform(faiss.PCAMatrix(DIM, 4), faiss.IndexHNSWFlat(4, 4))
    for declared in ({}, {"score_function": COSINE, "exact_search": True}):
        with pytest.raises(ValueError, match=r"IndexHNSWFlat index is approximate.*flat index"):
            open_store(store, **declared)


def test_llamaindex_a_retriever_over_an_inexact_store_cannot_promise_everything() -> None:
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever

    rows = random_rows()

    def fused(kind: str) -> Any:  # a fusion of the index's own retriever: its own query
        index = li_index(kind, rows)
        return QueryFusionRetriever([index.as_retriever()], llm=MockLLM(), num_queries=1)

    with pytest.raises(ValueError, match=r"returns_everything=True on QueryFusionRetriever.*Fix"):
        DPQueryEngine.from_retriever(
            fused("chroma_cosine"),
            mechanism=Recorder(4),
            budget=accountant(),
            returns_everything=True,
            score_direction="distance",
        )
    DPQueryEngine.from_retriever(  # a brute-force store: the promise keeps its meaning
        fused("simple"), mechanism=Recorder(4), budget=accountant(), returns_everything=True
    )
