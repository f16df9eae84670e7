"""Score functions for LangChain vector stores, opened through the store table.

dprag mechanisms read *similarities* (higher = more relevant) on a **public**
range declared before any data is seen: MuRAG's threshold ``tau`` and the DP
threshold's bounds live on that range. Stores disagree on what a raw score is,
so a :class:`ScoreFunction` (the core's
:class:`~dprag_core.retrieval.scores.ScoreScale`, with its one NaN policy, plus
the raw metrics it reads) converts them:

=========================  ======================================  ======================
score function             reads (``metrics``)                     similarity
=========================  ======================================  ======================
:data:`COSINE`             ``cosine``, ``inner_product``           ``s``, on [-1, 1]
:data:`COSINE_DISTANCE`    ``cosine_distance``, ``ip_distance``    ``1 - d``
:data:`SQUARED_L2_UNIT`    ``squared_l2``                          ``1 - d/2`` (unit vectors)
:data:`L2_UNIT`            ``l2``                                  ``1 - d²/2`` (unit vectors)
:data:`NEGATIVE_INNER_PRODUCT`  ``negative_inner_product``         ``-d``
:data:`RELEVANCE`          ``squared_l2``, via the store's         its relevance, [0, 1]
                           relevance function
=========================  ======================================  ======================

Store semantics come from the store: :func:`open_store` reads the store object
through the table of :mod:`langchain_dprag.stores` (which metric its raw
scores are, how its results are exact) and picks the score function for that
metric when none is given (:data:`SCORE_FUNCTIONS`). A score function passed
for a store whose metric is known must read that metric: a built-in for another
metric is refused, and so is your own function unless it names the metric
(``metrics=``) or is a plain similarity range on a similarity store (e.g.
``COSINE.with_range(low=0.3)``). A store the table does not know is refused
unless you declare both a score function and ``exact_search=True``. Every
refusal happens when the chain or retriever is built, and names the store, what
could not be established and the fix.

Converted scores are clipped into the declared range (a public, per-document
transform); ranges "on unit vectors" assume unit-norm embeddings (wrap yours
in :class:`~langchain_dprag.embeddings.NormalizedEmbeddings`), otherwise declare
your own range: the order is kept either way, only the meaning of a threshold
depends on it.

Rank order: :meth:`OpenedStore.searcher` keeps the store's exact order (no
re-sort) and completes tie groups at the cut, ordering tied documents by id
(:func:`~dprag_core.retrieval.ties.tie_complete`), so its top-k is the first k
of one fixed ranking: it honours k.

>>> SQUARED_L2_UNIT.convert(0.5), COSINE.convert(1.5), COSINE_DISTANCE.convert(0.25)
(0.75, 1.0, 0.75)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval.scores import METRIC_SCALES, METRICS, ScoreScale, read_score
from dprag_core.retrieval.stores import (
    StoreFacts,
    describe_metric,
    exactness,
    refusal,
    require_declarations,
)
from dprag_core.retrieval.ties import tie_complete
from dprag_core.validation import missing_extra
from langchain_dprag.dimensions import check_dimension, check_embedding_model, check_not_empty
from langchain_dprag.embeddings import NormalizedEmbeddings
from langchain_dprag.stores import STORES, Search, StoreReading, read_store
from langchain_dprag.units import document_id

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

__all__ = [
    "COSINE",
    "COSINE_DISTANCE",
    "L2_UNIT",
    "NEGATIVE_INNER_PRODUCT",
    "RELEVANCE",
    "SCORE_FUNCTIONS",
    "SQUARED_L2_UNIT",
    "OpenedStore",
    "ScoreFunction",
    "faiss_inner_product",
    "open_store",
    "search_with_scores",
    "store_metric",
]


@dataclass(frozen=True)
class ScoreFunction(ScoreScale):
    """A :class:`~dprag_core.retrieval.scores.ScoreScale` plus how to read a LangChain store.

    The scale (public range [low, high], ``transform``, ``direction``, the one
    NaN policy of :meth:`~dprag_core.retrieval.scores.ScoreScale.convert`: an
    unusable score becomes NaN and its document a placeholder, never an error)
    is the core's. Added here: ``relevance=True`` reads the store's relevance
    function of its raw scores instead of the raw scores; ``metrics``: the raw
    store metrics (:data:`~dprag_core.retrieval.scores.METRICS` names) this
    function is valid for. ``None`` (the default for your own functions): a
    plain similarity range is accepted on a similarity store; any other
    function is accepted only for a store whose metric dprag cannot establish,
    as your declaration (module docstring).

    >>> ScoreFunction("neg_distance", low=-2.0, high=0.0, transform=lambda d: -d).convert(0.5)
    -0.5
    """

    relevance: bool = False
    metrics: frozenset[str] | None = None

    @classmethod
    def for_metric(cls, metric: str, **fields: Any) -> ScoreFunction:
        """The core scale for ``metric`` (:data:`~dprag_core.retrieval.scores.METRIC_SCALES`).

        >>> ScoreFunction.for_metric("l2").convert(1.0)
        0.5
        """
        scale = METRIC_SCALES[metric]
        base = {"name": scale.name, "low": scale.low, "high": scale.high}
        base.update(transform=scale.transform, direction=scale.direction)
        return cls(**{**base, "metrics": frozenset({metric}), **fields})

    def reads(self) -> str:
        """What this function reads, for messages."""
        return "any metric" if self.metrics is None else ", ".join(sorted(self.metrics))


COSINE = ScoreFunction.for_metric("cosine", metrics=frozenset({"cosine", "inner_product"}))
COSINE_DISTANCE = ScoreFunction.for_metric(
    "cosine_distance", metrics=frozenset({"cosine_distance", "ip_distance"})
)
SQUARED_L2_UNIT = ScoreFunction.for_metric("squared_l2")
L2_UNIT = ScoreFunction.for_metric("l2")
NEGATIVE_INNER_PRODUCT = ScoreFunction.for_metric("negative_inner_product")
RELEVANCE = ScoreFunction(
    "relevance", low=0.0, high=1.0, relevance=True, metrics=frozenset({"squared_l2"})
)

SCORE_FUNCTIONS: dict[str, ScoreFunction] = {
    "cosine": COSINE,
    "inner_product": COSINE,
    "cosine_distance": COSINE_DISTANCE,
    "ip_distance": COSINE_DISTANCE,
    "squared_l2": SQUARED_L2_UNIT,
    "l2": L2_UNIT,
    "negative_inner_product": NEGATIVE_INNER_PRODUCT,
}
"""The score function picked for a store of each metric when none is given."""

_BUILT_IN = frozenset(SCORE_FUNCTIONS.values()) | {RELEVANCE}
_EXACT_FIX = (
    "pass exact_search=True (your promise that similarity_search_with_score(question, k) "
    "returns the exact top k of one ranking, best first)"
)
_CHOOSE = (
    "score_function= the one for what its similarity_search_with_score returns: COSINE for a "
    "cosine similarity (higher = closer), COSINE_DISTANCE for 1 - cos, SQUARED_L2_UNIT or "
    "L2_UNIT for a squared or plain L2 distance on unit vectors, NEGATIVE_INNER_PRODUCT for "
    "-q.v (lower = closer), else your own ScoreFunction with its direction and public range"
)
_DECLARE = "declare both: " + _CHOOSE + "; and " + _EXACT_FIX.removeprefix("pass ")


def store_metric(store: VectorStore) -> str | None:
    """What ``store``'s raw scores are (a :data:`~dprag_core.retrieval.scores.METRICS` name).

    ``None`` when the store table (:mod:`langchain_dprag.stores`) cannot
    establish it.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store_metric(InMemoryVectorStore(DeterministicFakeEmbedding(size=4)))
    'cosine'
    """
    return read_store(store).facts.metric


def _score_function(facts: StoreFacts, given: ScoreFunction | None) -> ScoreFunction:
    if given is not None and not isinstance(given, ScoreFunction):
        raise TypeError(f"score_function must be a ScoreFunction, got {type(given).__name__}")
    metric = facts.metric
    if metric is None:
        if given is None:
            raise refusal(
                facts.store,
                "dprag cannot establish what its raw scores are (a similarity or a distance, "
                f"which metric): it is not a store it reads ({STORES.labels()}) in a "
                "configuration it knows",
                _DECLARE,
            )
        return given
    natural = SCORE_FUNCTIONS.get(metric)
    if given is None:
        if natural is None:
            raise refusal(
                facts.store,
                f"it returns {metric} scores ({describe_metric(metric)}), for which dprag ships "
                "no score function",
                f"pass your own ScoreFunction(..., metrics=frozenset({{{metric!r}}}))",
            )
        return natural
    if given.metrics is not None and metric in given.metrics:
        return given
    plain = given.as_is and not given.relevance  # a relevance function may invert (FAISS IP)
    if given.metrics is None and plain and METRICS[metric].direction == "similarity":
        return given  # a similarity range, read as it is, on a similarity store
    yours = f"declare yours with ScoreFunction(..., metrics=frozenset({{{metric!r}}}))"
    fix = yours if natural is None else f"leave score_function out (dprag picks {natural.name!r}"
    raise refusal(
        facts.store,
        f"it returns {metric} scores ({describe_metric(metric)}), but score_function "
        f"{given.name!r} reads {given.reads()}",
        fix if natural is None else f"{fix} for it), or {yours}",
    )


def _relevance(
    store: VectorStore, facts: StoreFacts, function: ScoreFunction
) -> Callable[[float], float]:
    if function in _BUILT_IN and getattr(store, "override_relevance_score_fn", None) is not None:
        raise refusal(
            facts.store,
            "its relevance function is your own (relevance_score_fn=), so RELEVANCE cannot say "
            "what it returns",
            "declare it: ScoreFunction('mine', low=..., high=..., relevance=True, "
            "metrics=frozenset({...}))",
        )
    try:
        fn: Callable[[float], float] = store._select_relevance_score_fn()
    except NotImplementedError:
        raise refusal(
            facts.store, "it has no relevance function", "use a score function of raw scores"
        ) from None
    return fn


@dataclass(frozen=True)
class OpenedStore:
    """A vector store with what dprag established about it: the one LangChain store read.

    ``score_function``: the one applied (given, or picked for the store's
    metric); ``exact``: how its results are exact (the table's fact, or your
    declaration). :meth:`searcher` gives each query its search.
    """

    store: VectorStore
    facts: StoreFacts
    score_function: ScoreFunction
    exact: str
    reading: StoreReading

    @property
    def name(self) -> str:
        """The store's class and configuration, as errors name it."""
        return self.facts.store

    def searcher(self, filter: Any = None) -> Callable[[str, int], list[tuple[Document, float]]]:
        """``search(question, k)``: the first k of one fixed ranking, with converted scores.

        The store's exact order among the documents ``filter`` selects (the
        store's own filter format, :mod:`langchain_dprag.stores`; ``None``: all),
        tie groups at the cut completed and ordered by id (module docstring); one
        searcher per query (a full-scan store ranks once per query).
        """
        search: Search = self.reading.searcher(filter)
        function = self.score_function
        relevance = _relevance(self.store, self.facts, function) if function.relevance else None

        def first(question: str, k: int) -> list[tuple[Document, float]]:
            pairs = tie_complete(lambda n: search(question, n), k, score=_raw, ident=_pair_id)
            if relevance is not None:
                return [(doc, function.convert(relevance(raw))) for doc, raw in pairs]
            return [(doc, function.convert(raw)) for doc, raw in pairs]

        return first


