"""The retrieved-document type shared by every mechanism and adapter.

>>> d = ScoredDocument(id="a", text="Aspirin treats headache.", score=0.8)
>>> d.unit
'a'
>>> ScoredDocument.padding(0).is_padding
True
>>> admit("b", "", float("nan"), "u", slot=3).is_padding  # unusable: a placeholder
True

**The one placeholder policy.** Documents are built *after* a query was
charged, from whatever the store returned, so nothing about one document may
make the query fail: an exception there would reveal that document's presence
with certainty and block the service. :func:`admit` (one document) and
:func:`clean_documents` (a retriever's whole answer) are the only places that
decide what to do with a defective document, for the core and both adapters
alike: a document whose id or privacy unit breaks the stores' id policy, whose
score is missing or not finite, or whose id uses the reserved padding prefix,
becomes a placeholder that keeps its rank slot; a lone surrogate in a text
becomes U+FFFD.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from dprag_core.accounting.stores.amounts import check_id
from dprag_core.retrieval.scores import read_score

__all__ = ["PADDING_PREFIX", "ScoredDocument", "admit", "clean_documents", "stable_id"]

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
    declares; a finite number (NaN would make every sort and comparison
    meaningless, so NaN and infinities are refused; only padding scores -inf).
    ``unit``: the privacy unit (one individual); all chunks of a unit go to the
    same voter and are charged together. Defaults to ``id``.

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
        if not isinstance(self.unit, str):
            raise TypeError(f"unit must be a string, got {type(self.unit).__name__}")
        score = self.score
        if isinstance(score, bool) or not isinstance(score, Real):
            raise TypeError(f"score must be a real number, got {type(score).__name__}")
        score = float(score)
        if self.id.startswith(PADDING_PREFIX):
            if self.text or score != -math.inf:
                raise ValueError(f"id must not start with the reserved prefix {PADDING_PREFIX!r}")
        elif not math.isfinite(score):
            raise ValueError("score must be a finite number (NaN and infinities are refused)")
        object.__setattr__(self, "score", score)
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


def _valid_id(value: object) -> bool:
    try:
        check_id("id", value)
    except (TypeError, ValueError):
        return False
    return True


def _clean_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # no tokenizer or model API accepts a lone surrogate
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


def admit(id: object, text: object, score: object, unit: object, *, slot: int) -> ScoredDocument:
    """``ScoredDocument(id, text, score, unit)``, or a placeholder when it cannot be one.

    The one placeholder policy (module docstring): a document whose id is not
    a valid store id or uses the reserved padding prefix, whose text is not a
    string, whose score is missing or not a finite number (read by
    :func:`~dprag_core.retrieval.scores.read_score`: any real-number type), or whose privacy
    unit is missing (``unit=None``) or not a valid store id (blank, a NUL, a
    lone surrogate, over 1024 UTF-8 bytes:
    :func:`~dprag_core.accounting.stores.amounts.check_id`, which a ledger would
    otherwise raise mid-query) becomes ``ScoredDocument.padding(slot)``: it
    keeps its place in the store's ranking (so "fewer than k came back" still
    means "exhausted") but is never a candidate. Dropping such a document is a
    function of that document alone, so the neighbouring relation is kept. A
    lone surrogate in the text becomes U+FFFD.

    >>> admit("a", "t", 0.5, None, slot=0).is_padding, admit("a", "t", 0.5, "u", slot=0).unit
    (True, 'u')
    >>> [admit("a", "t", 0.5, u, slot=0).is_padding for u in (" ", "u" + chr(0), "u" * 2000)]
    [True, True, True]
    >>> admit("a", "x" + chr(0xD800), 0.5, "u", slot=0).text
    'x\ufffd'
    """
    number = read_score(score)
    usable = (
        _valid_id(id)
        and not str(id).startswith(PADDING_PREFIX)
        and isinstance(text, str)
        and not math.isnan(number)
        and _valid_id(unit)
    )
    if not usable:
        return ScoredDocument.padding(slot)
    assert isinstance(id, str) and isinstance(text, str) and isinstance(unit, str)
    return ScoredDocument(id=id, text=_clean_text(text), score=number, unit=unit)


def clean_documents(docs: Iterable[object]) -> list[ScoredDocument]:
    """A retriever's answer as the candidates a mechanism may read: :func:`admit` for each.

    Retrieval runs after the charge, so what it returns must not make a query
    fail in a data-dependent way: anything that is not a
    :class:`ScoredDocument`, and any document :func:`admit` refuses, becomes a
    placeholder in its rank slot; placeholders stay placeholders.

    >>> docs = clean_documents([ScoredDocument("a", "x" + chr(0xD800), 0.5), "not a document",
    ...                         ScoredDocument("b", "y", 0.4, unit="u" + chr(0))])
    >>> [(d.text, d.is_padding) for d in docs]
    [('x\ufffd', False), ('', True), ('', True)]
    """
    return [_candidate(doc, slot) for slot, doc in enumerate(docs)]


def _candidate(doc: object, slot: int) -> ScoredDocument:
    if not isinstance(doc, ScoredDocument):
        return ScoredDocument.padding(slot)
    if doc.is_padding:
        return doc
    return admit(doc.id, doc.text, doc.score, doc.unit, slot=slot)
