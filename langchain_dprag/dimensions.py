"""A store's embedding function must give vectors of the stored vectors' dimension: checked
when the app is built.

A store reopened with another embedding model (or the wrong one passed) would
accept the app and fail at the first query, after that query's charge. So when
the app is built, the dimension of the stored vectors is read from the store
object (its registration's ``dimension``: :mod:`langchain_dprag.registered`), a
fixed public probe text is embedded once with the store's embedding function,
and a mismatch is refused naming both. A store whose dimension cannot be read
(an empty one, an unregistered class, PGVector without ``embedding_length``) is
not checked.

An empty store is refused at the same time (:func:`check_not_empty`: its
registration's ``count``; stores whose registration does not count are not
counted), and so is a store that records another embedding model than the one
its embedding function names (:func:`check_embedding_model`: its registration's
``recorded_model``, Chroma's; :mod:`~dprag_core.retrieval.embedding_record`).

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
>>> _ = store.add_texts(["a record"])
>>> store.embedding = DeterministicFakeEmbedding(size=3)  # another model
>>> check_dimension(store, "InMemoryVectorStore")
Traceback (most recent call last):
...
ValueError: InMemoryVectorStore: its stored vectors have 4 dimensions, but its embedding ...
"""

from __future__ import annotations

from typing import Any

from dprag_core.retrieval.embedding_record import named_model, refuse_other_model
from dprag_core.retrieval.stores import refusal, refuse_empty
from langchain_dprag.stores import STORES

__all__ = [
    "PROBE",
    "check_dimension",
    "check_embedding_model",
    "check_not_empty",
    "stored_count",
    "stored_dimension",
]

PROBE = "dprag embedding dimension probe"
"""The public text embedded once when an app is built (no document, no question)."""


def stored_dimension(store: object) -> int | None:
    """The dimension of ``store``'s stored vectors, or None where it cannot be read."""
    return STORES.dimension(store)


def stored_count(store: object) -> int | None:
    """How many vectors ``store`` holds, or None where its registration does not read it.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> stored_count(InMemoryVectorStore(DeterministicFakeEmbedding(size=4)))
    0
    """
    return STORES.count(store)


def check_not_empty(store: Any, name: str) -> None:
    """Refuse a store that holds no vector (:func:`~dprag_core.retrieval.stores.refuse_empty`
    says why this build-time check reveals nothing to whoever asks questions)."""
    refuse_empty(name, stored_count(store))


def check_dimension(store: Any, name: str) -> None:
    """Refuse (``ValueError`` naming ``name`` and both dimensions) an embedding function whose
    vectors do not have the stored vectors' dimension; one embedding of :data:`PROBE`."""
    stored = stored_dimension(store)
    embeddings = getattr(store, "embeddings", None)
    if stored is None or embeddings is None:
        return
    probed = len(embeddings.embed_query(PROBE))
    if probed != stored:
        raise refusal(
            name,
            f"its stored vectors have {stored} dimensions, but its embedding function gives "
            f"{probed} (one public probe text, embedded when the app is built, before any "
            "charge)",
            "give the store the embedding model its vectors were made with",
        )


def check_embedding_model(store: Any, name: str) -> None:
    """Refuse (``ValueError`` naming ``embedding_function``) a store that records another
    embedding model than the one the store's embedding object names (its registration's
    ``recorded_model``, :mod:`~dprag_core.retrieval.embedding_record`); stores that record
    none are not checked."""
    recorded = STORES.recorded_model(store)
    refuse_other_model(
        name, recorded, named_model(getattr(store, "embeddings", None)), "embedding_function"
    )
