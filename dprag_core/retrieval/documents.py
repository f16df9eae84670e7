"""The retrieved-document type shared by every mechanism and adapter.

>>> d = ScoredDocument(id="a", text="Aspirin treats headache.", score=0.8)
>>> d.unit
'a'
>>> ScoredDocument.padding(0).is_padding
True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

__all__ = ["PADDING_PREFIX", "ScoredDocument", "stable_id"]

PADDING_PREFIX = "__dprag_padding__"


def stable_id(text: str, metadata: Mapping[str, Any] | None = None) -> str:
    """A stable id for a document without one: sha256 of its text and metadata.

    >>> stable_id("x") == stable_id("x")
    True
    """
    payload = json.dumps([text, dict(metadata or {})], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class ScoredDocument:
    """A retrieved document (or chunk) with its similarity score.

    ``score``: higher means more relevant, on the public range the retriever
    declares. ``unit``: the privacy unit (one individual); all chunks of a unit
    go to the same voter and are charged together. Defaults to ``id``.

    The ``repr`` never shows the text: private content must not leak through
    logs or tracebacks.
    """

    id: str
    text: str = field(repr=False)
    score: float
    unit: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("id must be a non-empty string")
        if not isinstance(self.text, str):
            raise TypeError(f"text must be a string, got {type(self.text).__name__}")
        if isinstance(self.score, bool) or not isinstance(self.score, Real):
            raise TypeError(f"score must be a real number, got {type(self.score).__name__}")
        if not isinstance(self.unit, str):
            raise TypeError(f"unit must be a string, got {type(self.unit).__name__}")
        if self.id.startswith(PADDING_PREFIX) and (self.text or self.score != float("-inf")):
            raise ValueError(f"id must not start with the reserved prefix {PADDING_PREFIX!r}")
        if not self.unit:
            object.__setattr__(self, "unit", self.id)

    @classmethod
    def padding(cls, index: int) -> ScoredDocument:
        """An empty placeholder used to pad retrieval to a fixed number of candidates."""
        return cls(id=f"{PADDING_PREFIX}{index}", text="", score=float("-inf"))

    @property
    def is_padding(self) -> bool:
        """True for placeholders made by :meth:`padding`."""
        return self.id.startswith(PADDING_PREFIX)
