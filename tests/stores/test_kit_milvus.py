"""Milvus through the store kit (``dprag_core.testing.stores``), as a third party's store
would be: one subclass per framework over Milvus Lite, one method that builds the store.

Skipped, with the reason, where pymilvus, milvus-lite or the framework's Milvus package is
not installed (tests/stores/milvus_stores.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from milvus_stores import lc_milvus, li_milvus

from dprag_core.testing.stores import LangChainStoreSuite, LlamaIndexStoreSuite


class TestMilvus(LangChainStoreSuite):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path  # one Milvus Lite file per test, a collection per store

    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        return lc_milvus(self.folder, embeddings, documents)


class TestMilvusVectorStore(LlamaIndexStoreSuite):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def make_vector_store(self) -> Any:
        return li_milvus(self.folder, self.dim)
