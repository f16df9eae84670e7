"""Turn a LangChain retriever or vector store into a dprag ``Retriever`` callable.

The retrieved documents are never handed to a callback: the user's retriever
runs *sealed* (no inherited callbacks, tracing off; see
:mod:`langchain_dprag._sealed`), so nothing inside it is traced, and a store
call's failure leaves as the one fixed failure (:func:`dprag_core.errors.guarded`).
How many store calls a query makes depends on the corpus (a threshold
mechanism's search grows until it is exhausted), so the chain reports its
retrieval as *one* retriever run per query (:mod:`langchain_dprag.chain`).

Which relation each path keeps (the argument behind ``DPRAGChain``'s claims):

- ``vectorstore=``: the store is opened through the store table
  (:func:`~langchain_dprag.vectorstores.open_store`: what its scores are, how
  its results are exact; refused when built if either cannot be established and
  was not declared); its exact top-n, tie groups at the cut completed and ordered
  by id, is the first n of one fixed ranking of (question, document) pairs: it
  honours k. One added unit
  is inserted into that ranking; the first n distinct units then change by one
  substitution (:func:`~dprag_core.retrieval.units.top_units`), and the query
  enlarged until the last score falls to a threshold returns every document
  above it (:func:`~dprag_core.retrieval.above.retrieve_above`).
- a vector store's own retriever (``store.as_retriever(...)``, a
  ``VectorStoreRetriever``) is never run as it is: it is taken apart into its
  store and its search, and the store is searched as with ``vectorstore=``
  (no promise needed, and none accepted in place of the store table). Its
  ``search_kwargs`` (and keywords bound with ``.bind``) may hold ``k`` (ignored:
  the count is the mechanism's) and ``filter``, in the store's own format,
  applied by the store table's exact filtered search
  (:meth:`~langchain_dprag.stores.StoreReading.searcher`): the filter selects
  documents by their own metadata, so the filtered ranking is still one fixed
  ranking and one added unit is inserted into it. Anything else is refused when
  built, naming the exact alternative: ``search_type="mmr"`` (ranks each
  document by the others), ``"similarity_score_threshold"`` (cuts at a
  relevance score, so fewer than k no longer means "exhausted"), and any other
  search keyword (``fetch_k``, ``ef``, ``search_params``, ``score_threshold``,
  ...: each tunes an approximate search or changes the ranking).
- ``retriever=`` any other ``BaseRetriever`` may cap, ignore ``k``, re-rank by
  other documents or drop scores; none of that can be seen from outside, so it
  qualifies only with ``retriever_honours_k=True``: the user's promise that
  ``invoke(question, k=k)`` returns the first ``min(k, N)`` of a fixed ranking,
  best first (and, for threshold mechanisms, non-increasing scores in
  ``metadata[score_key]``). Then the same two arguments apply. The promise is
  refused for a retriever that searches, with the store's own search, a
  vector store whose own search is not exact (:func:`inexact_store_in`: it
  holds one, or a retriever that does, e.g. a self-query, multi-vector or
  ensemble retriever over Chroma, pgvector, Qdrant, LanceDB or an approximate
  FAISS index): their own searches use their HNSW or IVF indexes, which no
  promise can make exact; the refusal names the exact alternative (the store,
  or its own retriever with a filter). There is no approximate path behind
  ``retriever_honours_k``. A retriever over a brute-force or flat store
  (``InMemoryVectorStore``, FAISS ``IndexFlat*``) keeps the promise's meaning,
  and dprag's own ``DPRetriever`` qualifies: it searches through the store table.

Configured and composed retrievers (:func:`resolve`): ``retriever.with_config(...)``
and ``.bind(...)`` are taken apart (callbacks, tags, metadata and listeners
are observers and are dropped: the retriever runs sealed; a bound ``k`` is
refused, since the count is the mechanism's); an LCEL pipeline ending in a
retriever (``rewrite | retriever``) runs its steps on the question, sealed, and
asks the retriever for ``k``. A step *after* the retriever (a filter, a
re-ranker, a compressor) may drop, reorder or add documents, so the count
could not be enforced: such a pipeline is refused when the chain is built, as
is anything else that does not end in a retriever.

Documents that cannot be used (no score where one is needed, no ``unit_key``,
a NaN score, a reserved id) become placeholders that keep their slot and are
dropped, never an error: the query has already been charged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableBinding, RunnableSequence
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.stores import StoreFacts, first_inexact
from langchain_dprag._sealed import run_sealed, sealed_config, unsealable_config
from langchain_dprag.cells import partitioned_reading
from langchain_dprag.errors import guarded
from langchain_dprag.stores import read_store
from langchain_dprag.units import to_scored_document
from langchain_dprag.vectorstores import COSINE, OpenedStore, ScoreFunction, open_store

__all__ = ["LANGCHAIN_SOURCES", "DocumentSource", "Resolved", "inexact_store_in", "resolve"]

LANGCHAIN_SOURCES = (
    "vectorstore= (a store whose scores and exact search dprag establishes or you declare: "
    "its exact search honours k), or "
    "retriever=store.as_retriever() (similarity search, optionally with "
    "search_kwargs={'filter': ...}: searched exactly as the store), or "
    "retriever= with retriever_honours_k=True (your promise that "
    "retriever.invoke(question, k=k) returns the first min(k, N) documents of the store's "
    "ranking, best first, with non-increasing scores in metadata[score_key] for "
    "threshold mechanisms)"
)


@dataclass(frozen=True)
class Resolved:
    """A retriever taken apart: query ``steps``, then ``retriever`` or ``vectorstore``.

    ``filter``: the store's filter (its own format), applied by its exact search.
    """

    steps: tuple[Runnable[Any, Any], ...] = ()
    retriever: BaseRetriever | None = None
    vectorstore: VectorStore | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    filter: Any = None


_EXACT_ALTERNATIVE = (
    "store.as_retriever() (search_type='similarity'), with search_kwargs={'filter': ...} "
    "in the store's own format to filter: dprag searches the store exactly"
)


def _store_query(retriever: VectorStoreRetriever, bound: Mapping[str, Any]) -> Resolved:
    """A store's own retriever as its store and filter (module docstring); ValueError if not."""
    search_type = retriever.search_type
    if search_type != "similarity":
        why = {
            "mmr": "ranks each document by the documents already chosen, so one added "
            "document can reorder the others",
            "similarity_score_threshold": "cuts the results at a relevance score, so "
            "fewer than k coming back no longer means the store is exhausted (a mechanism "
            "selects by score itself: MuRAG's tau, DPRetriever's threshold)",
        }.get(search_type, "is not a plain similarity search")
        raise ValueError(f"retriever: search_type={search_type!r} {why}. Fix: {_EXACT_ALTERNATIVE}")
    kwargs = {**retriever.search_kwargs, **bound}
    unknown = sorted(set(kwargs) - {"k", "filter"})
    if unknown:
        raise ValueError(
            f"retriever: search keywords {unknown} are not part of dprag's exact search (a "
            "keyword such as fetch_k, ef, search_params or score_threshold tunes an "
            "approximate search, widens or cuts the results, or re-ranks them). Fix: "
            + _EXACT_ALTERNATIVE
        )
    return Resolved(vectorstore=retriever.vectorstore, filter=kwargs.get("filter"))


