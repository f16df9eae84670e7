"""The partitioned search through the core pipeline: audits on worst-case pairs, three mutations.

PrivateRAG over a ``FaissCorpus(partition=...)`` (an ``IndexIVFFlat`` of the public
cells), a Recorder mechanism and the reference vote of tests/retrieval_audit.py.
Each adversarial x of tests/cell_cases.py (on a cell boundary, filling a cell,
tied with a stored document) changes at most one candidate slot and the audit
stays within its claim; each mutation (centroids fitted on the corpus, a probe
count chosen from the data, assignment recomputed from the data) changes every
slot and the audit exceeds it. The threshold path (``above``: every document
above tau in the probed cells) is audited the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from cell_cases import (
    CASES,
    DIM,
    QUERY,
    QUESTION,
    REFIT_QUERY,
    Row,
    adaptive_probe,
    adaptive_rows,
    axes,
    capacity_assign,
    capacity_rows,
    case_rows,
    quiet_faiss,
    refit,
    refit_rows,
)
from retrieval_audit import EPSILON, UNITS, Recorder, accountant, audit_pair, histograms

from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.faiss_corpus import FaissCorpus
from dprag_core.retrieval.units import best_chunk_per_unit

Hists = list[tuple[int, int]]


def corpus(rows: Sequence[Row], partition: PublicPartition) -> FaissCorpus:
    store = FaissCorpus(dim=DIM, partition=partition)
    store.add(
        [r.id for r in rows],
        [r.text for r in rows],
        np.array([r.vector for r in rows]),
        [r.unit for r in rows],
    )
    return store


def run(
    rows: Sequence[Row],
    partition: PublicPartition,
    *,
    query: tuple[float, ...] = QUERY,
    tau: float | None = None,
) -> tuple[list[str], Hists]:
    recorder = Recorder(None if tau is not None else UNITS, tau=tau)
    retriever = corpus(rows, partition).as_retriever(lambda q: np.array(query))
    PrivateRAG(recorder, retriever, accountant=accountant()).answer(QUESTION)
    units = [d.unit for d in recorder.seen[-1][1] if not d.is_padding]
    if tau is None:
        return units, histograms(recorder.seen, UNITS)
    # above tau: one vote per unit (its best chunk), over a fixed number of slots
    per_unit = [(q, best_chunk_per_unit(docs)) for q, docs in recorder.seen]
    return units, histograms(per_unit, 2 * UNITS)


def changed(before: list[str], after: list[str]) -> int:
    return len(set(before) - set(after))


@pytest.mark.parametrize("case", CASES)
def test_adversarial_x_moves_one_slot_and_stays_within_the_claim(case: str) -> None:
    (rows_d, probes), (rows_d_prime, _) = (case_rows(case, with_new_unit=n) for n in (False, True))
    (units_d, d), (units_d_prime, d_prime) = (run(r, axes(probes)) for r in (rows_d, rows_d_prime))
    assert changed(units_d, units_d_prime) <= 1
    assert "x" in units_d_prime or "m" in units_d_prime  # x takes part: the pair has power
    assert audit_pair(d, d_prime, seed=41).epsilon_lower_bound <= EPSILON


@pytest.mark.parametrize("case", CASES)
def test_threshold_retrieval_in_the_probed_cells_within_the_claim(case: str) -> None:
    (rows_d, probes), (rows_d_prime, _) = (case_rows(case, with_new_unit=n) for n in (False, True))
    runs = [run(r, axes(probes), tau=0.5) for r in (rows_d, rows_d_prime)]
    assert set(runs[0][0]) <= set(runs[1][0])  # D' adds x's units, removes none
    assert audit_pair(runs[0][1], runs[1][1], seed=42).epsilon_lower_bound <= EPSILON


def test_mutation_probe_count_chosen_from_the_data_fails() -> None:
    rows = [adaptive_rows(with_new_unit=n) for n in (False, True)]
    fixed = [run(r, axes(1)) for r in rows]
    assert changed(fixed[0][0], fixed[1][0]) <= 1
    assert audit_pair(fixed[0][1], fixed[1][1], seed=43).epsilon_lower_bound <= EPSILON
    mutated = []
    for r in rows:
        partition = axes(1)
        partition.probe = adaptive_probe(partition, r)  # type: ignore[method-assign]
        mutated.append(run(r, partition))
    assert changed(mutated[0][0], mutated[1][0]) == UNITS
    assert audit_pair(mutated[0][1], mutated[1][1], seed=44).epsilon_lower_bound > EPSILON


def test_mutation_assignment_recomputed_from_the_data_fails() -> None:
    rows = [capacity_rows(with_new_unit=n) for n in (False, True)]
    fixed = [run(r, axes(1)) for r in rows]
    assert changed(fixed[0][0], fixed[1][0]) <= 1
    mutated = []
    for r in rows:
        partition = axes(1)
        partition.assign = capacity_assign(partition)  # type: ignore[method-assign]
        mutated.append(run(r, partition))
    assert changed(mutated[0][0], mutated[1][0]) == UNITS
    assert audit_pair(mutated[0][1], mutated[1][1], seed=45).epsilon_lower_bound > EPSILON


def test_mutation_centroids_fitted_on_the_corpus_is_refused_and_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [refit_rows(with_new_unit=n) for n in (False, True)]
    with pytest.raises(ValueError, match="fitted on"):
        corpus(rows[0], refit(rows[0]))
    fixed = [run(r, axes(1), query=REFIT_QUERY) for r in rows]
    assert audit_pair(fixed[0][1], fixed[1][1], seed=46).epsilon_lower_bound <= EPSILON
    # the mutation: the provenance check removed, each corpus partitioned by its own fit
    monkeypatch.setattr(PublicPartition, "refuse_training", lambda *a, **k: None)
    with quiet_faiss():
        mutated = [run(r, refit(r), query=REFIT_QUERY) for r in rows]
    assert changed(mutated[0][0], mutated[1][0]) == UNITS
    assert audit_pair(mutated[0][1], mutated[1][1], seed=47).epsilon_lower_bound > EPSILON
