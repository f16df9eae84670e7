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
transform). :func:`faiss_inner_product` builds the recommended FAISS store.

>>> SQUARED_L2_UNIT.convert(0.5), COSINE.convert(1.5)
(0.75, 1.0)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dprag_core._validation import finite

if TYPE_CHECKING:
    from langchain_community.vectorstores import FAISS

__all__ = [
    "COSINE",
    "RELEVANCE",
    "SQUARED_L2_UNIT",
    "NormalizedEmbeddings",
    "ScoreFunction",
    "faiss_inner_product",
    "search_with_scores",
]


def _identity(raw: float) -> float:
    return raw


def _squared_l2_to_cosine(raw: float) -> float:
    return 1.0 - raw / 2.0


@dataclass(frozen=True)
class ScoreFunction:
    """How a store's raw scores become similarities on a public range [low, high].

    ``transform`` maps a raw score to a similarity (higher = more relevant);
    ``relevance=True`` reads ``similarity_search_with_relevance_scores`` instead
    of ``similarity_search_with_score``.

    >>> ScoreFunction("neg_distance", low=-2.0, high=0.0, transform=lambda d: -d).convert(0.5)
    -0.5
    """

    name: str
    low: float
    high: float
    transform: Callable[[float], float] = _identity
    relevance: bool = False

    def __post_init__(self) -> None:
        low, high = finite("low", self.low), finite("high", self.high)
        if not low < high:
            raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")

    @property
    def bounds(self) -> tuple[float, float]:
        """The public range ``(low, high)``."""
        return (self.low, self.high)

    def convert(self, raw: float) -> float:
        """The similarity of a raw store score, clipped into the public range."""
        value = float(self.transform(float(raw)))
        if math.isnan(value):
            return self.low
        return min(max(value, self.low), self.high)


COSINE = ScoreFunction("cosine", low=-1.0, high=1.0)
SQUARED_L2_UNIT = ScoreFunction(
    "squared_l2_unit", low=-1.0, high=1.0, transform=_squared_l2_to_cosine
)
RELEVANCE = ScoreFunction("relevance", low=0.0, high=1.0, relevance=True)


def search_with_scores(
    store: VectorStore, query: str, k: int, score_function: ScoreFunction
) -> list[tuple[Document, float]]:
    """The top ``k`` documents of ``store`` for ``query`` with converted similarities.

    Results are sorted by similarity, best first (stores sort by their own score).
    """
    if score_function.relevance:
        pairs = store.similarity_search_with_relevance_scores(query, k=k)
    else:
        pairs = store.similarity_search_with_score(query, k=k)
    scored = [(doc, score_function.convert(raw)) for doc, raw in pairs]
    scored.sort(key=lambda pair: pair[1], reverse=True)
    return scored


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