def open_store(
    store: VectorStore,
    *,
    score_function: ScoreFunction | None = None,
    exact_search: bool = False,
    reading: StoreReading | None = None,
) -> OpenedStore:
    """Read ``store`` through the table and settle its score function and exactness.

    Refuses (ValueError naming the store, what could not be established and the
    fix) a store or configuration whose score semantics or exactness dprag
    cannot establish and was not told, a score function for another metric, and
    a store known to be approximate (``exact_search=True`` does not override
    what dprag knows).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
    >>> ids = store.add_texts(["a record"])
    >>> opened = open_store(store)
    >>> opened.score_function.name, opened.exact
    ('cosine', 'brute force (every stored vector scored)')
    """
    if not isinstance(exact_search, bool):
        raise TypeError(f"exact_search must be True or False, got {type(exact_search).__name__}")
    reading = read_store(store) if reading is None else reading  # given: a partitioned search
    facts = reading.facts
    require_declarations(
        facts,
        scores=score_function is not None,
        exact=exact_search,
        supported=STORES.labels(),
        fix=_DECLARE,
    )
    exact = exactness(facts, declared=exact_search, fix=_EXACT_FIX)
    function = _score_function(facts, score_function)
    check_not_empty(store, facts.store)  # an empty corpus: refused now, not charged per query
    check_dimension(store, facts.store)  # another embedding model: refused now, not charged
    check_embedding_model(store, facts.store)  # one the store records: refused now too
    opened = OpenedStore(store, facts, function, exact, reading)
    if function.relevance:
        _relevance(store, facts, function)  # refused now, not at query time
    return opened