def inexact_store_in(node: object) -> StoreFacts | None:
    """A store in ``node`` (or in retrievers it holds) whose own search is not exact, or None.

    :func:`~dprag_core.retrieval.stores.first_inexact` over the store table
    (:mod:`langchain_dprag.stores`); nothing under a retriever marked
    ``exact_store_search`` (dprag's ``DPRetriever``) is looked into.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> inexact_store_in([InMemoryVectorStore(DeterministicFakeEmbedding(size=4))]) is None
    True
    """
    return first_inexact(node, store_facts=_store_facts, children=_held)


def _store_facts(node: object) -> tuple[StoreFacts, bool] | None:
    if not isinstance(node, VectorStore):
        return None
    reading = read_store(node)
    return reading.facts, reading.own_search_exact


def _held(node: object) -> list[object]:
    if isinstance(node, (list, tuple)):
        return list(node)
    if isinstance(node, BaseRetriever) and not getattr(node, "exact_store_search", False):
        return list(vars(node).values())
    return []


def _binding(binding: RunnableBindingBase[Any, Any]) -> None:
    unsealable = unsealable_config(binding.config)
    if unsealable:
        raise ValueError(f"retriever's config sets {unsealable}, which dprag cannot apply sealed")
    if "k" in binding.kwargs:
        raise ValueError(
            "retriever has k bound (.bind(k=...)): the candidate count is the mechanism's, "
            "drop the bound k"
        )


