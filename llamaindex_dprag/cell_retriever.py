"""A LlamaIndex retriever over the probed cells of a public partition, for the postprocessors.

>>> from llamaindex_dprag.cell_retriever import PartitionedRetriever
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from dprag_core.retrieval.cells import PublicPartition, check_partition
from dprag_core.validation import positive_int
from llamaindex_dprag.sources import IndexSource

__all__ = ["PartitionedRetriever"]


class PartitionedRetriever(BaseRetriever):
    """The exact top ``similarity_top_k`` nodes of the probed cells of a ``VectorStoreIndex``.

    For the node postprocessors, whose guarantee needs a *complete* list: with
    ``similarity_top_k`` at least the number of nodes, it returns every node of
    the probed cells, best first (ties by id), each with the store's own score
    (give the postprocessor the same ``score_direction``). The store is read as
    :class:`~llamaindex_dprag.sources.IndexSource` reads it (``score_direction``
    is checked against it; a store dprag cannot query by cell is refused).
    """

    def __init__(
        self,
        index: Any,
        partition: PublicPartition,
        *,
        similarity_top_k: int,
        embed_model: Any = None,
        score_direction: str | None = None,
        score_range: tuple[float, float] | None = None,
    ) -> None:
        self.partition = check_partition(partition)
        self.similarity_top_k = positive_int("similarity_top_k", similarity_top_k)
        self.index = index
        self.source = IndexSource(
            index,
            embed_model=embed_model,
            partition=partition,
            score_direction=score_direction,
            score_range=score_range,
        )
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        question = query_bundle.query_str
        embedding = query_bundle.embedding or self.source.embed_model.get_query_embedding(question)
        return self.source.nodes(question, list(embedding), self.similarity_top_k)
