"""LangChain's partitioned search on the real stores: exact in the probed cells, audited.

For every store the partition reaches (InMemory, FAISS as the partition's
IndexIVFFlat, Chroma, PGVector, Qdrant local, LanceDB), documents added with
``langchain_dprag.cells.add_documents`` carry their cell; ``DPRAGChain`` and
``DPRetriever`` with ``partition=`` retrieve the exact top k of the probed cells
(brute force over those cells agrees), the adversarial x of tests/cell_cases.py
change at most one slot and their audits stay within the claim, and a probe
count chosen from the data (the mutation) fails the audit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from cell_cases import (
    CASES,
    QUESTION,
    Row,
    adaptive_probe,
    adaptive_rows,
    axes,
    case_rows,
    quiet_faiss,
)
from cell_stores import (
    LC_CELL_KINDS,
    RowEmbeddings,
    audit_selections,
    brute_force_in_cells,
    lc_cell_store,
    lc_empty,
    record_selections,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from retrieval_audit import (
    EPSILON,
    SELECTION_EPSILON,
    UNITS,
    Recorder,
    accountant,
    audit_pair,
    histograms,
)

from dprag_core.retrieval.cells import CELL_KEY, PartitionProvenance, PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, DPRetriever
from langchain_dprag.cells import add_documents, partitioned_reading
from langchain_dprag.vectorstores import open_store


def _pg(request: pytest.FixtureRequest, kind: str) -> str | None:
    return request.getfixturevalue("pg_url") if kind.startswith("pgvector") else None


def _random_rows(n: int = 60, seed: int = 7) -> list[Row]:
    x = np.random.default_rng(seed).normal(size=(n, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # unit: every metric ranks as the cosine
    return [Row(f"r{i:02d}", f"r{i:02d}", f"Q:0 r{i:02d}", tuple(v)) for i, v in enumerate(x)]


def _chain_units(
    request: pytest.FixtureRequest, kind: str, rows: Sequence[Row], partition: PublicPartition
) -> tuple[list[str], list[tuple[int, int]]]:
    store = lc_cell_store(kind, rows, partition, _pg(request, kind))
    recorder = Recorder(UNITS)
    chain = DPRAGChain(
        vectorstore=store,
        partition=partition,
        mechanism=recorder,
        unit_key="ref",
        accountant=accountant(),
    )
    chain.invoke(QUESTION)
    units = [d.unit for d in recorder.seen[-1][1] if not d.is_padding]
    return units, histograms(recorder.seen, UNITS)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", LC_CELL_KINDS)
def test_chain_adversarial_x_within_claim(
    request: pytest.FixtureRequest, kind: str, case: str
) -> None:
    runs = []
    for new in (False, True):
        rows, probes = case_rows(case, with_new_unit=new)
        runs.append(_chain_units(request, kind, rows, axes(probes)))
    assert len(set(runs[0][0]) - set(runs[1][0])) <= 1
    assert audit_pair(runs[0][1], runs[1][1], seed=51).epsilon_lower_bound <= EPSILON


@pytest.mark.parametrize("kind", LC_CELL_KINDS)
def test_chain_mutation_probe_count_from_the_data_fails(
    request: pytest.FixtureRequest, kind: str
) -> None:
    runs = []
    for new in (False, True):
        rows = adaptive_rows(with_new_unit=new)
        partition = axes(1)
        partition.probe = adaptive_probe(partition, rows)  # type: ignore[method-assign]
        runs.append(_chain_units(request, kind, rows, partition))
    assert not set(runs[0][0]) & set(runs[1][0])  # every slot changed
    assert audit_pair(runs[0][1], runs[1][1], seed=52).epsilon_lower_bound > EPSILON


# -- LanceDB: rows written after its cell index ----------------------------------------


def _lance_batches(
    rows: Sequence[Row], partition: PublicPartition, questions: dict[str, np.ndarray]
) -> Any:
    """A LanceDB store filled in four batches: the first through dprag's ``add_documents``
    (which makes the bitmap index on the cell), the rest through LangChain's own
    ``add_documents`` with their cells, as another writer would: not in that index."""
    emb = RowEmbeddings(rows)
    emb.table.update({q: list(v) for q, v in questions.items()})
    store = lc_empty("lancedb_l2", emb)
    docs = [
        Document(page_content=r.text, metadata={"ref": r.unit}, id=str(uuid.uuid4())) for r in rows
    ]
    cells = partition.assign(np.array([r.vector for r in rows]))
    add_documents(store, docs[:30], partition)
    for start in range(30, len(docs), 30):
        store.add_documents(
            [
                Document(page_content=d.page_content, metadata={**d.metadata, CELL_KEY: int(c)})
                for d, c in zip(docs[start : start + 30], cells[start : start + 30], strict=True)
            ]
        )
    return store


def test_lancedb_rows_added_after_the_cell_index_are_ranked_exactly() -> None:
    rows = _random_rows(n=120, seed=11)
    partition = PublicPartition.random(dim=8, cells=6, probes=2, seed=4)
    x = np.random.default_rng(12).normal(size=(8, 8))
    questions = {f"question {i}": v / np.linalg.norm(v) for i, v in enumerate(x)}
    store = _lance_batches(rows, partition, questions)
    (index,) = store.get_table().list_indices()
    assert store.get_table().index_stats(index.name).num_unindexed_rows == 90
    search = open_store(store, reading=partitioned_reading(store, partition)).searcher()
    by_text = {r.text: r.id for r in rows}
    later = {r.id for r in rows[30:]}
    for question, query in questions.items():
        want = brute_force_in_cells(rows, partition, 10, query)
        assert [by_text[d.page_content] for d, _ in search(question, 10)] == want
        assert later & set(want)  # the unindexed rows rank: a search skipping them fails


def test_lancedb_in_overwrite_mode_is_refused_once_its_table_exists() -> None:
    rows = _random_rows(n=20)
    store = lc_empty("lancedb_l2", RowEmbeddings(rows), lance_mode="overwrite")
    docs = [Document(page_content=r.text) for r in rows]
    partition = PublicPartition.random(dim=8, cells=4, probes=1)
    add_documents(store, docs[:10], partition)  # the first add makes the table
    with pytest.raises(ValueError, match=r'replace every row.*mode="append"'):
        add_documents(store, docs[10:], partition)
    assert store.get_table().count_rows() == 10


# -- DPRetriever: the DP threshold over every unit of the probed cells -------------------


def _selection(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    rows: Sequence[Row],
    partition: PublicPartition,
) -> list[ScoredDocument]:
    store = lc_cell_store(kind, rows, partition, _pg(request, kind))
    seen = record_selections(monkeypatch)
    DPRetriever(
        vectorstore=store,
        partition=partition,
        epsilon=SELECTION_EPSILON,
        accountant=accountant(),
        k=4,
        unit_key="ref",
        rng=0,
    ).invoke(QUESTION)
    return seen[0]


@pytest.mark.parametrize("kind", ["faiss", "pgvector_cosine", "qdrant_cosine"])
def test_dp_retriever_in_the_probed_cells_within_claim_and_the_mutation_fails(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    fair = []
    for new in (False, True):
        rows, probes = case_rows("fills", with_new_unit=new)
        fair.append(_selection(request, monkeypatch, kind, rows, axes(probes)))
    assert audit_selections(fair, seed=53) <= SELECTION_EPSILON + EPSILON
    mutated = []
    for new in (False, True):
        rows = adaptive_rows(with_new_unit=new)
        partition = axes(1)
        partition.probe = adaptive_probe(partition, rows)  # type: ignore[method-assign]
        mutated.append(_selection(request, monkeypatch, kind, rows, partition))
    assert audit_selections(mutated, seed=54) > SELECTION_EPSILON + EPSILON


# -- refusals --------------------------------------------------------------------------


class _Listed(BaseRetriever):
    """A retriever that is not a store's: the partition cannot reach its cells."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return []


