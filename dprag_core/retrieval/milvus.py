"""Facts read from a Milvus collection through pymilvus's ``MilvusClient``, for both adapters.

LangChain's ``langchain_milvus.Milvus`` and LlamaIndex's ``MilvusVectorStore``
wrap the same client (``store.client``, public in both), so what a collection
says about its metric, its exactness, its size and its fields is read here
once, through ``MilvusClient``'s public API (``describe_collection``,
``list_indexes``, ``describe_index``, ``query``). pymilvus is imported by the
stores, never here.

- **Scores**: a dense vector field's index names the metric Milvus scores
  with (:data:`MILVUS_METRICS`): ``COSINE`` returns the cosine and ``IP`` the
  inner product (similarities, best first), ``L2`` the *squared* Euclidean
  distance (best first, lowest). ``BM25``, ``HAMMING``, ``JACCARD`` and the
  sparse metrics are not read.
- **Exact search**: a ``FLAT`` index is a brute-force scan (every stored
  vector scored); Milvus has no per-query exact mode, so any other index
  (``AUTOINDEX``, ``HNSW``, ``IVF_*``, ``DISKANN``, ...) is approximate and
  refused (:func:`index_problem`). Milvus Lite also accepts ``BRUTE_FORCE``,
  the same scan. On a Milvus server the growing segments are searched through
  an interim index unless ``queryNode.segcore.interimIndex.enableIndex`` is
  false in its ``milvus.yaml``; dprag cannot read a server's configuration
  from the client (docs/langchain.md, docs/llamaindex.md).
- **Filters**: a boolean expression over scalar or dynamic fields
  (:func:`in_expr`, :func:`equals_expr`), applied before the scan ranks: the
  top k of the selected entities is the first k of one fixed ranking. The
  public cell (``dprag_cell``) is such a field: partitioned search is the
  same exact search with ``dprag_cell in [...]``.

>>> MILVUS_METRICS["L2"], index_problem(MilvusIndex("FLAT", "COSINE")) is None
('squared_l2', True)
>>> in_expr("dprag_cell", (3, 7), 'lang == "en"')
'(lang == "en") and (dprag_cell in [3, 7])'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dprag_core.retrieval.stores import StoreFacts

__all__ = [
    "EXACT_INDEXES",
    "MILVUS_EXACT",
    "MILVUS_METRICS",
    "MilvusIndex",
    "count",
    "equals_expr",
    "exact_params",
    "field_names",
    "in_expr",
    "index_facts",
    "index_problem",
    "primary_field",
    "vector_dimension",
    "vector_index",
]

MILVUS_METRICS = {"COSINE": "cosine", "IP": "inner_product", "L2": "squared_l2"}
"""Milvus's dense metric types -> :data:`~dprag_core.retrieval.scores.METRICS` names."""

EXACT_INDEXES = frozenset({"FLAT", "BRUTE_FORCE"})
"""The index types whose search scores every stored vector (``BRUTE_FORCE``: Milvus Lite)."""

MILVUS_EXACT = "a FLAT index: a brute-force scan, every stored vector scored"


@dataclass(frozen=True)
class MilvusIndex:
    """A vector field's index: its ``index_type`` and ``metric_type`` (upper case)."""

    index_type: str
    metric_type: str


def vector_index(client: Any, collection: str, field: str) -> MilvusIndex | None:
    """The index on ``field`` of ``collection`` (None: the collection or the index is missing).

    Read with ``list_indexes(collection, field_name=field)`` and ``describe_index``.
    """
    if not client.has_collection(collection):
        return None
    for name in client.list_indexes(collection, field_name=field):
        info = client.describe_index(collection, name)
        if info.get("field_name", field) == field:
            return MilvusIndex(
                str(info.get("index_type", "")).upper(), str(info.get("metric_type", "")).upper()
            )
    return None


def index_problem(index: MilvusIndex | None) -> str | None:
    """Why searches of a field with ``index`` are not exact, or None (a ``FLAT`` index).

    >>> index_problem(MilvusIndex("HNSW", "COSINE"))[:33]
    'its HNSW index is approximate and'
    """
    if index is None:
        return "its collection has no vector index yet, so its metric cannot be read"
    if index.index_type not in EXACT_INDEXES:
        return (
            f"its {index.index_type} index is approximate and Milvus has no exact mode for it "
            "(one added document can push several others out of the top k, which the DP "
            "guarantee does not allow)"
        )
    return None


def index_facts(store: str, index: MilvusIndex, fix: str) -> StoreFacts:
    """What ``index`` establishes about the store named ``store``: refused (with ``fix``)
    unless it scans every vector, no metric where its metric is not a known one, else its
    metric and the exact search.

    >>> index_facts("Milvus", MilvusIndex("FLAT", "IP"), "-").metric
    'inner_product'
    >>> index_facts("Milvus", MilvusIndex("HNSW", "IP"), "use FLAT").refused[-13:]
    'Fix: use FLAT'
    """
    name = f"{store} ({index.index_type} index, metric {index.metric_type})"
    problem = index_problem(index)
    if problem is not None:
        return StoreFacts(name, refused=f"{problem}. Fix: {fix}")
    metric = MILVUS_METRICS.get(index.metric_type)
    if metric is None:
        return StoreFacts(name)
    return StoreFacts(name, metric=metric, exact=MILVUS_EXACT)


def exact_params(index: MilvusIndex) -> dict[str, Any]:
    """The ``search_params`` of an exact search of a field with ``index`` (its own metric)."""
    return {"metric_type": index.metric_type, "params": {}}


def _fields(client: Any, collection: str) -> list[dict[str, Any]]:
    return list(client.describe_collection(collection).get("fields", []))


def field_names(client: Any, collection: str) -> tuple[str, ...]:
    """The names of ``collection``'s schema fields (dynamic fields are not among them)."""
    return tuple(str(f["name"]) for f in _fields(client, collection))


def primary_field(client: Any, collection: str) -> str | None:
    """The name of ``collection``'s primary key field (None when it has none)."""
    for f in _fields(client, collection):
        if f.get("is_primary"):
            return str(f["name"])
    return None


def vector_dimension(client: Any, collection: str, field: str) -> int | None:
    """The dimension of vector field ``field`` (None: no such collection or field)."""
    if not client.has_collection(collection):
        return None
    for f in _fields(client, collection):
        if f.get("name") == field and "dim" in f.get("params", {}):
            return int(f["params"]["dim"])
    return None


def count(client: Any, collection: str) -> int:
    """How many entities ``collection`` holds (``count(*)``; 0 when it does not exist yet)."""
    if not client.has_collection(collection):
        return 0
    rows = client.query(collection, filter="", output_fields=["count(*)"])
    return int(rows[0]["count(*)"])


def _name(key: str) -> str:
    if not isinstance(key, str) or not key.isidentifier():
        raise ValueError(f"key must be an identifier for a Milvus filter, got {key!r}")
    return key


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    raise TypeError(f"value must be a str, bool, int or finite float, got {type(value).__name__}")


def equals_expr(key: str, value: Any) -> str:
    """A Milvus filter expression for ``metadata[key] == value``.

    >>> equals_expr("lang", 'say "hi"')
    'lang == "say \\\\"hi\\\\""'
    """
    return f"{_name(key)} == {_literal(value)}"


def in_expr(key: str, cells: Sequence[int], base: str | None = None) -> str:
    """A Milvus filter expression keeping ``key in cells`` (and ``base``, if given)."""
    cell = f"{_name(key)} in [{', '.join(str(int(c)) for c in cells)}]"
    return f"({base}) and ({cell})" if base else cell
