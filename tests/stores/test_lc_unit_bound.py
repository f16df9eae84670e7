"""One privacy unit's documents in a partitioned LangChain store are bounded when added.

``langchain_dprag.cells.add_documents(..., unit_key=...)`` (and
``partitioned_faiss``) refuse, before anything is written, an add that would
give a unit more than the partition's ``max_unit_records`` documents: those the
store holds (counted through its registration) plus those given. Every store
the partition reaches is checked: the refusal writes nothing, names
``unit_key`` and the bound, and depends on that unit's documents only.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cell_cases import DIM, at, axes
from cell_stores import LC_CELL_KINDS, RowEmbeddings, lc_empty
from langchain_core.documents import Document

from langchain_dprag.cells import add_documents, partitioned_faiss
from langchain_dprag.stores import STORES, read_store

BOUND = 3


def _docs(units: list[str], start: int = 0) -> list[Document]:
    return [
        Document(page_content=f"record {start + i}", metadata={"ref": u}, id=str(uuid.uuid4()))
        for i, u in enumerate(units)
    ]


def _store(request: pytest.FixtureRequest, kind: str) -> Any:
    emb = RowEmbeddings([], query=at(30.0))
    if kind == "faiss":
        return partitioned_faiss([], emb, axes(2))
    pg = request.getfixturevalue("pg_url") if kind.startswith("pgvector") else None
    return lc_empty(kind, emb, pg)


def _held(store: Any) -> int:
    """How many documents ``store`` holds (its count, else its exact search's first 100)."""
    count = STORES.count(store)
    if count is not None:
        return count
    reading = read_store(store)
    assert reading.search is not None
    return len(reading.search(None)(list(at(0.0)), 100))


@pytest.mark.parametrize("kind", LC_CELL_KINDS)
def test_an_add_past_the_bound_is_refused_and_writes_nothing(
    request: pytest.FixtureRequest, kind: str
) -> None:
    partition = axes(2).with_max_unit_records(BOUND)
    store = _store(request, kind)
    add_documents(store, _docs(["a", "a", "b", "b", "b"]), partition, unit_key="ref")
    assert _held(store) == 5
    with pytest.raises(ValueError, match=r"unit_key='ref'\) more than max_unit_records = 3"):
        add_documents(store, _docs(["c", "a", "a"], 5), partition, unit_key="ref")
    assert _held(store) == 5  # nothing written, c included
    with pytest.raises(ValueError, match="max_unit_records = 3"):
        add_documents(store, _docs(["b"], 8), partition, unit_key="ref")
    with pytest.raises(ValueError, match=r"metadata\[unit_key\]"):
        add_documents(store, [Document(page_content="no unit")], partition, unit_key="ref")
    assert _held(store) == 5
    add_documents(store, _docs(["c", "a", "c", "c"], 9), partition, unit_key="ref")
    assert _held(store) == 9
    raised = partition.with_max_unit_records(5)
    add_documents(store, _docs(["a", "a"], 13), raised, unit_key="ref")
    assert _held(store) == 11


def test_partitioned_faiss_bounds_its_first_documents() -> None:
    emb = RowEmbeddings([], query=at(30.0))
    partition = axes(2).with_max_unit_records(BOUND)
    with pytest.raises(ValueError, match=r"unit_key='ref'\) more than max_unit_records = 3"):
        partitioned_faiss(_docs(["a"] * 4), emb, partition, unit_key="ref")
    store = partitioned_faiss(_docs(["a"] * 3), emb, partition, unit_key="ref")
    assert store.index.ntotal == 3 and store.index.d == DIM


def test_the_refusal_does_not_depend_on_other_units() -> None:
    """x's fourth document is refused whatever else the store holds."""
    partition = axes(2).with_max_unit_records(BOUND)
    for others in (0, 2, 30):
        store = lc_empty("inmemory", RowEmbeddings([], query=at(30.0)))
        if others:
            units = [f"o{i // BOUND}" for i in range(BOUND * others)]
            add_documents(store, _docs(units), partition, unit_key="ref")
        add_documents(store, _docs(["x"] * BOUND, 1000), partition, unit_key="ref")
        with pytest.raises(ValueError, match="max_unit_records = 3"):
            add_documents(store, _docs(["x"], 2000), partition, unit_key="ref")


def test_without_a_unit_key_each_document_is_its_own_unit() -> None:
    store = lc_empty("inmemory", RowEmbeddings([], query=at(30.0)))
    add_documents(store, _docs(["a"] * 5), axes(2).with_max_unit_records(1))
    assert _held(store) == 5
