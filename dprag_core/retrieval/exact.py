"""The exact ranking of stored vectors for a query, where a store has no exact search of its own.

Chroma's only index is HNSW, which is approximate and cannot be asked for an
exact answer. Every top-n and threshold argument in dprag assumes an exact
ranking (one added unit is *inserted* into a fixed ranking), so for such a store
the adapters read the vectors the store hands out and rank them here, with the
store's own metric (:data:`~dprag_core.retrieval.scores.METRICS`), in float64:
:func:`exact_ranking` returns every stored item, best first, ties broken by id.
The cost is a full scan per query: O(N·d) arithmetic plus reading all N vectors
(docs/langchain.md and docs/llamaindex.md give measured figures).

A stored vector that is not finite, or a zero vector under a cosine metric,
gets a NaN score; it is ranked last and becomes a placeholder downstream (the
one NaN policy of :mod:`~dprag_core.retrieval.scores`), never an error.

>>> import numpy as np
>>> vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
>>> order, raw = exact_ranking([1.0, 0.0], vectors, ["a", "b", "c"], metric="cosine_distance")
>>> [int(i) for i in order], [round(float(r), 2) for r in raw[order]]
([0, 1, 2], [0.0, 0.4, 1.0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval.scores import METRICS

__all__ = ["EXACT_METRICS", "exact_ranking", "raw_scores"]

EXACT_METRICS = frozenset(
    {"cosine", "inner_product", "cosine_distance", "ip_distance", "squared_l2", "l2"}
)
"""The metrics :func:`raw_scores` computes."""


def raw_scores(
    query: npt.ArrayLike, vectors: npt.ArrayLike, *, metric: str
) -> npt.NDArray[np.float64]:
    """The store's raw score of every row of ``vectors`` for ``query``, in float64.

    >>> raw_scores([1.0, 0.0], [[0.0, 2.0]], metric="squared_l2").tolist()
    [5.0]
    """
    if metric not in EXACT_METRICS:
        raise ValueError(f"metric must be one of {sorted(EXACT_METRICS)}, got {metric!r}")
    q = np.asarray(query, dtype=np.float64).reshape(-1)
    x = np.asarray(vectors, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=np.float64)
    x = x.reshape(len(x), -1)
    if x.shape[1] != q.shape[0]:
        raise ValueError(f"the query has dimension {q.shape[0]}, the stored vectors {x.shape[1]}")
    with np.errstate(all="ignore"):  # non-finite rows become NaN (module docstring)
        dots = x @ q
        if metric in ("squared_l2", "l2"):
            squared = np.maximum(np.sum(x * x, axis=1) - 2.0 * dots + q @ q, 0.0)
            out = squared if metric == "squared_l2" else np.sqrt(squared)
        elif metric in ("cosine", "cosine_distance"):
            norms = np.linalg.norm(x, axis=1) * np.linalg.norm(q)
            cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), np.nan)
            out = cosine if metric == "cosine" else 1.0 - cosine
        else:
            out = dots if metric == "inner_product" else 1.0 - dots
    return np.where(np.isfinite(out), out, np.nan)


def exact_ranking(
    query: npt.ArrayLike,
    vectors: npt.ArrayLike,
    ids: Sequence[str],
    *,
    metric: str,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """``(order, raw)``: every row best first by ``metric`` (ties by id, NaN last), its raw score.

    ``raw[order]`` is the store's score along the ranking: non-decreasing for a
    distance, non-increasing for a similarity.
    """
    raw = raw_scores(query, vectors, metric=metric)
    if len(ids) != len(raw):
        raise ValueError(f"got {len(ids)} ids for {len(raw)} vectors")
    key = raw if METRICS[metric].direction == "distance" else -raw
    nan = np.isnan(key)
    by_id = np.empty(len(ids), dtype=np.intp)
    by_id[np.argsort(np.array([str(i) for i in ids], dtype=str), kind="stable")] = np.arange(
        len(ids)
    )
    order = np.lexsort((by_id, np.where(nan, 0.0, key), nan)).astype(np.intp)
    return order, raw
