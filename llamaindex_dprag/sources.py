"""Where a DP query engine gets its scored candidates, without side doors.

:class:`IndexSource` (used for every ``VectorStoreIndex`` and for a
``VectorIndexRetriever``) embeds the question and queries the index's vector
store and docstore directly, asking for exactly the number of candidates the
mechanism needs. It never calls ``BaseRetriever.retrieve``, which reports the
retrieved nodes to the instrumentation dispatcher (``RetrievalEndEvent``, span
results) and to the callback manager (``RETRIEVE`` events), and it skips
``VectorIndexRetriever``'s DEBUG log line that quotes the first 100 characters of
every retrieved node.

:class:`RetrieverSource` accepts any other ``BaseRetriever``: it calls
``retrieve`` once per question (the query engine runs it inside
:func:`~llamaindex_dprag._quiet.private_section`, so no handler sees the nodes)
and keeps the best ``k`` by score. What such a retriever logs or sends elsewhere
by itself is outside dprag's reach; prefer an index.

>>> source = RetrieverSource.__new__(RetrieverSource)  # see DPQueryEngine.from_retriever
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, ObjectType, QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.documents import ScoredDocument
from llamaindex_dprag.units import (
    ScoreDirection,
    check_direction,
    check_score_range,
    to_scored_documents,
)

__all__ = ["CandidateSource", "IndexSource", "RetrieverSource"]


class CandidateSource(Protocol):
    """Gives, for one question, a dprag ``Retriever`` ``(question, k) -> best k``."""

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question`` that does its work lazily, on first call."""
        ...


class _Conversion:
    def __init__(
        self,
        *,
        unit_key: str | None,
        score_direction: str,
        score_range: tuple[float, float] | None,
        metadata_mode: MetadataMode,
    ) -> None:
        if unit_key is not None and not isinstance(unit_key, str):
            raise TypeError(f"unit_key must be a str or None, got {type(unit_key).__name__}")
        self.unit_key = unit_key
        self.score_direction: ScoreDirection = check_direction(score_direction)
        self.score_range = check_score_range(score_range)
        self.metadata_mode = MetadataMode(metadata_mode)

    def convert(self, nodes: Sequence[NodeWithScore]) -> list[ScoredDocument]:
        return to_scored_documents(
            nodes,
            unit_key=self.unit_key,
            score_direction=self.score_direction,
            score_range=self.score_range,
            metadata_mode=self.metadata_mode,
        )


