"""Score conventions of LangChain vector stores, and a FAISS inner-product helper.

dprag mechanisms read *similarities* (higher = more relevant) on a **public**
range declared before any data is seen: MuRAG's threshold ``tau`` and the DP
threshold's bounds live on that range. Stores disagree on what a score is:

- ``InMemoryVectorStore.similarity_search_with_score``: cosine similarity, [-1, 1]
  -> :data:`COSINE`;
- langchain-community ``FAISS`` (default ``EUCLIDEAN_DISTANCE``): the *squared L2
  distance*; on unit-norm embeddings ``cos = 1 - d/2`` -> :data:`SQUARED_L2_UNIT`;
- ``FAISS`` with ``MAX_INNER_PRODUCT`` on unit-norm embeddings: cosine -> :data:`COSINE`
  (do **not** use its ``similarity_search_with_relevance_scores``: its relevance
  function maps an inner product ``s > 0`` to ``1 - s``, inverting the order);
- a store whose relevance scores are correct and in [0, 1] -> :data:`RELEVANCE`.

Converted scores are clipped into the declared range (a public, per-document
transform); a :class:`ScoreFunction` is the core's
:class:`~dprag_core.retrieval.scores.ScoreScale` (one NaN policy for every
adapter) plus which store method to call and which metrics it fits.
:func:`faiss_inner_product` builds the recommended FAISS store.

Distances are never silently read as similarities: where a store exposes what
its raw scores are (:func:`store_metric`: ``InMemoryVectorStore`` is cosine, a
``distance_strategy`` attribute names the metric), :func:`check_score_function`
refuses, when the chain or retriever is built, a built-in score function made
for another metric. A custom ``ScoreFunction`` (``metrics=None``) is your
declaration and is taken as given.

Rank order: :func:`search_with_scores` keeps the store's order (no re-sort) and
completes tie groups at the cut, ordering tied documents by id
(:func:`~dprag_core.retrieval.ties.tie_complete`), so its top-k is the first k
of one fixed ranking: it honours k.

>>> SQUARED_L2_UNIT.convert(0.5), COSINE.convert(1.5)
(0.75, 1.0)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval.scores import ScoreScale
from dprag_core.retrieval.ties import tie_complete
from langchain_dprag.units import document_id

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

__all__ = [
    "COSINE",
    "RELEVANCE",
    "SQUARED_L2_UNIT",
    "NormalizedEmbeddings",
    "ScoreFunction",
    "check_score_function",
    "faiss_inner_product",
    "search_with_scores",
    "store_metric",
]


def _squared_l2_to_cosine(raw: float) -> float:
    return 1.0 - raw / 2.0


@dataclass(frozen=True)
class ScoreFunction(ScoreScale):
    """A :class:`~dprag_core.retrieval.scores.ScoreScale` plus how to read a LangChain store.

    The scale (public range [low, high], ``transform``, ``direction``, the one
    NaN policy of :meth:`~dprag_core.retrieval.scores.ScoreScale.convert`: an
    unusable score becomes NaN and its document a placeholder, never an error)
    is the core's. Added here: ``relevance=True`` reads
    ``similarity_search_with_relevance_scores`` instead of
    ``similarity_search_with_score``; ``metrics``: the raw store metrics
    (:func:`store_metric`) this function is valid for; ``None`` (the default for
    your own functions) declares it valid for the store you use it with.

    >>> ScoreFunction("neg_distance", low=-2.0, high=0.0, transform=lambda d: -d).convert(0.5)
    -0.5
    """

    relevance: bool = False
    metrics: frozenset[str] | None = None


COSINE = ScoreFunction("cosine", low=-1.0, high=1.0, metrics=frozenset({"cosine", "inner_product"}))
SQUARED_L2_UNIT = ScoreFunction(
    "squared_l2_unit",
    low=-1.0,
    high=1.0,
    transform=_squared_l2_to_cosine,
    metrics=frozenset({"squared_l2"}),
)
RELEVANCE = ScoreFunction(
    "relevance", low=0.0, high=1.0, relevance=True, metrics=frozenset({"squared_l2"})
)

_FAISS_METRICS = {
    "EUCLIDEAN_DISTANCE": "squared_l2",
    "COSINE": "squared_l2",  # langchain-community FAISS: an L2 index, relevance 1 - d
    "JACCARD": "squared_l2",
    "MAX_INNER_PRODUCT": "inner_product",
    "DOT_PRODUCT": "inner_product",
}


def store_metric(store: VectorStore) -> str | None:
    """What ``store``'s raw ``similarity_search_with_score`` values are, where it says so.

    ``"cosine"`` for ``InMemoryVectorStore``; for a store with a
    ``distance_strategy`` (langchain-community ``FAISS`` and others)
    ``"squared_l2"`` or ``"inner_product"`` (FAISS), else ``"distance_strategy=NAME"``;
    ``None`` when the store does not expose it.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store_metric(InMemoryVectorStore(DeterministicFakeEmbedding(size=4)))
    'cosine'
    """
    from langchain_core.vectorstores import InMemoryVectorStore

    if isinstance(store, InMemoryVectorStore):
        return "cosine"
    strategy = getattr(store, "distance_strategy", None)
    if strategy is None:
        return None
    name = str(getattr(strategy, "name", strategy)).upper()
    if type(store).__name__ == "FAISS" and name in _FAISS_METRICS:
        if getattr(store, "override_relevance_score_fn", None) is not None:
            return None
        return _FAISS_METRICS[name]
    return f"distance_strategy={name}"


def check_score_function(store: VectorStore, score_function: ScoreFunction) -> ScoreFunction:
    """Refuse a built-in score function made for another metric than ``store``'s.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
    >>> check_score_function(store, COSINE).name
    'cosine'
    >>> try:
    ...     check_score_function(store, SQUARED_L2_UNIT)
    ... except ValueError as refused:
    ...     print(str(refused)[:48])
    InMemoryVectorStore returns cosine scores, but s
    """
    if not isinstance(score_function, ScoreFunction):
        raise TypeError(
            f"score_function must be a ScoreFunction, got {type(score_function).__name__}"
        )
    metric = store_metric(store)
    if metric is None or score_function.metrics is None or metric in score_function.metrics:
        return score_function
    raise ValueError(
        f"{type(store).__name__} returns {metric} scores, but score_function "
        f"{score_function.name!r} reads {', '.join(sorted(score_function.metrics))}: pass a "
        "matching score_function (COSINE for cosine or inner product on unit-norm embeddings, "
        "SQUARED_L2_UNIT for squared L2 distances on unit-norm embeddings) or your own "
        "ScoreFunction"
    )


def search_with_scores(
    store: VectorStore, query: str, k: int, score_function: ScoreFunction
) -> list[tuple[Document, float]]:
    """The first ``k`` of ``store``'s ranking for ``query``, with converted similarities.

    The store's own order, tie groups at the cut completed and ordered by id
    (module docstring): the first k of one fixed ranking, never re-sorted.
    """

    def fetch(n: int) -> list[tuple[Document, float]]:
        if score_function.relevance:
            return store.similarity_search_with_relevance_scores(query, k=n)
        return store.similarity_search_with_score(query, k=n)

    pairs = tie_complete(fetch, k, score=lambda pair: float(pair[1]), ident=_pair_id)
    return [(doc, score_function.convert(raw)) for doc, raw in pairs]


def _pair_id(pair: tuple[Document, float]) -> str:
    return document_id(pair[0])


class NormalizedEmbeddings(Embeddings):
    """Wraps any ``Embeddings`` so every vector has unit L2 norm (inner product = cosine).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> v = NormalizedEmbeddings(DeterministicFakeEmbedding(size=8)).embed_query("x")
    >>> round(sum(a * a for a in v), 6)
    1.0
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner

    @staticmethod
    def _unit(vector: Sequence[float]) -> list[float]:
        norm = math.sqrt(sum(float(a) * float(a) for a in vector))
        return [float(a) / norm for a in vector] if norm > 0 else [float(a) for a in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Unit-norm embeddings of ``texts``."""
        return [self._unit(v) for v in self.inner.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Unit-norm embedding of ``text``."""
        return self._unit(self.inner.embed_query(text))

    def __repr__(self) -> str:
        return f"NormalizedEmbeddings({type(self.inner).__name__})"


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
        from langchain_community.vectorstores import FAISS
        from langchain_community.vectorstores.utils import DistanceStrategy

    return FAISS.from_documents(
        list(documents),
        NormalizedEmbeddings(embedding),
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
        **kwargs,
    )
