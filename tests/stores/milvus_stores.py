"""Milvus Lite stores for the tests: both frameworks' Milvus stores over one ``.db`` file each.

Milvus Lite (the ``milvus-lite`` wheel) runs embedded: ``MilvusClient("<dir>/x.db")``
starts it. The tests skip (with the reason) where pymilvus, milvus-lite or the
framework's Milvus package is not installed.

langchain-milvus 0.3.3 reads its collection through pymilvus's ORM ``Collection``
under the client's alias, which pymilvus 2.6.10 and later no longer registers
(langchain-ai/langchain-milvus#130): :func:`lc_milvus` registers it with the public
``connections.connect(alias=store.alias, uri=...)`` before the first add, as a user
of that pair of versions has to.
"""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings


def _skip_without(module: str, reason: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(module, reason=reason)


def lc_milvus(
    path: Path,
    embeddings: Embeddings,
    documents: list[Document] | None = None,
    *,
    metric: str = "COSINE",
    index: str = "FLAT",
    **options: Any,
) -> Any:
    """A langchain-milvus ``Milvus`` store in ``path`` (a new collection), ``documents`` added
    (ids: their own)."""
    _skip_without("milvus_lite", "milvus-lite (Milvus Lite) is not installed")
    milvus = _skip_without("langchain_milvus", "langchain-milvus is not installed")
    from pymilvus import connections

    uri = str(path / "lc.db")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = milvus.Milvus(
            embeddings,
            collection_name=f"c{uuid.uuid4().hex[:12]}",
            connection_args={"uri": uri},
            index_params={"index_type": index, "metric_type": metric},
            **options,
        )
        connections.connect(alias=store.alias, uri=uri)
    if documents:
        store.add_documents(documents, ids=[str(d.id) for d in documents])
    return store


def li_milvus(path: Path, dim: int, *, metric: str = "COSINE", index: str = "FLAT") -> Any:
    """A LlamaIndex ``MilvusVectorStore`` in ``path`` (a new collection, no nodes yet)."""
    _skip_without("milvus_lite", "milvus-lite (Milvus Lite) is not installed")
    module = _skip_without(
        "llama_index.vector_stores.milvus", "llama-index-vector-stores-milvus is not installed"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return module.MilvusVectorStore(
            uri=str(path / "li.db"),
            collection_name=f"c{uuid.uuid4().hex[:12]}",
            dim=dim,
            similarity_metric=metric,
            index_config={"index_type": index},
            use_async_client=False,
        )
