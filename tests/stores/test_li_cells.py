"""LlamaIndex's partitioned search on the real stores: exact in the probed cells, audited.

For every store the partition reaches (Simple, FAISS as the partition's
IndexIVFFlat, Chroma, PGVector, Qdrant local, LanceDB), nodes tagged with
``llamaindex_dprag.cells.tag_nodes`` carry their cell; ``DPQueryEngine.from_index(...,
partition=...)`` and the node postprocessors behind a ``PartitionedRetriever`` get
the exact ranking of the probed cells, the adversarial x of tests/cell_cases.py
stay within the claim, and a probe count chosen from the data (the mutation)
fails the audit.
"""

from __future__ import annotations

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
)
from cell_stores import (
    LI_CELL_KINDS,
    audit_selections,
    brute_force_in_cells,
    li_cell_index,
    li_nodes,
    record_selections,
)
from llama_index.core.schema import QueryBundle
from retrieval_audit import (
    EPSILON,
    SELECTION_EPSILON,
    TAU,
    UNITS,
    Recorder,
    accountant,
    audit_pair,
    histograms,
)

from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.retrieval.cells import PartitionProvenance, PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from llamaindex_dprag import DPQueryEngine, DPThresholdPostprocessor, PrivacyBudgetPostprocessor
from llamaindex_dprag.cell_retriever import PartitionedRetriever
from llamaindex_dprag.cells import tag_nodes
from llamaindex_dprag.sources import IndexSource

DIRECTION = {"chroma_cosine": "distance", "lancedb_l2": "distance"}
Hists = list[tuple[int, int]]


def _pg(request: pytest.FixtureRequest, kind: str) -> str | None:
    return request.getfixturevalue("pg_url") if kind == "pgvector" else None


def _index(
    request: pytest.FixtureRequest, kind: str, rows: Sequence[Row], partition: PublicPartition
) -> Any:
    return li_cell_index(kind, rows, partition, _pg(request, kind))