def test_partition_refusals_name_the_fix() -> None:
    rows, _ = case_rows("boundary", with_new_unit=False)
    store = lc_cell_store("faiss", rows, axes(1))
    flipped = PublicPartition(
        -axes(1).centroids, probes=1, provenance=PartitionProvenance("random", "flipped axes", 0)
    )
    with pytest.raises(ValueError, match="centroids are not the partition's"):
        DPRAGChain(
            vectorstore=store, partition=flipped, mechanism=Recorder(UNITS), accountant=accountant()
        )
    with pytest.raises(ValueError, match="partition= searches a vector store"):
        DPRAGChain(
            retriever=_Listed(),
            partition=axes(1),
            retriever_honours_k=True,
            mechanism=Recorder(UNITS),
            accountant=accountant(),
        )
    with pytest.raises(TypeError, match="partition must be a PublicPartition"):
        add_documents(store, [], "cells")  # type: ignore[arg-type]
    # a partition fitted on the corpus is refused when the corpus is added
    with quiet_faiss():
        fitted = PublicPartition.fit(
            np.array([r.vector for r in rows] * 2), cells=2, probes=1, source="the corpus itself"
        )
    empty = lc_empty("chroma_cosine", RowEmbeddings(rows))
    with pytest.raises(ValueError, match="among the vectors this partition was fitted on"):
        add_documents(empty, [Document(page_content=r.text) for r in rows], fitted)


def test_chroma_beyond_the_exact_limit_is_refused_unless_partitioned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dprag_core.retrieval import clients

    rows, probes = case_rows("fills", with_new_unit=False)
    store = lc_cell_store("chroma_cosine", rows, axes(probes))
    monkeypatch.setattr(clients, "CHROMA_EXACT_LIMIT", len(rows) - 1)
    with pytest.raises(ValueError, match=r"holds 8 vectors .*no mirror can follow"):
        DPRAGChain(vectorstore=store, mechanism=Recorder(UNITS), accountant=accountant())
    recorder = Recorder(UNITS)
    DPRAGChain(
        vectorstore=store, partition=axes(probes), mechanism=recorder, accountant=accountant()
    ).invoke(QUESTION)
    assert len([d for d in recorder.seen[-1][1] if not d.is_padding]) == UNITS
