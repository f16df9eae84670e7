"""The public bound on one privacy unit's records in a partitioned corpus (core).

A partitioned search scores every record of the probed cells, so one unit's
records are bounded by the partition's ``max_unit_records`` when they are added:
``FaissCorpus.add`` refuses, before anything is stored, a batch that would put a
unit past it, whatever the other units hold; the bound is validated, saved with
the partition and named in the refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.faiss_corpus import FaissCorpus
from dprag_core.retrieval.unit_records import DEFAULT_MAX_UNIT_RECORDS, check_unit_records

DIM = 8


def _partition(bound: int = 3) -> PublicPartition:
    return PublicPartition.random(dim=DIM, cells=4, probes=2, seed=1, max_unit_records=bound)


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM))


def _add(corpus: FaissCorpus, prefix: str, units: list[str], seed: int = 0) -> None:
    ids = [f"{prefix}{i}" for i in range(len(units))]
    corpus.add(ids, [f"text {i}" for i in ids], _vectors(len(units), seed), units=units)


def test_the_default_bound_is_public_and_documented() -> None:
    assert DEFAULT_MAX_UNIT_RECORDS == 256
    assert PublicPartition.random(dim=2, cells=2, probes=1).max_unit_records == 256


@pytest.mark.parametrize(
    ("bad", "error"), [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_bad_bounds_are_refused_naming_the_parameter(bad: object, error: type) -> None:
    with pytest.raises(error, match="max_unit_records must be an integer >= 1"):
        PublicPartition.random(dim=2, cells=2, probes=1, max_unit_records=bad)  # type: ignore[arg-type]
    with pytest.raises(error, match="max_unit_records must be an integer >= 1"):
        _partition().with_max_unit_records(bad)  # type: ignore[arg-type]


def test_the_bound_travels_with_the_partition(tmp_path: Path) -> None:
    partition = _partition(7)
    assert partition.with_probes(1).max_unit_records == 7
    raised = partition.with_max_unit_records(20_000)
    assert raised.max_unit_records == 20_000 and raised.probes == partition.probes
    assert raised.fingerprint != partition.fingerprint
    partition.save(tmp_path / "p.npz")
    assert PublicPartition.load(tmp_path / "p.npz").max_unit_records == 7
    with np.load(tmp_path / "p.npz") as saved:
        data = {name: saved[name] for name in saved.files}
    meta = json.loads(str(data["meta"]))
    del meta["max_unit_records"]
    np.savez(tmp_path / "q.npz", **{**data, "meta": np.array(json.dumps(meta))})
    with pytest.raises(ValueError, match="records no max_unit_records"):
        PublicPartition.load(tmp_path / "q.npz")


def test_an_add_past_the_bound_is_refused_and_writes_nothing() -> None:
    corpus = FaissCorpus(dim=DIM, partition=_partition(3))
    _add(corpus, "a", ["x", "x", "y"])
    before = (len(corpus), corpus._index.ntotal)
    query = _vectors(1, 9)[0]
    found = [(d.id, d.score) for d in corpus.search(query, k=3)]
    with pytest.raises(ValueError, match=r"units\) more than max_unit_records = 3") as refused:
        _add(corpus, "b", ["z", "x", "x"], seed=1)  # x would hold 4
    message = str(refused.value)
    assert "with_max_unit_records" in message and "nothing was added" in message
    assert "'x'" not in message and " x " not in message  # never the unit
    assert (len(corpus), corpus._index.ntotal) == before
    assert [(d.id, d.score) for d in corpus.search(query, k=3)] == found
    _add(corpus, "b", ["z", "x"], seed=1)  # x reaches exactly 3: accepted (b0 is new)
    assert len(corpus) == 5


def test_one_batch_past_the_bound_is_refused_on_an_empty_corpus() -> None:
    corpus = FaissCorpus(dim=DIM, partition=_partition(2))
    with pytest.raises(ValueError, match="max_unit_records = 2"):
        _add(corpus, "a", ["u", "u", "u"])
    assert len(corpus) == 0


def test_the_refusal_depends_on_the_units_own_records_only() -> None:
    """Whatever the other units hold (none, or many at the bound), x's add is decided alike."""
    for others in (0, 1, 40):
        corpus = FaissCorpus(dim=DIM, partition=_partition(3))
        if others:
            units = [f"o{i // 3}" for i in range(3 * others)]  # every other unit at the bound
            _add(corpus, "o", units, seed=2)
        _add(corpus, "x", ["x", "x", "x"], seed=3)
        with pytest.raises(ValueError, match="max_unit_records = 3"):
            _add(corpus, "y", ["x"], seed=4)


def test_raising_the_bound_admits_the_unit() -> None:
    corpus = FaissCorpus(dim=DIM, partition=_partition(3).with_max_unit_records(10))
    _add(corpus, "a", ["x"] * 10)
    assert len(corpus) == 10


def test_a_flat_corpus_has_no_cells_and_no_bound() -> None:
    corpus = FaissCorpus(dim=DIM)
    _add(corpus, "a", ["x"] * 300)
    assert len(corpus) == 300


def test_check_unit_records_asks_only_about_the_units_added() -> None:
    asked: list[str] = []

    def stored(unit: str) -> int:
        asked.append(unit)
        return 1

    check_unit_records(["a", "b", "a"], stored, bound=3, key="units")
    assert sorted(asked) == ["a", "b"]
    with pytest.raises(ValueError, match=r"\(units\) more than max_unit_records = 2"):
        check_unit_records(["a", "a"], stored, bound=2, key="units")