class IndexSource(_Conversion):
    """Top-k candidates straight from a ``VectorStoreIndex``'s vector store and docstore.

    ``filters``, ``node_ids``, ``doc_ids``, ``query_mode``, ``alpha`` and
    ``vector_store_kwargs`` are passed to the store as a ``VectorIndexRetriever``
    would. ``embed_model`` defaults to the index's.

    >>> # IndexSource(index, score_range=(-1, 1)).bind("question")("question", 5)
    """

    def __init__(
        self,
        index: Any,
        *,
        embed_model: Any = None,
        unit_key: str | None = None,
        score_direction: str = "similarity",
        score_range: tuple[float, float] | None = None,
        metadata_mode: MetadataMode = MetadataMode.LLM,
        filters: Any = None,
        node_ids: list[str] | None = None,
        doc_ids: list[str] | None = None,
        query_mode: VectorStoreQueryMode | str = VectorStoreQueryMode.DEFAULT,
        alpha: float | None = None,
        vector_store_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            unit_key=unit_key,
            score_direction=score_direction,
            score_range=score_range,
            metadata_mode=metadata_mode,
        )
        for attr in ("vector_store", "docstore", "index_struct"):
            if not hasattr(index, attr):
                raise TypeError(f"index must be a VectorStoreIndex, got {type(index).__name__}")
        self.index = index
        if embed_model is None:
            embed_model = getattr(index, "_embed_model", None)
        if embed_model is None:
            from llama_index.core import Settings

            embed_model = Settings.embed_model
        self.embed_model: Any = embed_model
        self.filters = filters
        self.node_ids = node_ids
        self.doc_ids = doc_ids
        self.query_mode = VectorStoreQueryMode(query_mode)
        self.alpha = alpha
        self.vector_store_kwargs = dict(vector_store_kwargs or {})

    @classmethod
    def from_vector_retriever(cls, retriever: Any, **conversion: Any) -> IndexSource:
        """The same store query as a ``VectorIndexRetriever`` (its filters and mode)."""
        return cls(
            retriever._index,
            embed_model=retriever._embed_model,
            filters=retriever._filters,
            node_ids=retriever._node_ids,
            doc_ids=retriever._doc_ids,
            query_mode=retriever._vector_store_query_mode,
            alpha=retriever._alpha,
            vector_store_kwargs=retriever._kwargs,
            **conversion,
        )

    def _needs_embedding(self) -> bool:
        return bool(self.index.vector_store.is_embedding_query) and self.query_mode not in (
            VectorStoreQueryMode.TEXT_SEARCH,
            VectorStoreQueryMode.SPARSE,
        )

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question``; the question is embedded once, on first call."""
        embedding: list[list[float] | None] = []

        def retrieve(query: str, k: int) -> list[ScoredDocument]:
            if not embedding:
                needs = self._needs_embedding()
                embedding.append(self.embed_model.get_query_embedding(query) if needs else None)
            return self.search(query, embedding[0], k)

        return retrieve

    def search(self, question: str, embedding: list[float] | None, k: int) -> list[ScoredDocument]:
        """The best ``k`` candidates for ``question`` (already embedded)."""
        query = VectorStoreQuery(
            query_embedding=embedding,
            similarity_top_k=k,
            node_ids=self.node_ids,
            doc_ids=self.doc_ids,
            query_str=question,
            mode=self.query_mode,
            alpha=self.alpha,
            filters=self.filters,
        )
        result = self.index.vector_store.query(query, **self.vector_store_kwargs)
        if result.similarities is None:
            raise ValueError("the vector store returned no scores; DP retrieval needs them")
        nodes = self._nodes(result)
        if len(nodes) != len(result.similarities):
            raise ValueError("the vector store returned a different number of nodes and scores")
        scored = [
            NodeWithScore(node=n, score=float(s))
            for n, s in zip(nodes, result.similarities, strict=True)
        ]
        return self.convert(scored)[:k]

    def _nodes(self, result: Any) -> list[Any]:
        docstore = self.index.docstore
        if result.nodes:
            # like VectorIndexRetriever: non-text nodes are replaced from the docstore
            wanted = [
                n.node_id
                for n in result.nodes
                if n.as_related_node_info().node_type != ObjectType.TEXT
            ]
            found = {n.node_id: n for n in docstore.get_nodes(wanted, raise_error=False)}
            return [found.get(n.node_id, n) for n in result.nodes]
        ids = list(result.ids or [])
        nodes_dict = self.index.index_struct.nodes_dict
        return list(docstore.get_nodes([nodes_dict.get(i, i) for i in ids]))


class RetrieverSource(_Conversion):
    """Candidates from any ``BaseRetriever``: one ``retrieve`` per question, best k kept.

    Configure the retriever to return at least the mechanism's
    ``candidates_needed()`` nodes: fewer are padded by the mechanism, more are
    cut to the best by score.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        unit_key: str | None = None,
        score_direction: str = "similarity",
        score_range: tuple[float, float] | None = None,
        metadata_mode: MetadataMode = MetadataMode.LLM,
    ) -> None:
        super().__init__(
            unit_key=unit_key,
            score_direction=score_direction,
            score_range=score_range,
            metadata_mode=metadata_mode,
        )
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a BaseRetriever, got {type(retriever).__name__}")
        self.retriever = retriever

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question``: ``retrieve`` runs once, on first call."""
        docs: list[list[ScoredDocument]] = []

        def retrieve(query: str, k: int) -> list[ScoredDocument]:
            if not docs:
                docs.append(self.convert(self.retriever.retrieve(QueryBundle(query))))
            return docs[0][:k]

        return retrieve
