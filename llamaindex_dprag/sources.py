"""Where a DP query engine gets its scored candidates, without side doors.

:class:`IndexSource` (used for every ``VectorStoreIndex`` and for a
``VectorIndexRetriever``) embeds the question and queries the index's vector
store and docstore directly, asking for the number of candidates the
mechanism needs. It never calls ``BaseRetriever.retrieve``, which reports the
retrieved nodes to the instrumentation dispatcher (``RetrievalEndEvent``, span
results) and to the callback manager (``RETRIEVE`` events), and it skips
``VectorIndexRetriever``'s DEBUG log line that quotes the first 100 characters of
every retrieved node.

:class:`RetrieverSource` accepts any other ``BaseRetriever``: it calls
``retrieve`` once per question (the query engine runs it inside
:func:`~llamaindex_dprag._quiet.private_section`, so no handler sees the nodes)
and reads its list in the retriever's own order. What such a retriever logs or
sends elsewhere by itself is outside dprag's reach; prefer an index.

Which relation each source keeps (the argument behind ``DPQueryEngine``'s claims):

- :class:`IndexSource` reads the index's vector store through the store registry
  (:mod:`llamaindex_dprag.stores`: what its similarities are, how to query it
  exactly; a store whose scores or exactness cannot be established, and was not
  declared, or that is known to be approximate, is refused when built), asks it
  for its exact top-k in ``DEFAULT`` mode (a score per (query, node) pair),
  completes tie groups at the cut and orders ties by id
  (:func:`~dprag_core.retrieval.ties.tie_complete`): the first k of one fixed
  ranking, so it honours k. One added unit is inserted into that
  ranking: the first n distinct units change by one substitution, and the query
  enlarged until the last score falls to a threshold returns every node above
  it. Other query modes are refused when the source is built: MMR, SVM and
  regression modes rank a node by the *other* nodes, text search and hybrid
  modes score with corpus statistics (IDF, min-max fusion) that one added
  document changes for every node. A store that returns distances (FAISS
  ``IndexFlatL2``, Chroma, Qdrant's Euclid) must be declared
  ``score_direction="distance"``, and a similarity store (inner product,
  ``SimpleVectorStore``) must not be.
- :class:`RetrieverSource` returns one fixed list, whatever k: it can cap,
  re-rank or drop nodes unseen. It qualifies only with ``returns_everything=True``,
  the user's promise that ``retrieve`` returns its whole ranking (or at least
  every node above the mechanism's ``min_score``), best first; slicing a
  complete ranking honours k, and the two arguments above apply. The promise is
  refused for a retriever that queries, with the store's own query, a vector
  store whose own query is not exact (:func:`inexact_store_in`: Chroma, pgvector,
  Qdrant, LanceDB, an approximate FAISS index), whatever wraps it (a fusion,
  recursive or auto-retriever): no promise makes an index's answer exact, and
  the refusal names the exact path (the index, with its filters).

Nodes without a finite score or without their ``unit_key`` are dropped (they
keep their slot as placeholders), never an error after the charge.

>>> source = RetrieverSource.__new__(RetrieverSource)  # see DPQueryEngine.from_retriever
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, ObjectType, QueryBundle
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.embedding_record import named_model, refuse_other_model
from dprag_core.retrieval.scores import METRICS, ScoreScale, read_score
from dprag_core.retrieval.stores import (
    StoreFacts,
    describe_metric,
    exactness,
    first_inexact,
    refusal,
    refuse_empty,
    require_declarations,
)
from dprag_core.retrieval.ties import tie_complete
from dprag_core.validation import strict_bool
from llamaindex_dprag.cells import partitioned_reading
from llamaindex_dprag.stores import (
    STORES,
    Query,
    StoreReading,
    read_vector_store,
    stored_count,
)
from llamaindex_dprag.units import (
    ScoreDirection,
    check_direction,
    check_score_range,
    score_scale,
    to_scored_documents,
)

__all__ = [
    "LLAMAINDEX_SOURCES",
    "CandidateSource",
    "IndexSource",
    "RetrieverSource",
    "inexact_store_in",
    "store_metric",
]

LLAMAINDEX_SOURCES = (
    "DPQueryEngine.from_index(index) or from_retriever(VectorIndexRetriever) in the default "
    "query mode (the index's vector store, queried exactly and directly, honours k), or "
    "from_retriever(retriever, returns_everything=True) (your promise that "
    "retriever.retrieve returns its whole ranking, or at least every node above the "
    "mechanism's min_score, best first)"
)


_DIRECTION_FIX = (
    "pass the direction of the similarities its query returns: score_direction='similarity' "
    "when higher = closer (a cosine, an inner product), 'distance' when lower = closer (an "
    "L2 or cosine distance), with score_range=(low, high) in the store's own units"
)
_EXACT_FIX = (
    "pass exact_search=True (your promise that the vector store's query returns the exact "
    "top k of one ranking, best first)"
)


def store_metric(vector_store: Any) -> str | None:
    """``"distance"`` or ``"similarity"`` where the store registry establishes it, else None.

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> store_metric(SimpleVectorStore()), store_metric(object())
    ('similarity', None)
    """
    metric = read_vector_store(vector_store).facts.metric
    return None if metric is None else METRICS[metric].direction


def _direction(reading: StoreReading, given: str | None) -> str:
    """The score direction: the store's, checked against ``given`` (the user's declaration)."""
    facts = reading.facts
    if facts.metric is None:
        if given is None:
            raise refusal(
                facts.store,
                "dprag cannot establish what its similarities are (a similarity or a "
                f"distance): it reads {STORES.labels()}",
                _DIRECTION_FIX,
            )
        return given
    detected = METRICS[facts.metric].direction
    if given is None and detected == "similarity":
        return detected
    if given != detected:
        unit = METRICS[facts.metric].unit_range
        fix = f"score_direction={detected!r}"
        if unit is not None and detected == "distance":
            fix += f" (with score_range={unit} on unit-norm embeddings)"
        read = "read as similarities by default" if given is None else f"score_direction={given!r}"
        raise ValueError(
            f"{facts.store} returns {detected} scores ({describe_metric(facts.metric)}), "
            f"but {read}. Fix: {fix}"
        )
    return detected


class CandidateSource(Protocol):
    """Gives, for one question, a dprag ``Retriever`` ``(question, k) -> best k``.

    ``honours_k``: whether that retriever returns the first k of a fixed ranking.
    ``scale`` (optional, so not a member here): a
    :class:`~dprag_core.retrieval.scores.ScoreScale`, the public range of the
    scores that retriever returns. A source that has one gets a mechanism's
    ``min_score()`` checked against it when the engine is built
    (:func:`~dprag_core.pipeline.check_source`); :class:`IndexSource` and
    :class:`RetrieverSource` always have one.
    """

    @property
    def honours_k(self) -> bool:
        """Whether :meth:`bind`'s retriever honours k (module docstring)."""
        ...

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question`` that does its work lazily, on first call."""
        ...


class _Conversion:
    def __init__(
        self,
        *,
        unit_key: str | None,
        score_direction: str | None,
        score_range: tuple[float, float] | None,
        metadata_mode: MetadataMode,
    ) -> None:
        if unit_key is not None and not isinstance(unit_key, str):
            raise TypeError(f"unit_key must be a str or None, got {type(unit_key).__name__}")
        self.unit_key = unit_key
        self.score_direction: ScoreDirection = check_direction(score_direction or "similarity")
        self.score_range = check_score_range(score_range)
        self.metadata_mode = MetadataMode(metadata_mode)

    @property
    def scale(self) -> ScoreScale:
        """The public score scale of the converted scores (unclipped without a range)."""
        return score_scale(score_direction=self.score_direction, score_range=self.score_range)

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
    would. ``embed_model`` defaults to the index's. The store is read through
    the store registry (:mod:`llamaindex_dprag.stores`): ``score_direction``
    (``None``: ``"similarity"``, which a distance store refuses) is checked
    against what it returns; ``exact_search=True`` is your promise for a store
    the table does not know (it never overrides what dprag knows). ``exact``
    says how its results are exact.

    >>> # IndexSource(index, score_range=(-1, 1)).bind("question")("question", 5)
    """

    def __init__(
        self,
        index: Any,
        *,
        embed_model: Any = None,
        unit_key: str | None = None,
        score_direction: str | None = None,
        score_range: tuple[float, float] | None = None,
        metadata_mode: MetadataMode = MetadataMode.LLM,
        filters: Any = None,
        node_ids: list[str] | None = None,
        doc_ids: list[str] | None = None,
        query_mode: VectorStoreQueryMode | str = VectorStoreQueryMode.DEFAULT,
        alpha: float | None = None,
        vector_store_kwargs: Mapping[str, Any] | None = None,
        exact_search: bool = False,
        partition: PublicPartition | None = None,
    ) -> None:
        for attr in ("vector_store", "docstore", "index_struct"):
            if not hasattr(index, attr):
                raise TypeError(f"index must be a VectorStoreIndex, got {type(index).__name__}")
        exact_search = strict_bool("exact_search", exact_search)
        if score_direction is not None:
            check_direction(score_direction)
        if partition is None:
            self.reading = read_vector_store(index.vector_store)
        else:  # the exact query of the probed cells (llamaindex_dprag.cells)
            self.reading = partitioned_reading(index.vector_store, partition)
        facts = self.reading.facts
        refuse_empty(facts.store, stored_count(index.vector_store))  # once, before any charge
        require_declarations(
            facts,
            scores=score_direction is not None,
            exact=exact_search,
            supported=STORES.labels(),
            fix=f"declare both: {_DIRECTION_FIX}; and {_EXACT_FIX.removeprefix('pass ')}",
        )
        self.exact = exactness(facts, declared=exact_search, fix=_EXACT_FIX)
        super().__init__(
            unit_key=unit_key,
            score_direction=_direction(self.reading, score_direction),
            score_range=score_range,
            metadata_mode=metadata_mode,
        )
        self.index = index
        if filters is not None and not self.reading.filters:
            raise refusal(
                facts.store,
                "its query does not apply metadata filters (it raises on them)",
                "drop filters=, or use a store whose exact query filters (SimpleVectorStore, "
                "Chroma, PGVectorStore, Qdrant, LanceDB)",
            )
        if VectorStoreQueryMode(query_mode) != VectorStoreQueryMode.DEFAULT:
            raise ValueError(
                f"query_mode must be {VectorStoreQueryMode.DEFAULT.value!r} (a score per "
                f"question and node), got {VectorStoreQueryMode(query_mode).value!r}: other "
                "modes rank a node by the other nodes or by corpus statistics"
            )
        if embed_model is None:
            embed_model = getattr(index, "_embed_model", None)
        if embed_model is None:
            from llama_index.core import Settings

            embed_model = Settings.embed_model
        recorded = STORES.recorded_model(index.vector_store)  # once, before any charge
        refuse_other_model(facts.store, recorded, named_model(embed_model), "embed_model")
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

    @property
    def honours_k(self) -> bool:
        """True: the store's top-k, tie groups completed (module docstring)."""
        return True

    def _needs_embedding(self) -> bool:
        return bool(self.index.vector_store.is_embedding_query) and self.query_mode not in (
            VectorStoreQueryMode.TEXT_SEARCH,
            VectorStoreQueryMode.SPARSE,
        )

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question``; the question is embedded once, on first call."""
        embedding: list[list[float] | None] = []
        query = self.reading.querier(None)  # one per question: a full-scan store ranks once

        def retrieve(text: str, k: int) -> list[ScoredDocument]:
            if not embedding:
                needs = self._needs_embedding()
                embedding.append(self.embed_model.get_query_embedding(text) if needs else None)
            return self.search(text, embedding[0], k, query=query)

        return HonoursK(retrieve)

    def search(
        self, question: str, embedding: list[float] | None, k: int, *, query: Query | None = None
    ) -> list[ScoredDocument]:
        """The first ``k`` of the store's exact ranking for ``question`` (already embedded)."""
        return self.convert(self.nodes(question, embedding, k, query=query))

    def nodes(
        self, question: str, embedding: list[float] | None, k: int, *, query: Query | None = None
    ) -> list[NodeWithScore]:
        """:meth:`search`'s nodes, with the store's raw scores (tie groups completed)."""
        run = self.reading.querier(None) if query is None else query
        return tie_complete(
            lambda n: self._query(run, question, embedding, n),
            k,
            score=lambda pair: read_score(pair.score),
            ident=lambda pair: pair.node.node_id,
        )

    def _query(
        self, run: Query, question: str, embedding: list[float] | None, k: int
    ) -> list[NodeWithScore]:
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
        result = run(query, **self.vector_store_kwargs)
        if result.similarities is None:
            raise ValueError("the vector store returned no scores; DP retrieval needs them")
        nodes = self._nodes(result)
        if len(nodes) != len(result.similarities):
            raise ValueError("the vector store returned a different number of nodes and scores")
        return [
            NodeWithScore(node=n, score=read_score(s))
            for n, s in zip(nodes, result.similarities, strict=True)
        ]

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


