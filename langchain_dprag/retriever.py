"""``DPRetriever``: DP document selection over any LangChain ``VectorStore`` with scores.

Two selections, for chains that want the selection step on its own:

- **DP threshold** (Grislain 2024): ``epsilon`` + ``accountant``. Fetch *every*
  chunk scoring above the lower end of the public score range (the store query
  grows from ``fetch_k`` until the last score falls to that bound or the store is
  exhausted), draw a threshold tau with the exponential mechanism whose utility
  peaks where exactly ``k`` units score above tau
  (``dprag_core.retrieval.threshold.DPThreshold``, running
  :func:`dprag_core.retrieval.selection.dp_threshold_select`), return every unit
  above tau.
  Each query costs ``epsilon``, charged to the accountant *before* the store is
  searched. Why every chunk and not the top ``fetch_k`` units: a top-N cut
  turns one added unit into a substitution (one in, one out), so neighbouring
  selections could differ by two units and a downstream mechanism's guarantee
  would double unaccounted. With the complete candidate set, one added unit adds
  one score to the threshold's input (Δ = 1) and, given tau, changes the
  selection by that unit alone. A narrower public range (e.g.
  ``ScoreFunction("cosine", low=0.3, high=1.0)``: scores below 0.3 clip to it and
  never count) keeps the fetch small.
- **MuRAG ledger filter** (MuRAG Alg. 1, lines 3-8): ``ledger`` + ``tau`` +
  ``epsilon_query``. Every unit that scores above the public ``tau`` and still has
  ``epsilon_query`` left is charged ``epsilon_query`` (all of them, not only the
  ``k`` returned), *before* anything is returned; the best ``k`` are returned
  (:func:`dprag_core.retrieval.selection.ledger_filter`).
  The relevant set is every chunk above ``tau`` (the same growing store query),
  so a unit is charged on its own score alone.

The charges of one call are recorded under the retriever run's ``run_id``
(:mod:`dprag_core.query_ids`): ``retriever.invoke(question, {"run_id": uuid})``
(or LangChain's ``run_id=uuid`` keyword) names it, so a retry with the same
``run_id`` after ``LedgerOutcomeUnknown`` is charged once. Each call builds one
:class:`~dprag_core.query_ids.Query` (the question, that id, the rng) and hands
its id and rng to the selection step explicitly. The ledger filter
claims the id in the ledger before it charges
(:func:`~dprag_core.pipeline.select_by_ledger`): any other reuse is refused
whatever the filter would have charged. A misspelt keyword
is a ``TypeError`` naming the nearest field.

What an error carries: the public errors (``QueryIdReused``,
``PrivacyBudgetExhausted``, a budget store's) are raised by the charge or the
claim, *before* the store is searched, so no frame of their traceback holds a
document; whatever fails while fetching or selecting is the one fixed
``PrivateDataError`` (:func:`~dprag_core.pipeline.private_step`), and the
documents fetched by then are dropped from the retriever's own frame before it
propagates. LangChain's ``on_retriever_error`` callbacks receive only these.

Both read the store as ``DPRAGChain(vectorstore=...)`` does, through
:class:`~langchain_dprag._retrieval.DocumentSource` and the store table
(:mod:`langchain_dprag.stores`): the store's exact ranking, one fixed ranking
with ties by id; a store whose scores or exactness dprag cannot establish (and
was not told: ``score_function``, ``exact_search=True``), or knows to be
approximate, is refused when the retriever is built. Documents without a finite
score or without their ``unit_key`` are dropped.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, StrictBool, field_validator, model_validator
from typing_extensions import Self

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.pipeline import check_accountant, select_above_threshold, select_by_ledger
from dprag_core.query_ids import Query
from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_finite, positive_int
from langchain_dprag._retrieval import DocumentSource
from langchain_dprag._strict import KnownFields, accountant_or_none
from langchain_dprag.vectorstores import ScoreFunction

__all__ = ["DPRetriever"]


class DPRetriever(KnownFields, BaseRetriever):
    """Selects documents from ``vectorstore`` with a DP threshold or a MuRAG ledger filter.

    **What it guarantees.** *Which* documents are selected is differentially
    private: with the DP threshold, the threshold tau (hence the selected set,
    given the corpus) is ``epsilon``-DP for add/remove of one privacy unit, and
    the budget is charged before the store is searched; with the ledger filter,
    no unit takes part in more queries than its ledger budget allows (every
    relevant unit is charged ``epsilon_query`` before anything is returned), the
    individual filter of MuRAG (Alg. 1), whose guarantee holds for the answers
    of a ``epsilon_query``-DP generator fed with the selection.

    **What it does not.** The *text* of the returned documents is private: this
    retriever returns it in full (LangChain's own ``on_retriever_end`` callback
    and ``astream_events`` carry it, as for any retriever). Pass the result only
    to a DP generator (e.g. ``DPRAGChain(retriever=DPRetriever(...),
    retriever_honours_k=True, mechanism=...)``, which keeps it out of every trace:
    given its threshold, the whole selection comes back in rank order, and
    neighbouring selections differ by one unit), never to an ordinary LLM prompt
    or a UI.

    ``k`` is the target number of units: the DP threshold returns *about* ``k``
    (the count is randomised for privacy); the ledger filter returns at most
    ``k``. ``fetch_k`` is only the size of the first store query (module
    docstring). Scores come from ``score_function`` (default: the one for the
    store's metric), whose public range is the threshold's range;
    ``exact_search=True`` is your promise that a store dprag does not know
    searches exactly; ``filter`` (the store's own format, e.g. a Chroma ``where``
    dict or a Qdrant ``models.Filter``: :mod:`langchain_dprag.stores`) selects
    the documents searched, exactly; ``partition`` (a public
    :class:`~dprag_core.retrieval.cells.PublicPartition`) searches only the
    cells the question probes (:mod:`langchain_dprag.cells`); ``unit_key``
    names the metadata key of the privacy unit. ``rng`` is for tests only
    (default: OS entropy).

    >>> DPRetriever(vectorstore=store, epsilon=1.0, accountant=acc, k=4)  # doctest: +SKIP
    >>> DPRetriever(vectorstore=store, ledger=InMemoryLedger(budget_per_unit=10.0),
    ...             tau=0.3, epsilon_query=1.0, k=4)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    exact_store_search: ClassVar[bool] = True
    """Its store search is the store table's exact search (a retriever holding a store that
    is not marked so is refused with ``retriever_honours_k=True``)."""

    vectorstore: VectorStore
    k: int = 4
    score_function: ScoreFunction | None = None
    exact_search: StrictBool = False
    filter: Any = None
    partition: PublicPartition | None = None
    unit_key: str | None = None
    epsilon: float | None = None
    accountant: CorpusAccountant | None = None
    fetch_k: int = 20
    ledger: Ledger | None = None
    tau: float | None = None
    epsilon_query: float | None = None
    rng: RngLike = None

    _accountant = field_validator("accountant", mode="before")(accountant_or_none)

    @model_validator(mode="after")
    def _check(self) -> Self:
        positive_int("k", self.k)
        positive_int("fetch_k", self.fetch_k)
        self._source.check()
        threshold = self.epsilon is not None or self.accountant is not None
        ledger = self.ledger is not None or self.tau is not None or self.epsilon_query is not None
        if threshold == ledger:
            raise ValueError(
                "pass either epsilon= and accountant= (DP threshold) "
                "or ledger=, tau= and epsilon_query= (MuRAG ledger filter)"
            )
        if threshold:
            positive_finite("epsilon", self.epsilon)
            check_accountant(self.accountant)
        else:
            if not isinstance(self.ledger, Ledger):
                raise TypeError("ledger must be a dprag Ledger for the ledger filter")
            positive_finite("epsilon_query", self.epsilon_query)
            if self.tau is None:
                raise ValueError("tau must be given with ledger= (the MuRAG ledger filter)")
            object.__setattr__(self, "tau", self._source.scale.check_threshold(self.tau))
        if self.rng is not None:  # one generator for all queries: a seed must not repeat noise
            object.__setattr__(self, "rng", make_rng(self.rng))
        return self

    def __repr_args__(self) -> Any:
        yield "vectorstore", type(self.vectorstore).__name__
        yield "k", self.k
        yield "score_function", self._source.scale.name
        if self.ledger is None:
            yield "epsilon", self.epsilon
            yield "accountant", self.accountant
        else:
            yield "tau", self.tau
            yield "epsilon_query", self.epsilon_query

    @cached_property
    def _source(self) -> DocumentSource:
        return DocumentSource(
            retriever=None,
            vectorstore=self.vectorstore,
            score_function=self.score_function,
            score_key="score",
            unit_key=self.unit_key,
            exact_search=self.exact_search,
            filter=self.filter,
            partition=self.partition,
        )

    def _searcher(self, found: dict[str, Document]) -> Retriever:
        return self._source.bind(needs_scores=True, found=found)

    def _threshold(self, query: Query, k: int, search: Retriever) -> list[ScoredDocument]:
        from dprag_core.retrieval.threshold import DPThreshold

        assert self.accountant is not None and self.epsilon is not None
        scale = self._source.scale
        selector = DPThreshold(epsilon=self.epsilon, bounds=scale, k=k)
        low = scale.low  # every chunk above it: no top-N cut (module docstring)
        question = query.question
        return select_above_threshold(
            selector,
            self.accountant,
            lambda: retrieve_above(search, question, low, initial_k=self.fetch_k),
            query_id=query.id,
            rng=query.rng,
        )

    def _ledger_filter(self, query: Query, k: int, search: Retriever) -> list[ScoredDocument]:
        assert self.ledger is not None and self.tau is not None and self.epsilon_query is not None
        tau, question = self.tau, query.question
        return select_by_ledger(  # claims the id, then fetches: a reuse is refused unread
            lambda: retrieve_above(search, question, tau, initial_k=self.fetch_k),
            ledger=self.ledger,
            tau=tau,
            cost=self.epsilon_query,
            k=k,
            query_id=query.id,
        )

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """The selected documents; ``config``'s ``run_id`` names the query's charges."""
        config, kwargs = _run_id(config, kwargs)
        return super().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`invoke`."""
        config, kwargs = _run_id(config, kwargs)
        return await super().ainvoke(input, config, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = self.k if k is None else positive_int("k", k)
        # the query's public values, handed to the selection (module docstring)
        public = Query(query, id=str(run_manager.run_id), rng=make_rng(self.rng))
        found: dict[str, Document] = {}
        select = self._threshold if self.ledger is None else self._ledger_filter
        try:
            selected = select(public, k, self._searcher(found))
        except BaseException:
            found.clear()  # what was fetched stays out of the failure's frames (module docstring)
            raise
        return [
            Document(
                page_content=d.text,
                id=found[d.id].id,
                metadata={**found[d.id].metadata, "score": d.score},
            )
            for d in selected
        ]


def _run_id(
    config: RunnableConfig | None, kwargs: dict[str, Any]
) -> tuple[RunnableConfig, dict[str, Any]]:
    """A config's ``run_id`` as the keyword ``BaseRetriever.invoke`` reads (not the config's)."""
    rest = RunnableConfig(**(config or {}))
    if "run_id" in rest:
        kwargs = {"run_id": rest.pop("run_id"), **kwargs}
    return rest, kwargs
