"""The public partition: cells from the vector alone, probes from the query alone, provenance.

Each property the DP-stability argument rests on (docs/design.md §11) is tested
against the thing that would break it: a batch of other vectors, a tie, a
vector exactly on a boundary, a partition fitted on the corpus, a file altered.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cell_cases import BOUNDARY, DIM, axes, quiet_faiss

from dprag_core.retrieval.cells import (
    PartitionProvenance,
    PublicPartition,
    vector_fingerprints,
)


def test_assignment_is_the_same_whatever_the_batch() -> None:
    partition = PublicPartition.random(dim=32, cells=64, probes=4, seed=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 32)).astype(np.float32)
    # rows made to sit within float32 rounding of a boundary between cells 3 and 5
    mid = (partition.centroids[3] + partition.centroids[5]).astype(np.float32)
    x[::7] = mid + rng.standard_normal((len(x[::7]), 32)).astype(np.float32) * 1e-7
    whole = partition.assign(x)
    alone = np.array([partition.assign(row)[0] for row in x])
    shuffled = rng.permutation(len(x))
    assert np.array_equal(whole, alone)
    assert np.array_equal(partition.assign(x[shuffled]), whole[shuffled])


def test_assignment_is_the_exact_argmax_with_ties_to_the_lower_cell() -> None:
    partition = axes(1)
    assert partition.assign(np.array([BOUNDARY])).tolist() == [0]  # on the C0/C1 boundary
    swapped = np.array([BOUNDARY[1], BOUNDARY[0]] + [0.0] * (DIM - 2))
    assert partition.assign(swapped).tolist() == [0]
    # one float32 ulp off the boundary decides it
    above = np.array(BOUNDARY, dtype=np.float32)
    above[1] = np.nextafter(above[1], np.float32(1))
    assert partition.assign(above).tolist() == [1]
    zero = np.zeros(DIM)
    assert partition.assign(zero).tolist() == [0]  # every score ties
    assert partition.probe(zero) == (0,)
    assert partition.assign(np.array([np.nan, 1.0] + [0.0] * (DIM - 2))).tolist() == [1]


def test_probes_are_a_fixed_number_of_cells_from_the_query_alone() -> None:
    partition = PublicPartition.random(dim=16, cells=32, probes=5, seed=2)
    q = np.random.default_rng(3).standard_normal(16)
    cells = partition.probe(q)
    assert len(cells) == 5 and list(cells) == sorted(cells)
    scores = partition.centroids.astype(np.float64) @ q.astype(np.float32).astype(np.float64)
    assert set(cells) == set(np.argsort(-scores)[:5].tolist())
    assert partition.probe(q * 7.0) == cells  # the direction decides
    assert axes(2).probe(np.array(BOUNDARY)) == (0, 1)


def test_a_partition_fitted_on_the_corpus_is_refused_when_the_corpus_is_added() -> None:
    rng = np.random.default_rng(4)
    private = rng.standard_normal((200, 8))
    public = rng.standard_normal((200, 8))
    with quiet_faiss():
        fitted = PublicPartition.fit(private, cells=4, probes=1, source="oops: the corpus")
        fine = PublicPartition.fit(public, cells=4, probes=1, source="a public corpus")
    assert fitted.provenance.kind == "public" and fitted.provenance.training_vectors == 200
    # the store keeps float32 copies, normalised or not: still recognised
    stored = (private[:3] / np.linalg.norm(private[:3], axis=1, keepdims=True)).astype(np.float32)
    with pytest.raises(ValueError, match=r"3 of the documents given are among the vectors"):
        fitted.refuse_training(stored)
    fine.refuse_training(private)  # fitted elsewhere: accepted
    PublicPartition.random(dim=8, cells=4, probes=1).refuse_training(private)
    from dprag_core.retrieval.faiss_corpus import FaissCorpus

    corpus = FaissCorpus(dim=8, partition=fitted)
    with pytest.raises(ValueError, match="fitted on"):
        corpus.add(["a"], ["text"], private[:1])
    assert len(corpus) == 0


def test_fingerprints_see_through_scale_and_float32() -> None:
    x = np.random.default_rng(5).standard_normal((50, 16))
    fp = vector_fingerprints(x)
    assert len(set(fp.tolist())) == 50 and np.all(fp != 0)
    assert np.array_equal(vector_fingerprints((3 * x).astype(np.float32)), fp)
    assert vector_fingerprints(np.zeros((1, 16)))[0] == 0


def test_saved_partition_loads_identical_and_an_altered_file_is_refused(tmp_path: Path) -> None:
    partition = PublicPartition.random(dim=8, cells=16, probes=3, seed=9)
    path = tmp_path / "cells.npz"
    partition.save(path)
    loaded = PublicPartition.load(path)
    assert loaded.fingerprint == partition.fingerprint
    assert np.array_equal(loaded.centroids, partition.centroids)
    with np.load(path) as data:
        parts = dict(data)
    parts["centroids"] = parts["centroids"] * 1.01
    np.savez(path, **parts)
    with pytest.raises(ValueError, match="fingerprint does not match"):
        PublicPartition.load(path)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"centroids": np.zeros((2, 3)), "probes": 1}, "finite and non-zero"),
        ({"centroids": np.eye(3), "probes": 4}, r"probes must be in \[1, cells = 3\]"),
        ({"centroids": np.eye(3), "probes": 0}, "probes must be"),
        ({"centroids": np.ones(3), "probes": 1}, "shape"),
    ],
)
def test_bad_partitions_are_refused(kwargs: dict[str, object], error: str) -> None:
    provenance = PartitionProvenance("random", "test", 0)
    with pytest.raises(ValueError, match=error):
        PublicPartition(**kwargs, provenance=provenance)  # type: ignore[arg-type]


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="kind must be"):
        PartitionProvenance("private", "x", 0)
    with pytest.raises(ValueError, match="source must be"):
        PartitionProvenance("public", " ", 0)
    with pytest.raises(TypeError, match="probs"):
        PublicPartition(np.eye(2), probs=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="n >= cells"):
        PublicPartition.fit(np.eye(3), cells=4, probes=1, source="s")
    with pytest.raises(ValueError, match="query must have shape"):
        axes(1).probe(np.ones(DIM + 1))
