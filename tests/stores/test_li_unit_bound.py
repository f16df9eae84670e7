"""One privacy unit's nodes in a partitioned LlamaIndex store are bounded when tagged.

``llamaindex_dprag.cells.tag_nodes(..., unit_key=..., vector_store=...)``
refuses, before anything is tagged or stored, nodes that would give a unit more
than the partition's ``max_unit_records`` nodes: those given plus those the
store holds (its exact query with an equality filter). Every store the
partition reaches is checked; FAISS, which keeps no metadata, is refused as
``vector_store`` and bounds the nodes given.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cell_cases import at, axes
from cell_stores import LI_CELL_KINDS, li_query_embedding
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from store_cases import li_vector_store

from llamaindex_dprag.cells import partitioned_faiss_store, tag_nodes
from llamaindex_dprag.stores import stored_count

BOUND = 3


def _nodes(units: list[str]) -> list[TextNode]:
    return [
        TextNode(
            id_=str(uuid.uuid4()),
            text=f"record {u}",
            metadata={"ref": u},
            embedding=list(at(10.0 * i)),
        )
        for i, u in enumerate(units)
    ]


@pytest.mark.parametrize("kind", [k for k in LI_CELL_KINDS if k != "faiss"])
def test_nodes_past_the_bound_are_refused_and_nothing_is_stored(
    request: pytest.FixtureRequest, kind: str
) -> None:
    partition = axes(2).with_max_unit_records(BOUND)
    pg = request.getfixturevalue("pg_url") if kind.startswith("pgvector") else None
    store = li_vector_store(kind, pg)
    index = VectorStoreIndex(
        tag_nodes(_nodes(["a", "a", "b", "b", "b"]), partition, unit_key="ref", vector_store=store),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=li_query_embedding(at(30.0)),
    )

    def held() -> Any:
        return stored_count(store)

    before = held()
    for units in (["c", "a", "a"], ["b"]):
        fresh = _nodes(units)
        with pytest.raises(ValueError, match=r"unit_key='ref'\) more than max_unit_records = 3"):
            tag_nodes(fresh, partition, unit_key="ref", vector_store=store)
        assert all("dprag_cell" not in n.metadata for n in fresh)  # nothing tagged
    with pytest.raises(ValueError, match=r"metadata\[unit_key\]"):
        tag_nodes([TextNode(text="no unit", embedding=list(at(0.0)))], partition, unit_key="ref")
    assert held() == before
    index.insert_nodes(tag_nodes(_nodes(["c", "a"]), partition, unit_key="ref", vector_store=store))
    with pytest.raises(ValueError, match="max_unit_records = 3"):
        tag_nodes(_nodes(["a"]), partition, unit_key="ref", vector_store=store)


def test_faiss_keeps_no_metadata_so_it_bounds_the_nodes_given() -> None:
    partition = axes(2).with_max_unit_records(BOUND)
    store = partitioned_faiss_store(partition)
    VectorStoreIndex(
        tag_nodes(_nodes(["a"]), partition, unit_key="ref", vector_store=store),  # empty: 0
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=li_query_embedding(at(30.0)),
    )
    with pytest.raises(ValueError, match="cannot count one unit's nodes"):
        tag_nodes(_nodes(["a"]), partition, unit_key="ref", vector_store=store)
    with pytest.raises(ValueError, match="max_unit_records = 3"):
        tag_nodes(_nodes(["a"] * 4), partition, unit_key="ref")
    assert len(tag_nodes(_nodes(["a"] * 3), partition, unit_key="ref")) == 3
