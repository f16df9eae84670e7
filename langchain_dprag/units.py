"""Map LangChain documents to dprag's scored documents and privacy units.

The privacy unit is one individual. By default each document is its own unit
(``Document.id``, else a stable hash of its text and metadata); name a metadata
key (``unit_key="patient_id"``) when one individual owns several chunks, so
that they go to the same voter and are charged together. A document without
that key belongs to no known unit: it is dropped (never an error, which would
depend on the private data after the query was charged).

>>> from langchain_core.documents import Document
>>> d = Document(page_content="Alice has asthma.", id="d1", metadata={"patient": "p7"})
>>> privacy_unit(d, "patient"), to_scored_document(d, 0.8).unit
('p7', 'd1')
>>> privacy_unit(d, "owner") is None
True
"""

from __future__ import annotations

from langchain_core.documents import Document

from dprag_core.retrieval.documents import ScoredDocument, admit, stable_id

__all__ = ["document_id", "privacy_unit", "to_scored_document"]


def document_id(doc: Document) -> str:
    """``doc.id`` when set, else a stable hash of its text and metadata.

    >>> document_id(Document(page_content="x", id="a"))
    'a'
    """
    if doc.id:
        return str(doc.id)
    return stable_id(doc.page_content, doc.metadata)


def privacy_unit(doc: Document, unit_key: str | None = None) -> str | None:
    """The privacy unit of ``doc``: its id, or ``metadata[unit_key]`` (None when missing).

    >>> privacy_unit(Document(page_content="x", id="a"))
    'a'
    """
    if unit_key is None:
        return document_id(doc)
    value = doc.metadata.get(unit_key)
    return None if value is None else str(value)


def to_scored_document(
    doc: Document, score: float | None, *, unit_key: str | None = None, slot: int = 0
) -> ScoredDocument:
    """A :class:`ScoredDocument` for ``doc`` (text = ``page_content``), or a placeholder.

    A document with a missing or non-finite score, without its ``unit_key``, or
    with an id in the reserved padding prefix becomes ``ScoredDocument.padding(slot)``
    (:func:`~dprag_core.retrieval.documents.admit`): dropped, never an error.

    >>> to_scored_document(Document(page_content="x", id="a"), 0.5).score
    0.5
    >>> to_scored_document(Document(page_content="x", id="a"), float("nan")).is_padding
    True
    """
    unit = privacy_unit(doc, unit_key)
    return admit(document_id(doc), doc.page_content, score, unit, slot=slot)
