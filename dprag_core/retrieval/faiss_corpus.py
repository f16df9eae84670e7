"""A FAISS corpus scored by cosine similarity, with native "every document above tau".

Embeddings are L2-normalised on the way in (documents and queries) and stored in
a ``faiss.IndexFlatIP``, so a score is the cosine similarity, on the public
range [-1, 1] (:data:`~dprag_core.retrieval.scores.COSINE_SCALE`, the
``scale`` that :class:`~dprag_core.pipeline.PrivateRAG` checks a mechanism's
``min_score()`` against). :meth:`FaissCorpus.range_search` returns
*every* document with score > tau through ``IndexFlatIP.range_search`` — what
MuRAG needs to charge every relevant unit, not only a top-k.
``faiss`` is imported lazily (``pip install 'dprag[faiss]'``).

With ``partition=`` (a :class:`~dprag_core.retrieval.cells.PublicPartition`)
the index is an ``IndexIVFFlat`` whose lists are the partition's public cells:
each document goes to its vector's cell, and a query scores exactly the
documents of the cells it probes (:mod:`~dprag_core.retrieval.cell_search`),
so one added document is inserted into that ranking and nothing else moves
(docs/design.md §11). Its ``add`` refuses, before anything is stored, a batch
that would give one privacy unit more than the partition's public
``max_unit_records`` records (:mod:`~dprag_core.retrieval.unit_records`): one
unit adds at most that many records to any query's scan.

>>> import numpy as np
>>> corpus = FaissCorpus(dim=2)
>>> corpus.add(["a", "b"], ["first", "second"], np.array([[1.0, 0.0], [0.6, 0.8]]))
>>> [d.id for d in corpus.search(np.array([1.0, 0.1]), k=2)]
['a', 'b']
>>> [d.id for d in corpus.range_search(np.array([1.0, 0.0]), tau=0.9)]
['a']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval import cell_search
from dprag_core.retrieval.cells import PublicPartition, check_partition
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.scores import COSINE_SCALE, ScoreScale
from dprag_core.retrieval.ties import tie_complete
from dprag_core.retrieval.unit_records import check_unit_records
from dprag_core.validation import missing_extra, positive_int

__all__ = ["SCORE_BOUNDS", "FaissCorpus", "FaissRetriever"]

SCORE_BOUNDS = COSINE_SCALE.bounds
"""Public range of a cosine score, (-1, 1)."""


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise missing_extra("FaissCorpus", exc, extra="faiss") from exc
    return faiss


def _normalised(vectors: npt.ArrayLike, dim: int, name: str) -> npt.NDArray[np.float32]:
    x = np.array(vectors, dtype=np.float32, ndmin=2, copy=True)
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"{name} must have shape (n, {dim}), got {np.shape(vectors)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError(f"{name} must not contain zero vectors")
    return np.ascontiguousarray(x / norms)


class FaissCorpus:
    """Documents with ids, texts and privacy units in an inner-product FAISS index.

    Its repr names public settings only (never how many documents it holds: an
    error tracker records the reprs of a traceback's locals; ``len()`` says it).

    >>> FaissCorpus(dim=4)
    FaissCorpus(dim=4)
    >>> FaissCorpus(dim=4, partition=PublicPartition.random(dim=4, cells=8, probes=2)).partition
    PublicPartition(dim=4, cells=8, probes=2, provenance='random')
    """

    scale: ScoreScale = COSINE_SCALE
    """The public score scale: cosine similarity on [-1, 1]."""

    def __init__(self, *, dim: int, partition: PublicPartition | None = None) -> None:
        self.dim = positive_int("dim", dim)
        if partition is not None and check_partition(partition).dim != self.dim:
            raise ValueError(f"partition has dimension {partition.dim}, the corpus {self.dim}")
        self.partition = partition
        faiss = _faiss()
        if partition is None:
            self._index = faiss.IndexFlatIP(self.dim)
        else:
            self._index = cell_search.faiss_partitioned_index(partition)
        self._ids: list[str] = []
        self._texts: list[str] = []
        self._units: list[str] = []
        self._known: set[str] = set()
        self._unit_records: Counter[str] = Counter()

    @property
    def score_bounds(self) -> tuple[float, float]:
        """The public score range, (-1, 1)."""
        return self.scale.bounds

    def __len__(self) -> int:
        return len(self._ids)

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        embeddings: npt.ArrayLike,
        units: Sequence[str] | None = None,
    ) -> None:
        """Add documents (``units`` default to the ids; ids must be new and distinct).

        Partitioned: refused (ValueError naming ``units`` and the bound, nothing
        added) when a unit would then hold more than the partition's
        ``max_unit_records`` records (those it holds plus those given).
        """
        n = len(ids)
        unit_list = list(ids) if units is None else list(units)
        if len(texts) != n or len(unit_list) != n:
            raise ValueError("ids, texts and units must have the same length")
        vectors = _normalised(embeddings, self.dim, "embeddings")
        if vectors.shape[0] != n:
            raise ValueError(f"embeddings must have {n} rows, got {vectors.shape[0]}")
        if any(not isinstance(i, str) or not i for i in ids):
            raise ValueError("ids must be non-empty strings")
        if len(set(ids)) != n or self._known.intersection(ids):
            raise ValueError("ids must be distinct and not already in the corpus")
        if any(not isinstance(u, str) or not u for u in unit_list):
            raise ValueError("units must be non-empty strings")
        if any(not isinstance(t, str) for t in texts):
            raise TypeError("texts must be strings")
        if self.partition is not None:
            check_unit_records(
                unit_list,
                self._unit_records.__getitem__,
                bound=self.partition.max_unit_records,
                key="units",
            )
        self._index.add(vectors)  # a partitioned index adds through the partition
        self._ids.extend(ids)
        self._texts.extend(texts)
        self._units.extend(unit_list)
        self._known.update(ids)
        self._unit_records.update(unit_list)

    def _doc(self, row: int, score: float) -> ScoredDocument:
        return ScoredDocument(
            id=self._ids[row], text=self._texts[row], score=float(score), unit=self._units[row]
        )

    def search(self, query_embedding: npt.ArrayLike, k: int) -> list[ScoredDocument]:
        """The ``k`` most similar documents (fewer if the corpus is smaller), best first.

        Honours k: the first ``min(k, len(self))`` of one fixed ranking (score,
        then id among ties, the tie group completed whatever k: insertion order
        never matters), so one added document is inserted into it and moves no
        other document's relative place.
        """
        k = positive_int("k", k)
        q = _normalised(query_embedding, self.dim, "query_embedding")
        if q.shape[0] != 1:
            raise ValueError("query_embedding must be one vector")
        if not self._ids:
            return []
        if self.partition is not None:
            return self._cell_search(q, k)

        def first(n: int) -> list[tuple[float, int]]:
            scores, rows = self._index.search(q, min(n, len(self._ids)))
            found = zip(scores[0].tolist(), rows[0].tolist(), strict=True)
            return sorted(((s, r) for s, r in found if r >= 0), key=lambda h: -h[0])

        return self._ranked(first, k)

    def _ranked(
        self, first: Callable[[int], list[tuple[float, int]]], k: int
    ) -> list[ScoredDocument]:
        """The first k of one fixed ranking: score, then id among ties (tie groups completed)."""
        hits = tie_complete(first, k, score=lambda h: h[0], ident=lambda h: self._ids[h[1]])
        return [self._doc(r, s) for s, r in hits]

    def _cell_search(self, q: npt.NDArray[np.float32], k: int) -> list[ScoredDocument]:
        """The first k of the probed cells' exact ranking (ties by id)."""
        assert self.partition is not None
        cells = self.partition.probe(q)

        def first(n: int) -> list[tuple[float, int]]:
            scores, rows = cell_search.faiss_search(self._index, q, cells, min(n, len(self._ids)))
            return sorted(zip(scores.tolist(), rows.tolist(), strict=True), key=lambda h: -h[0])

        return self._ranked(first, k)

    def range_search(self, query_embedding: npt.ArrayLike, tau: float) -> list[ScoredDocument]:
        """Every document with score > ``tau``, best first (ties by id).

        ``tau`` follows the one threshold rule (:meth:`ScoreScale.check_threshold`):
        in [-1, 1), since no cosine is above 1.
        """
        tau = self.scale.check_threshold(tau)
        q = _normalised(query_embedding, self.dim, "query_embedding")
        if q.shape[0] != 1:
            raise ValueError("query_embedding must be one vector")
        if not self._ids:
            return []
        if self.partition is None:
            _, scores, rows = self._index.range_search(q, float(tau))
        else:  # every document above tau in the probed cells
            scores, rows = cell_search.faiss_range(self._index, q, self.partition.probe(q), tau)
        hits = sorted(
            ((float(s), int(r)) for s, r in zip(scores, rows, strict=True) if s > tau),
            key=lambda sr: (-sr[0], self._ids[sr[1]]),
        )
        return [self._doc(r, s) for s, r in hits]

    def as_retriever(self, embed: Callable[[str], npt.ArrayLike]) -> FaissRetriever:
        """A :data:`~dprag_core.retrieval.above.Retriever` over this corpus for ``embed``."""
        return FaissRetriever(self, embed)

    def __repr__(self) -> str:
        cells = "" if self.partition is None else f", partition={self.partition!r}"
        return f"FaissCorpus(dim={self.dim}{cells})"


class FaissRetriever:
    """``retriever(question, k)`` plus native ``retriever.above(question, tau)``.

    It honours k (``honours_k = True``) and has a range search, so every
    mechanism accepts it (:mod:`~dprag_core.retrieval.capabilities`).

    >>> import numpy as np
    >>> corpus = FaissCorpus(dim=2)
    >>> corpus.add(["a"], ["x"], np.array([[1.0, 0.0]]))
    >>> r = corpus.as_retriever(lambda q: np.array([1.0, 0.0]))
    >>> [d.id for d in r("q", 5)], [d.id for d in r.above("q", 0.5)]
    (['a'], ['a'])
    """

    honours_k = True

    def __init__(self, corpus: FaissCorpus, embed: Callable[[str], npt.ArrayLike]) -> None:
        if not callable(embed):
            raise TypeError("embed must be callable as embed(question) -> vector")
        self.corpus = corpus
        self.embed = embed

    @property
    def scale(self) -> ScoreScale:
        """The corpus's public score scale (cosine on [-1, 1])."""
        return self.corpus.scale

    def __call__(self, question: str, k: int) -> list[ScoredDocument]:
        return self.corpus.search(self.embed(question), k)

    def above(self, question: str, tau: float) -> list[ScoredDocument]:
        """Every document with score > ``tau``, by FAISS range search."""
        return self.corpus.range_search(self.embed(question), tau)

    def __len__(self) -> int:
        """The number of documents in the corpus (read once when an app is built)."""
        return len(self.corpus)

    def __repr__(self) -> str:
        return f"FaissRetriever(corpus={self.corpus!r})"