def _reads_documents(node: object) -> bool:
    return isinstance(node, (BaseRetriever, VectorStore))


def resolve(retriever: object, kwargs: Mapping[str, Any] | None = None) -> Resolved:
    """Take a configured or composed retriever apart (module docstring); ValueError if not.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
    >>> resolve(store.as_retriever().with_config(tags=["rag"])).vectorstore is store
    True
    """
    bound = dict(kwargs or {})
    if isinstance(retriever, VectorStoreRetriever):
        return _store_query(retriever, bound)
    if isinstance(retriever, BaseRetriever):
        return Resolved(retriever=retriever, kwargs=bound)
    if isinstance(retriever, RunnableBinding):  # with_config, bind (not with_retry)
        _binding(retriever)
        return resolve(retriever.bound, {**retriever.kwargs, **bound})
    if isinstance(retriever, RunnableSequence):
        if bound:
            raise ValueError(
                "retriever: a bound sequence (steps | retriever).bind(...) cannot be taken "
                "apart (LangChain gives the keywords to its first step): bind the retriever"
            )
        *steps, last = retriever.steps
        for step in steps:
            if any(_reads_documents(node.data) for node in step.get_graph().nodes.values()):
                raise ValueError(
                    "retriever: a query step before the retriever reads documents (a "
                    "retriever or vector store): the question sent to the store would "
                    "depend on the corpus, which breaks the DP guarantee"
                )
        inner = resolve(last, bound)
        return replace(inner, steps=(*steps, *inner.steps))
    name = type(retriever).__name__
    hint = (
        " (its last step is not a retriever: a step after retrieval may drop, reorder or add "
        "documents)"
        if isinstance(retriever, Runnable)
        else ""
    )
    raise ValueError(
        f"retriever must be a BaseRetriever, optionally configured (.with_config, .bind) or "
        f"after query steps in a pipeline (steps | retriever); got {name}{hint}, whose "
        "candidate count dprag cannot enforce"
    )