def search_with_scores(
    store: VectorStore,
    query: str,
    k: int,
    score_function: ScoreFunction | None = None,
    *,
    exact_search: bool = False,
    filter: Any = None,
) -> list[tuple[Document, float]]:
    """The first ``k`` of ``store``'s exact ranking for ``query``, with converted similarities.

    :func:`open_store`, then one search (module docstring), exact among the
    documents ``filter`` selects (the store's own format; ``None``: all).
    """
    opened = open_store(store, score_function=score_function, exact_search=exact_search)
    return opened.searcher(filter)(query, k)


def _pair_id(pair: tuple[Document, float]) -> str:
    return document_id(pair[0])


def _raw(pair: tuple[Document, float]) -> float:
    """A pair's raw score (:func:`~dprag_core.retrieval.scores.read_score`); NaN when unusable."""
    return read_score(pair[1])


def faiss_inner_product(
    documents: Sequence[Document], embedding: Embeddings, **kwargs: Any
) -> FAISS:
    """A langchain-community ``FAISS`` store: inner product on unit-norm embeddings.

    Its ``similarity_search_with_score`` returns cosine similarities: use
    :data:`COSINE`. (langchain-community is being sunset; dprag itself works with
    any ``VectorStore``.)

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> store = faiss_inner_product(
    ...     [Document(page_content="a")], DeterministicFakeEmbedding(size=8)
    ... )  # doctest: +SKIP
    """
    with warnings.catch_warnings():  # its sunset notice: documented above
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import faiss  # noqa: F401 (langchain-community's FAISS store needs it)
            from langchain_community.vectorstores import FAISS
            from langchain_community.vectorstores.utils import DistanceStrategy
        except ImportError as missing:
            raise missing_extra(
                "faiss_inner_product", missing, extra="langchain-faiss,faiss"
            ) from missing

    return FAISS.from_documents(
        list(documents),
        NormalizedEmbeddings(embedding),
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
        **kwargs,
    )
