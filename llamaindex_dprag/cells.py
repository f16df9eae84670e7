"""The partitioned search on LlamaIndex's vector stores: cells tagged at insert, probed cells read.

A :class:`~dprag_core.retrieval.cells.PublicPartition` gives each node the cell
of its embedding (:func:`tag_nodes`, before the index is built) and each
question a fixed number of probed cells; ``DPQueryEngine.from_index(...,
partition=...)`` and :class:`~llamaindex_dprag.cell_retriever.PartitionedRetriever`
(for the node postprocessors) then query the store for the exact top k among the nodes of
those cells only: the store's exact query with its registered cell filter
(:func:`~llamaindex_dprag.stores.read_vector_store`; each store's filter and the
index that serves it: its module in :mod:`llamaindex_dprag.registered`).

A node without a cell is never found (recall, not privacy). What a question
retrieves is the first k of one fixed ranking of the nodes in its probed cells,
so one added unit is inserted into it and nothing else moves (docs/design.md §11).

>>> from llama_index.core.schema import TextNode
>>> from dprag_core.retrieval.cells import PublicPartition
>>> node = TextNode(text="t", embedding=[1.0, 0.0])
>>> tag_nodes([node], PublicPartition.random(dim=2, cells=2, probes=1))[0].metadata
{'dprag_cell': 1}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode

from dprag_core.retrieval import cell_search
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition, check_partition
from dprag_core.validation import missing_extra
from llamaindex_dprag.stores import StoreReading, read_vector_store

__all__ = ["partitioned_faiss_store", "partitioned_reading", "tag_nodes"]


# -- writing ---------------------------------------------------------------------------


def tag_nodes(
    nodes: Sequence[BaseNode], partition: PublicPartition, *, embed_model: Any = None
) -> list[BaseNode]:
    """``nodes`` with their cell in ``metadata["dprag_cell"]`` (and their embedding set).

    Nodes without an embedding are embedded with ``embed_model`` (so the index
    does not embed them again). Refused (ValueError, nothing tagged) when a
    vector is among the partition's training vectors. The cell is kept out of
    the text that is embedded and of the text the model reads.
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
    partition.refuse_training(vectors, what="nodes")
    for node, cell in zip(nodes, partition.assign(vectors), strict=True):
        node.metadata[CELL_KEY] = int(cell)
        for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
            if CELL_KEY not in excluded:
                excluded.append(CELL_KEY)
    return nodes


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
