"""Fixtures of the LangChain adapter tests (real LangChain stores and models)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import EchoChatModel, HashingEmbeddings, corpus
from mechanism_table import Models

from langchain_dprag.models import LangChainTextModel


@pytest.fixture
def store() -> InMemoryVectorStore:
    """An InMemoryVectorStore (cosine) over the private corpus."""
    vs = InMemoryVectorStore(HashingEmbeddings())
    vs.add_documents(corpus())
    return vs


@pytest.fixture
def faiss_store() -> Any:
    """A langchain-community FAISS store, inner product on unit-norm embeddings."""
    from langchain_dprag.vectorstores import faiss_inner_product

    return faiss_inner_product(corpus(), HashingEmbeddings())


@pytest.fixture
def models(tiny_token_model: Any) -> Models:
    """A tiny HF token model and an echoing LangChain chat model as TextModel."""
    return Models(token=lambda: tiny_token_model, text=LangChainTextModel(EchoChatModel()))
