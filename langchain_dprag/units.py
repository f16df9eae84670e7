"""Map LangChain documents to dprag's scored documents and privacy units.

The privacy unit is one individual. By default each document is its own unit
(``Document.id``, else a stable hash of its text and metadata); name a metadata
key (``unit_key="patient_id"``) when one individual owns several chunks, so
that they go to the same voter and are charged together.

>>> from langchain_core.documents import Document
>>> d = Document(page_content="Alice has asthma.", id="d1", metadata={"patient": "p7"})
>>> privacy_unit(d, "patient"), to_scored_document(d, 0.8).unit
('p7', 'd1')
"""

from __future__ import annotations

from langchain_core.documents import Document

from dprag_core.retrieval.documents import ScoredDocument, stable_id

__all__ = ["document_id", "privacy_unit", "to_scored_document"]


def document_id(doc: Document) -> str:
    """``doc.id`` when set, else a stable hash of its text and metadata.

    >>> document_id(Document(page_content="x", id="a"))
    'a'
    """
    if doc.id:
        return str(doc.id)
    return stable_id(doc.page_content, doc.metadata)


def privacy_unit(doc: Document, unit_key: str | None = None) -> str:
    """The privacy unit of ``doc``: ``metadata[unit_key]`` when present, else its id.

    >>> privacy_unit(Document(page_content="x", id="a"), "owner")
    'a'
    """
    if unit_key is not None and doc.metadata.get(unit_key) is not None:
        return str(doc.metadata[unit_key])
    return document_id(doc)


def to_scored_document(
    doc: Document, score: float, *, unit_key: str | None = None
) -> ScoredDocument:
    """A :class:`ScoredDocument` for ``doc`` (text = ``page_content``).

    >>> to_scored_document(Document(page_content="x", id="a"), 0.5).score
    0.5
    """
    return ScoredDocument(
        id=document_id(doc),
        text=doc.page_content,
        score=float(score),
        unit=privacy_unit(doc, unit_key),
    )
