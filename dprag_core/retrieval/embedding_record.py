"""A store that records which embedding model made its vectors, and the app that names another.

Some stores record the embedding model their vectors came from: a Chroma
collection keeps the embedding function it was created with in its
configuration (``embedding_function``: a name and a config such as
``{"model_name": "BAAI/bge-small-en-v1.5"}``). An app that opens such a store
with another embedding model would embed its questions into another space:
when both dimensions agree nothing else catches it, and every query would be
charged for retrieving noise. So when the app is built, the adapters read the
recorded model (:func:`chroma_recorded_model`) and the model the app's
embedding object names (:func:`named_model`: its ``model_name``, ``model`` or
``model_id``), and :func:`refuse_other_model` refuses a mismatch before any
charge, naming the parameter to fix. Only a function whose config names its
model counts: chromadb records its ``"default"`` function for every collection
created without one, including the collections LangChain and LlamaIndex fill
with vectors of their own model, so that record says nothing. Names are
compared without their organisation and case
(``sentence-transformers/all-MiniLM-L6-v2`` is ``all-minilm-l6-v2``); where
either side names no model, nothing is checked.

Like the empty-store refusal (:func:`~dprag_core.retrieval.stores.refuse_empty`),
this reads store configuration once, when the operator who holds the store
builds the app, never per query; it depends on no record.

>>> same_model("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2")
True
>>> refuse_other_model("Chroma", "all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5", "embedding_function")
Traceback (most recent call last):
...
ValueError: Chroma: its vectors were made by the embedding model 'all-MiniLM-L6-v2' (recorded ...
"""

from __future__ import annotations

import json
from typing import Any

from dprag_core.retrieval.stores import refusal

__all__ = ["chroma_recorded_model", "named_model", "refuse_other_model", "same_model"]

#: The attributes an embedding object names its model in (LangChain, LlamaIndex, chromadb).
MODEL_ATTRIBUTES = ("model_name", "model", "model_id")

#: Values that name no model (LlamaIndex's ``BaseEmbedding.model_name`` defaults to "unknown").
NO_NAMES = frozenset({"unknown", "default"})


def _model_in(config: Any) -> str | None:
    if not isinstance(config, dict):
        return None
    for key in MODEL_ATTRIBUTES:
        value = config.get(key)
        if isinstance(value, str) and value and value.lower() not in NO_NAMES:
            return value
    return None


def chroma_recorded_model(collection: Any) -> str | None:
    """The embedding model a chromadb ``Collection`` records, or None where it records none.

    Read from the collection's stored configuration (``configuration_json``), without
    building its embedding function.
    """
    raw = getattr(getattr(collection, "_model", None), "configuration_json", None)
    if isinstance(raw, str):
        raw = json.loads(raw)
    function = raw.get("embedding_function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or function.get("type") != "known":
        return None  # none recorded, or a legacy function whose name says nothing
    return _model_in(function.get("config"))


def named_model(embeddings: object) -> str | None:
    """The model an embedding object names (``model_name``, ``model`` or ``model_id``), or None
    (also for :data:`NO_NAMES`).

    >>> class Emb:
    ...     model = "text-embedding-3-small"
    >>> named_model(Emb()), named_model(object())
    ('text-embedding-3-small', None)
    """
    for attribute in MODEL_ATTRIBUTES:
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value and value.lower() not in NO_NAMES:
            return value
    return None


def same_model(a: str, b: str) -> bool:
    """Whether two model names name one model (organisation prefix and case ignored)."""
    return a.rsplit("/", 1)[-1].lower() == b.rsplit("/", 1)[-1].lower()


def refuse_other_model(
    store: str, recorded: str | None, passed: str | None, parameter: str
) -> None:
    """Refuse (ValueError naming ``parameter``) an app whose embedding model is not the one
    ``store`` records; nothing when either is unknown.

    >>> refuse_other_model("Chroma", None, "any", "embed_model")
    """
    if recorded is None or passed is None or same_model(recorded, passed):
        return
    raise refusal(
        store,
        f"its vectors were made by the embedding model {recorded!r} (recorded in the "
        f"store), but the app embeds questions with {passed!r} (checked once, when the app "
        "is built, before any charge)",
        f"pass {parameter} with the model {recorded!r}, or rebuild the store with {passed!r}",
    )