def test_lancedb_nodes_inserted_after_the_cell_index_are_ranked_exactly() -> None:
    x = np.random.default_rng(13).normal(size=(120, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows = [Row(f"r{i:03d}", f"r{i:03d}", f"Q:0 r{i:03d}", tuple(v)) for i, v in enumerate(x)]
    partition = PublicPartition.random(dim=8, cells=6, probes=2, seed=4)
    index = li_cell_index("lancedb_l2", rows[:30], partition)
    source = IndexSource(index, partition=partition, score_direction="distance")  # its index
    for start in range(30, len(rows), 30):  # three batches the bitmap index does not cover
        index.insert_nodes(tag_nodes(li_nodes(rows[start : start + 30]), partition))
    table = index.vector_store.table
    (cell_index,) = table.list_indices()
    assert table.index_stats(cell_index.name).num_unindexed_rows == 90
    want = brute_force_in_cells(rows, partition, 10)
    by_text = {r.text: r.id for r in rows}
    assert [by_text[d.text.split("\n")[-1]] for d in source.bind(QUESTION)(QUESTION, 10)] == want
    assert {r.id for r in rows[30:]} & set(want)  # the unindexed rows rank


def _engine_units(
    request: pytest.FixtureRequest, kind: str, rows: Sequence[Row], partition: PublicPartition
) -> tuple[list[str], Hists]:
    recorder = Recorder(UNITS)
    engine = DPQueryEngine.from_index(
        _index(request, kind, rows, partition),
        mechanism=recorder,
        budget=accountant(),
        partition=partition,
        unit_key="ref",
        score_direction=DIRECTION.get(kind),
    )
    engine.query(QUESTION)
    units = [d.unit for d in recorder.seen[-1][1] if not d.is_padding]
    return units, histograms(recorder.seen, UNITS)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", LI_CELL_KINDS)
def test_engine_adversarial_x_within_claim(
    request: pytest.FixtureRequest, kind: str, case: str
) -> None:
    runs = []
    for new in (False, True):
        rows, probes = case_rows(case, with_new_unit=new)
        runs.append(_engine_units(request, kind, rows, axes(probes)))
    assert len(set(runs[0][0]) - set(runs[1][0])) <= 1
    assert audit_pair(runs[0][1], runs[1][1], seed=61).epsilon_lower_bound <= EPSILON


def _adaptive(rows: Sequence[Row]) -> PublicPartition:
    partition = axes(1)
    partition.probe = adaptive_probe(partition, rows)  # type: ignore[method-assign]
    return partition


@pytest.mark.parametrize("kind", LI_CELL_KINDS)
def test_engine_mutation_probe_count_from_the_data_fails(
    request: pytest.FixtureRequest, kind: str
) -> None:
    runs = [
        _engine_units(request, kind, r, _adaptive(r))
        for r in (adaptive_rows(with_new_unit=n) for n in (False, True))
    ]
    assert not set(runs[0][0]) & set(runs[1][0])
    assert audit_pair(runs[0][1], runs[1][1], seed=62).epsilon_lower_bound > EPSILON


# -- the postprocessors behind a PartitionedRetriever -------------------------------------

POST_KINDS = ("faiss", "pgvector", "qdrant_cosine")


def _nodes(
    request: pytest.FixtureRequest, kind: str, rows: Sequence[Row], partition: PublicPartition
) -> list[Any]:
    retriever = PartitionedRetriever(
        _index(request, kind, rows, partition),
        partition,
        similarity_top_k=100,
        score_direction=DIRECTION.get(kind),
    )
    return retriever.retrieve(QueryBundle(QUESTION))


def _threshold(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    rows: Sequence[Row],
    partition: PublicPartition,
) -> list[ScoredDocument]:
    seen = record_selections(monkeypatch)
    post = DPThresholdPostprocessor(
        epsilon=SELECTION_EPSILON,
        score_range=(-1.0, 1.0),
        budget=accountant(),
        k=4,
        rng=0,
        score_direction=DIRECTION.get(kind, "similarity"),
        unit_key="ref",
    )
    nodes = _nodes(request, kind, rows, partition)
    post.postprocess_nodes(nodes)
    texts = {n.node.node_id: n.node.get_content() for n in nodes}
    return [ScoredDocument(id=d.id, text=texts[d.id], score=d.score, unit=d.unit) for d in seen[0]]


@pytest.mark.parametrize("kind", POST_KINDS)
def test_threshold_postprocessor_within_claim_and_the_mutation_fails(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    fair = [
        _threshold(request, monkeypatch, kind, r, axes(p))
        for r, p in (case_rows("fills", with_new_unit=n) for n in (False, True))
    ]
    assert audit_selections(fair, seed=63) <= SELECTION_EPSILON + EPSILON
    mutated = [
        _threshold(request, monkeypatch, kind, r, _adaptive(r))
        for r in (adaptive_rows(with_new_unit=n) for n in (False, True))
    ]
    assert audit_selections(mutated, seed=64) > SELECTION_EPSILON + EPSILON


def _budget(
    request: pytest.FixtureRequest, kind: str, rows: Sequence[Row], partition: PublicPartition
) -> Hists:
    post = PrivacyBudgetPostprocessor(
        ledger=InMemoryLedger(budget_per_unit=EPSILON),
        epsilon_query=EPSILON,
        tau=TAU,
        k=UNITS,
        unit_key="ref",
        score_direction=DIRECTION.get(kind, "similarity"),
    )
    kept = post.postprocess_nodes(_nodes(request, kind, rows, partition))
    return histograms([(QUESTION, [n.node.get_content() for n in kept])], UNITS)


@pytest.mark.parametrize("kind", POST_KINDS)
def test_budget_postprocessor_within_claim_and_the_mutation_fails(
    request: pytest.FixtureRequest, kind: str
) -> None:
    fair = [
        _budget(request, kind, r, axes(p))
        for r, p in (case_rows("fills", with_new_unit=n) for n in (False, True))
    ]
    assert audit_pair(*fair, seed=65).epsilon_lower_bound <= EPSILON
    mutated = [
        _budget(request, kind, r, _adaptive(r))
        for r in (adaptive_rows(with_new_unit=n) for n in (False, True))
    ]
    assert audit_pair(*mutated, seed=66).epsilon_lower_bound > EPSILON


def test_partition_refusals_name_the_fix(request: pytest.FixtureRequest) -> None:
    rows, _ = case_rows("boundary", with_new_unit=False)
    index = li_cell_index("faiss", rows, axes(1))
    flipped = PublicPartition(
        -axes(1).centroids, probes=1, provenance=PartitionProvenance("random", "flipped axes", 0)
    )
    with pytest.raises(ValueError, match="centroids are not the partition's"):
        DPQueryEngine.from_index(
            index, mechanism=Recorder(UNITS), budget=accountant(), partition=flipped
        )
    with pytest.raises(ValueError, match="partition= queries the cells"):
        DPQueryEngine.from_retriever(
            PartitionedRetriever(index, axes(1), similarity_top_k=5),
            mechanism=Recorder(UNITS),
            budget=accountant(),
            partition=axes(1),
            returns_everything=True,
        )


def test_chroma_beyond_the_exact_limit_is_refused_unless_partitioned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dprag_core.retrieval import clients

    rows, probes = case_rows("fills", with_new_unit=False)
    index = li_cell_index("chroma_cosine", rows, axes(probes))
    monkeypatch.setattr(clients, "CHROMA_EXACT_LIMIT", len(rows) - 1)
    with pytest.raises(ValueError, match=r"holds 8 vectors .*no mirror can follow"):
        DPQueryEngine.from_index(
            index, mechanism=Recorder(UNITS), budget=accountant(), score_direction="distance"
        )
    DPQueryEngine.from_index(
        index,
        mechanism=Recorder(UNITS),
        budget=accountant(),
        score_direction="distance",
        partition=axes(probes),
    )
