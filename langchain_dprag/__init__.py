"""LangChain adapters for dprag: a DP retriever-plus-generator Runnable and a DP retriever.

The face holds what an app builds with: the chain, the retriever, the model
adapter, the datastore classifier, the score functions a store's raw scores are
read with, and the chat helpers. Everything else (document conversion, the store
read, prompt templates, the chain's event names) stays importable from its own
module (``langchain_dprag.units``, ``.vectorstores``, ``.prompts``, ``.chain``).

>>> from langchain_dprag import DPDatastoreClassifier, DPRAGChain, DPRetriever
>>> DPRAGChain.__name__
'DPRAGChain'
"""

try:
    import langchain_core  # noqa: F401 (the framework this package adapts)
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("langchain_dprag", missing, extra="langchain") from missing

from langchain_dprag.chain import DPRAGChain, DPRAGOutput
from langchain_dprag.chat import condense_question, condensed_chat
from langchain_dprag.datastore import DPDatastoreClassifier
from langchain_dprag.embeddings import NormalizedEmbeddings
from langchain_dprag.models import LangChainTextModel
from langchain_dprag.retriever import DPRetriever
from langchain_dprag.vectorstores import (
    COSINE,
    COSINE_DISTANCE,
    L2_UNIT,
    NEGATIVE_INNER_PRODUCT,
    RELEVANCE,
    SQUARED_L2_UNIT,
    ScoreFunction,
    faiss_inner_product,
)

__all__ = [
    "COSINE",
    "COSINE_DISTANCE",
    "L2_UNIT",
    "NEGATIVE_INNER_PRODUCT",
    "RELEVANCE",
    "SQUARED_L2_UNIT",
    "DPDatastoreClassifier",
    "DPRAGChain",
    "DPRAGOutput",
    "DPRetriever",
    "LangChainTextModel",
    "NormalizedEmbeddings",
    "ScoreFunction",
    "condense_question",
    "condensed_chat",
    "faiss_inner_product",
]