@dataclass(frozen=True)
class DocumentSource:
    """Where candidates come from: a vector store with scores, or any retriever.

    A vector store is opened through the store table
    (:func:`~langchain_dprag.vectorstores.open_store`): ``score_function``
    (``None``: the one for the store's metric) and ``exact_search`` (your
    promise, for a store the table does not know) settle what its scores are
    and that its search is exact; :meth:`check` refuses it, when the chain is
    built, otherwise. A ``BaseRetriever`` is asked for ``k`` documents
    (``invoke(q, k=k)``) and its scores are read from ``metadata[score_key]``
    with ``score_function`` (default :data:`~langchain_dprag.vectorstores.COSINE`);
    a retriever without scores can feed mechanisms that take the top n
    (DPSparseVote, DP-KSA, ...), in its own rank order; for those that select
    by score (MuRAG) a document without a score is dropped.
    ``retriever_honours_k``: the user's declaration (module docstring).
    ``filter``: with ``vectorstore``, a filter in the store's own format,
    applied by its exact search (a retriever carries its own:
    ``search_kwargs={"filter": ...}``).
    """

    retriever: Runnable[Any, Any] | None
    vectorstore: VectorStore | None
    score_function: ScoreFunction | None
    score_key: str
    unit_key: str | None
    retriever_honours_k: bool = False
    exact_search: bool = False
    filter: Any = None
    partition: PublicPartition | None = None

    @cached_property
    def resolved(self) -> Resolved:
        """The vector store, or the retriever taken apart (:func:`resolve`)."""
        if self.retriever is None:
            return Resolved(vectorstore=self.vectorstore, filter=self.filter)
        return resolve(self.retriever)

    @cached_property
    def opened(self) -> OpenedStore | None:
        """The vector store as the store table reads it (None for a retriever)."""
        store = self.resolved.vectorstore
        if store is None:
            return None
        reading = None if self.partition is None else partitioned_reading(store, self.partition)
        return open_store(
            store,
            score_function=self.score_function,
            exact_search=self.exact_search,
            reading=reading,
        )

    def check(self) -> None:
        """Refuse now, when the app is built, what could only fail later (module docstring)."""
        if self.retriever is not None and self.filter is not None:
            raise ValueError(
                "filter= goes with vectorstore=; a retriever carries its own: "
                "store.as_retriever(search_kwargs={'filter': ...})"
            )
        if self.opened is None and self.exact_search:
            raise ValueError(
                "exact_search=True declares a vector store's search exact; for a retriever, "
                "pass retriever_honours_k=True"
            )
        if self.partition is not None and (self.opened is None or self.resolved.filter is not None):
            raise ValueError(
                "partition= searches a vector store's cells, without filter: pass "
                "vectorstore= (or retriever=store.as_retriever()), not another retriever, "
                "and no filter"
            )
        retriever = self.resolved.retriever
        inexact = None
        if self.retriever_honours_k and retriever is not None:
            inexact = inexact_store_in(retriever)
        if inexact is not None:
            why = inexact.refused or f"dprag's exact search of it is its own: {inexact.exact}"
            raise ValueError(
                f"retriever_honours_k=True on {type(retriever).__name__}: it searches "
                f"{inexact.store} with the store's own search, which is not exact (its index "
                f"answers; {why}), and no promise can make it so. Fix: pass the store: "
                "vectorstore=store (with filter=... in the store's own format), or retriever="
                + _EXACT_ALTERNATIVE
            )

    @property
    def scale(self) -> ScoreFunction:
        """The score function applied: its public range is the mechanism's threshold range."""
        if self.opened is not None:
            return self.opened.score_function
        return COSINE if self.score_function is None else self.score_function

    @property
    def honours_k(self) -> bool:
        """A vector store's search does; a retriever only when the user declares it."""
        return self.resolved.vectorstore is not None or self.retriever_honours_k

    @property
    def name(self) -> str:
        """The run name shown in traces (the retriever's or the store's class name)."""
        if self.retriever is not None:
            return self.retriever.get_name()
        return type(self.vectorstore).__name__

    def _query(self, question: str) -> Any:
        query: Any = question
        for step in self.resolved.steps:  # public query steps: they see the question only
            query = step.invoke(query, sealed_config())
        return query

    def _searcher(self) -> Callable[[str, int], list[tuple[Document | None, float | None]]]:
        resolved, opened = self.resolved, self.opened
        if opened is not None:
            first = opened.searcher(resolved.filter)  # one per query: a full scan ranks once

            def from_store(question: str, k: int) -> list[tuple[Document | None, float | None]]:
                return [(doc, score) for doc, score in first(self._query(question), k)]

            return from_store
        assert resolved.retriever is not None
        retriever = resolved.retriever

        def from_retriever(question: str, k: int) -> list[tuple[Document | None, float | None]]:
            kwargs = {**resolved.kwargs, "k": k}
            found = list(retriever.invoke(self._query(question), sealed_config(), **kwargs))[:k]
            # after the charge nothing may fail: a non-Document keeps its slot as a placeholder
            return [
                (doc, self._metadata_score(doc)) if isinstance(doc, Document) else (None, None)
                for doc in found
            ]

        return from_retriever

    def _metadata_score(self, doc: Document) -> float | None:
        raw = doc.metadata.get(self.score_key)
        return None if raw is None else self.scale.convert(raw)

    def _to_scored(
        self, pairs: Sequence[tuple[Document | None, float | None]], *, needs_scores: bool
    ) -> list[ScoredDocument]:
        # without scores the rank order is all a top-n needs: any constant will do
        missing = None if needs_scores else self.scale.high
        return [
            ScoredDocument.padding(slot)
            if doc is None
            else to_scored_document(
                doc, missing if score is None else score, unit_key=self.unit_key, slot=slot
            )
            for slot, (doc, score) in enumerate(pairs)
        ]

    def bind(self, *, needs_scores: bool, found: dict[str, Document] | None = None) -> Retriever:
        """A ``retriever(question, k)`` over the source, sealed, its failures the fixed one.

        One per query. ``found`` (for :class:`~langchain_dprag.retriever.DPRetriever`,
        which returns documents): filled with each admitted document by its id.
        """
        search = self._searcher()

        def retrieve(question: str, k: int) -> list[ScoredDocument]:
            pairs = guarded(lambda: run_sealed(search, question, k))
            scored = self._to_scored(pairs, needs_scores=needs_scores)
            if found is not None:
                found.update(
                    (sd.id, doc)
                    for sd, (doc, _) in zip(scored, pairs, strict=True)
                    if doc is not None and not sd.is_padding
                )
            return scored

        return HonoursK(retrieve) if self.honours_k else retrieve
