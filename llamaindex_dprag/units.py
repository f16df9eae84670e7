"""LlamaIndex nodes -> dprag :class:`ScoredDocument` with ids, scores and privacy units.

The privacy unit is one individual. In LlamaIndex a ``Document`` is split into
nodes (chunks), so by default a node's unit is its source document
(``node.ref_doc_id``), falling back to the node id for nodes without a source.
When one individual owns several documents, name the metadata key that
identifies them (``unit_key="patient_id"``): a node without it belongs to no
known unit and is dropped.

Scores: dprag wants "higher = more relevant". Stores that return distances
(FAISS ``IndexFlatL2``) declare ``score_direction="distance"`` and their score
becomes ``-distance``; a public ``score_range`` (in the store's own units) clips
scores into it. Both make the core's
:class:`~dprag_core.retrieval.scores.ScoreScale` (:func:`score_scale`), with its
one NaN policy: a node without a finite score is dropped.

Dropped, never an error: nodes are converted after the query was charged, so an
exception would depend on the private data. A dropped node becomes a
placeholder that keeps its slot in the store's ranking
(:func:`~dprag_core.retrieval.documents.admit`).

>>> from llama_index.core.schema import NodeWithScore, TextNode
>>> n = NodeWithScore(node=TextNode(id_="n1", text="x", metadata={"patient": 7}), score=0.5)
>>> d = to_scored_document(n, unit_key="patient")
>>> (d.id, d.unit, d.score)
('n1', '7', 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from dprag_core.retrieval.documents import ScoredDocument, admit
from dprag_core.retrieval.scores import ScoreScale
from dprag_core.validation import finite

__all__ = [
    "ScoreDirection",
    "check_direction",
    "check_score_range",
    "node_unit",
    "normalise_score",
    "score_scale",
    "to_scored_document",
    "to_scored_documents",
]

ScoreDirection = Literal["similarity", "distance"]


def node_unit(node: BaseNode, unit_key: str | None = None) -> str | None:
    """The privacy unit of ``node``: its source document id, or ``metadata[unit_key]``.

    None when ``unit_key`` is missing (the node is then dropped).

    >>> from llama_index.core.schema import TextNode
    >>> node_unit(TextNode(id_="n1", text="x")), node_unit(TextNode(id_="n1", text="x"), "who")
    ('n1', None)
    """
    if unit_key is None:
        return str(node.ref_doc_id or node.node_id)
    value = node.metadata.get(unit_key)
    return None if value is None else str(value)


def check_score_range(score_range: tuple[float, float] | None) -> tuple[float, float] | None:
    """Validate a public score range ``(low, high)`` with ``low < high``.

    >>> check_score_range((-1, 1))
    (-1.0, 1.0)
    """
    if score_range is None:
        return None
    if not isinstance(score_range, Sequence) or len(score_range) != 2:
        raise TypeError("score_range must be a pair (low, high) or None")
    low = finite("score_range[0]", score_range[0])
    high = finite("score_range[1]", score_range[1])
    if not low < high:
        raise ValueError(f"score_range must satisfy low < high, got ({low}, {high})")
    return (low, high)


def check_direction(score_direction: str) -> ScoreDirection:
    """Validate ``score_direction``: ``"similarity"`` or ``"distance"``."""
    if score_direction == "similarity":
        return "similarity"
    if score_direction == "distance":
        return "distance"
    raise ValueError(f"score_direction must be 'similarity' or 'distance', got {score_direction!r}")


def score_scale(
    *,
    score_direction: str = "similarity",
    score_range: tuple[float, float] | None = None,
) -> ScoreScale:
    """The core :class:`~dprag_core.retrieval.scores.ScoreScale` of a LlamaIndex store.

    ``score_range`` is in the store's own units (distances for
    ``"distance"``); ``None`` keeps every finite score unclipped.

    >>> score_scale(score_direction="distance", score_range=(0.0, 2.0)).bounds
    (-2.0, -0.0)
    """
    direction = check_direction(score_direction)
    checked = check_score_range(score_range)
    if checked is None:
        return ScoreScale.unclipped(direction)
    low, high = checked
    if direction == "distance":
        return ScoreScale("distance", low=-high, high=-low, direction="distance")
    return ScoreScale("similarity", low=low, high=high)


def normalise_score(
    score: float | None,
    *,
    score_direction: ScoreDirection = "similarity",
    score_range: tuple[float, float] | None = None,
) -> float:
    """A store score as a dprag score: clipped into ``score_range``, negated for distances.

    NaN for a missing or non-finite score (the node is then dropped).

    >>> normalise_score(0.3, score_direction="distance", score_range=(0.0, 2.0))
    -0.3
    """
    return score_scale(score_direction=score_direction, score_range=score_range).convert(score)


def _scored_node(
    node: NodeWithScore,
    *,
    unit_key: str | None,
    scale: ScoreScale,
    metadata_mode: MetadataMode,
    slot: int,
) -> ScoredDocument:
    unit = node_unit(node.node, unit_key)
    score = scale.convert(node.score)
    if unit is None or math.isnan(score):
        return ScoredDocument.padding(slot)  # before reading the text: it is not used
    text = node.node.get_content(metadata_mode=metadata_mode)
    return admit(node.node.node_id, text, score, unit, slot=slot)


def to_scored_document(
    node: NodeWithScore,
    *,
    unit_key: str | None = None,
    score_direction: ScoreDirection = "similarity",
    score_range: tuple[float, float] | None = None,
    metadata_mode: MetadataMode = MetadataMode.LLM,
    slot: int = 0,
) -> ScoredDocument:
    """Convert one scored node (text = ``node.get_content(metadata_mode)``), or a placeholder.

    >>> from llama_index.core.schema import TextNode
    >>> to_scored_document(NodeWithScore(node=TextNode(id_="a", text="t"), score=1.0)).id
    'a'
    >>> to_scored_document(NodeWithScore(node=TextNode(id_="a", text="t"))).is_padding
    True
    """
    scale = score_scale(score_direction=score_direction, score_range=score_range)
    return _scored_node(
        node, unit_key=unit_key, scale=scale, metadata_mode=metadata_mode, slot=slot
    )


def to_scored_documents(
    nodes: Sequence[NodeWithScore],
    *,
    unit_key: str | None = None,
    score_direction: ScoreDirection = "similarity",
    score_range: tuple[float, float] | None = None,
    metadata_mode: MetadataMode = MetadataMode.LLM,
) -> list[ScoredDocument]:
    """Convert scored nodes, in the given (the store's rank) order: never re-sorted.

    >>> from llama_index.core.schema import TextNode
    >>> pairs = [("b", 0.9), ("a", 0.1)]
    >>> ns = [NodeWithScore(node=TextNode(id_=i, text=""), score=s) for i, s in pairs]
    >>> [d.id for d in to_scored_documents(ns)]
    ['b', 'a']
    """
    scale = score_scale(score_direction=score_direction, score_range=score_range)
    return [
        _scored_node(n, unit_key=unit_key, scale=scale, metadata_mode=metadata_mode, slot=slot)
        for slot, n in enumerate(nodes)
    ]