def inexact_store_in(node: object) -> StoreFacts | None:
    """A vector store in ``node`` (or in the indexes and retrievers it holds) whose own query
    is not exact, or None.

    :func:`~dprag_core.retrieval.stores.first_inexact` over the store registry
    (:mod:`llamaindex_dprag.stores`).

    >>> from llama_index.core.vector_stores import SimpleVectorStore
    >>> inexact_store_in([SimpleVectorStore()]) is None
    True
    """
    return first_inexact(node, store_facts=_store_facts, children=_held)


def _store_facts(node: object) -> tuple[StoreFacts, bool] | None:
    if not isinstance(node, BasePydanticVectorStore):
        return None
    reading = read_vector_store(node)
    return reading.facts, reading.own_query_exact


def _held(node: object) -> list[object]:
    if isinstance(node, (list, tuple)):
        return list(node)
    if isinstance(node, dict):
        return list(node.values())
    if isinstance(node, BaseRetriever):
        return list(vars(node).values())
    if hasattr(node, "vector_store") and hasattr(node, "index_struct"):  # an index
        return [node.vector_store]
    return []


class RetrieverSource(_Conversion):
    """Candidates from any ``BaseRetriever``: one ``retrieve`` per question, in its order.

    ``returns_everything=True`` is your promise that ``retrieve`` returns its
    whole ranking, best first (or at least every node above the mechanism's
    ``min_score``); without it the query engine refuses this source (module
    docstring).
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        unit_key: str | None = None,
        score_direction: str | None = None,
        score_range: tuple[float, float] | None = None,
        metadata_mode: MetadataMode = MetadataMode.LLM,
        returns_everything: bool = False,
        exact_search: bool = False,
        partition: PublicPartition | None = None,
    ) -> None:
        if strict_bool("exact_search", exact_search):
            raise ValueError(
                "exact_search=True declares a vector store's query exact; for a retriever, "
                "pass returns_everything=True"
            )
        if partition is not None:
            raise ValueError(
                "partition= queries the cells of an index's vector store: use "
                "DPQueryEngine.from_index(index, partition=...), not a retriever"
            )
        super().__init__(
            unit_key=unit_key,
            score_direction=score_direction,
            score_range=score_range,
            metadata_mode=metadata_mode,
        )
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a BaseRetriever, got {type(retriever).__name__}")
        self.retriever = retriever
        self.returns_everything = bool(returns_everything)
        inexact = inexact_store_in(retriever) if self.returns_everything else None
        if inexact is not None:
            why = inexact.refused or f"dprag's exact query of it is its own: {inexact.exact}"
            raise ValueError(
                f"returns_everything=True on {type(retriever).__name__}: it queries "
                f"{inexact.store} with the store's own query, which is not exact (its index "
                f"answers; {why}), and no promise can make it so. Fix: "
                "DPQueryEngine.from_index(index, filters=...) or "
                "from_retriever(index.as_retriever(filters=...)): dprag queries the store exactly"
            )

    @property
    def honours_k(self) -> bool:
        """Only as declared: ``returns_everything=True``."""
        return self.returns_everything

    def bind(self, question: str) -> Retriever:
        """A retriever for ``question``: ``retrieve`` runs once, on first call."""
        docs: list[list[ScoredDocument]] = []

        def retrieve(query: str, k: int) -> list[ScoredDocument]:
            if not docs:
                docs.append(self.convert(self.retriever.retrieve(QueryBundle(query))))
            return docs[0][:k]

        return HonoursK(retrieve) if self.returns_everything else retrieve
