"""The partitioned search on LlamaIndex's vector stores: cells tagged at insert, probed cells read.

A :class:`~dprag_core.retrieval.cells.PublicPartition` gives each node the cell
of its embedding (:func:`tag_nodes`, before the index is built) and each
question a fixed number of probed cells; ``DPQueryEngine.from_index(...,
partition=...)`` and :class:`~llamaindex_dprag.cell_retriever.PartitionedRetriever`
(for the node postprocessors) then query the store for the exact top k among the nodes of
those cells only: the store's exact query with its registered cell filter
(:func:`~llamaindex_dprag.stores.read_vector_store`; each store's filter and the
index that serves it: its module in :mod:`llamaindex_dprag.registered`).

With ``unit_key``, :func:`tag_nodes` also refuses nodes that would give one
privacy unit more than the partition's public ``max_unit_records`` nodes (those
given plus, with ``vector_store=``, those the store holds). A node without a
cell is never found (recall, not privacy). What a question
retrieves is the first k of one fixed ranking of the nodes in its probed cells,
so one added unit is inserted into it and nothing else moves (docs/design.md §11).

>>> from llama_index.core.schema import TextNode
>>> from dprag_core.retrieval.cells import PublicPartition
>>> node = TextNode(text="t", embedding=[1.0, 0.0])
>>> tag_nodes([node], PublicPartition.random(dim=2, cells=2, probes=1))[0].metadata
{'dprag_cell': 1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode

from dprag_core.retrieval import cell_search
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition, check_partition
from dprag_core.retrieval.stores import refusal
from dprag_core.retrieval.unit_records import check_added_units
from dprag_core.validation import missing_extra
from llamaindex_dprag.stores import STORES, StoreReading, read_vector_store, stored_count

__all__ = ["partitioned_faiss_store", "partitioned_reading", "tag_nodes"]


# -- writing ---------------------------------------------------------------------------


def tag_nodes(
    nodes: Sequence[BaseNode],
    partition: PublicPartition,
    *,
    embed_model: Any = None,
    unit_key: str | None = None,
    vector_store: Any = None,
) -> list[BaseNode]:
    """``nodes`` with their cell in ``metadata["dprag_cell"]`` (and their embedding set).

    Nodes without an embedding are embedded with ``embed_model`` (so the index
    does not embed them again). Refused (ValueError, nothing tagged) when a
    vector is among the partition's training vectors. The cell is kept out of
    the text that is embedded and of the text the model reads.

    ``unit_key``: the metadata key of a node's privacy unit (the engine's;
    ``None``: each node is its own unit). With it, every node must carry that
    key, and the call is refused (ValueError naming ``unit_key`` and the bound,
    nothing tagged) when a unit would hold more than
    ``partition.max_unit_records`` nodes: those given plus, when
    ``vector_store`` is the store they go to, those it holds already (counted
    by its exact query with an equality filter, first ``bound + 1``). Without
    ``vector_store`` the nodes given are taken to be all of their units' nodes
    (a new index built from them). A store whose query applies no metadata
    filter (``FaissVectorStore``, which keeps no metadata) cannot count a
    unit's nodes and is refused as ``vector_store``: tag all of a unit's nodes
    in one call. The refusal depends on that unit's nodes only
    (:mod:`~dprag_core.retrieval.unit_records`).
    """
    partition = check_partition(partition)
    nodes = list(nodes)
    missing = [n for n in nodes if n.embedding is None]
    if missing:
        if embed_model is None:
            raise ValueError("embed_model is needed for nodes without an embedding")
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in missing]
        for node, vector in zip(missing, embed_model.get_text_embedding_batch(texts), strict=True):
            node.embedding = list(vector)
    vectors = np.array([n.embedding for n in nodes], dtype=np.float64).reshape(len(nodes), -1)
    if unit_key is not None and nodes:
        _check_units(nodes, vectors[0], partition.max_unit_records, unit_key, vector_store)
    partition.refuse_training(vectors, what="nodes")
    for node, cell in zip(nodes, partition.assign(vectors), strict=True):
        node.metadata[CELL_KEY] = int(cell)
        for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
            if CELL_KEY not in excluded:
                excluded.append(CELL_KEY)
    return nodes


def _check_units(
    nodes: list[BaseNode], probe: Any, bound: int, unit_key: str, vector_store: Any
) -> None:
    """Refuse the nodes if a unit would hold more than ``bound`` nodes (given plus stored)."""
    check_added_units(
        [n.metadata for n in nodes],
        unit_key,
        bound=bound,
        stored=lambda units: (
            {}
            if vector_store is None
            else _stored_records(vector_store, probe, unit_key, units, bound)
        ),
        what="node",
    )


def _stored_records(
    vector_store: Any, probe: Any, key: str, units: Mapping[str, Any], limit: int
) -> dict[str, int]:
    """Per unit, the nodes ``vector_store`` holds: its exact query with an equality filter.

    ``probe``: the query vector (any vector of the store's dimension: only the count is read).
    """
    from llama_index.core.vector_stores.types import (
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
    )

    support = STORES.lookup(vector_store)
    counter = None if support is None else getattr(support, "unit_records", None)
    if counter is not None:
        return dict(counter(vector_store, key, units, limit))
    if stored_count(vector_store) == 0:
        return {}
    reading = read_vector_store(vector_store)
    if not reading.filters or reading.facts.refused is not None or reading.facts.exact is None:
        raise refusal(
            reading.facts.store,
            "dprag cannot count one unit's nodes in it (its query applies no metadata filter, "
            "or is not exact)",
            "tag all of a unit's nodes in one call, without vector_store=",
        )
    out: dict[str, int] = {}
    for unit, value in units.items():
        same = MetadataFilter(key=key, value=value, operator=FilterOperator.EQ)
        q = VectorStoreQuery(
            query_embedding=[float(v) for v in probe],
            similarity_top_k=limit + 1,
            filters=MetadataFilters(filters=[same]),
        )
        found = reading.querier(None)(q)
        out[unit] = len(found.ids if found.ids is not None else (found.nodes or []))
    return out


def partitioned_faiss_store(partition: PublicPartition) -> Any:
    """A ``FaissVectorStore`` over the partition's ``IndexIVFFlat`` (cosine; adds assign cells).

    Use it with ``score_range=COSINE_RANGE``; its nodes need no tag (the list
    is the cell).
    """
    partition = check_partition(partition)
    try:
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError as exc:
        raise missing_extra("partitioned_faiss_store", exc, extra="llamaindex,faiss") from exc
    return FaissVectorStore(faiss_index=cell_search.faiss_partitioned_index(partition))


# -- reading ---------------------------------------------------------------------------


def partitioned_reading(vector_store: Any, partition: PublicPartition) -> StoreReading:
    """The registered reading of ``vector_store``, its query restricted to the probed cells.

    :func:`~llamaindex_dprag.stores.read_vector_store` with ``partition``:
    refused (ValueError naming the store and the fix) for a store dprag does
    not partition and for a FAISS store whose index is not the partition's.
    Creates the store's index on the cell where it has one (PGVector: a B-tree;
    Qdrant server: a payload index; LanceDB: a bitmap index).
    """
    return read_vector_store(vector_store, partition)
