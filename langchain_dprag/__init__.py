"""LangChain adapters for dprag: a DP retriever-plus-generator Runnable and a DP retriever.

>>> from langchain_dprag import DPDatastoreClassifier, DPRAGChain, DPRetriever
>>> DPRAGChain.__name__
'DPRAGChain'
"""

try:
    import langchain_core  # noqa: F401 (the framework this package adapts)
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("langchain_dprag", missing, extra="langchain") from missing

from langchain_dprag.chain import QUERY_END_EVENT, QUERY_START_EVENT, DPRAGChain, DPRAGOutput
from langchain_dprag.chat import condense_question, condensed_chat
from langchain_dprag.datastore import DPDatastoreClassifier
from langchain_dprag.errors import PrivateDataError
from langchain_dprag.models import LangChainTextModel
from langchain_dprag.prompts import context_template
from langchain_dprag.retriever import DPRetriever
from langchain_dprag.units import document_id, privacy_unit, to_scored_document
from langchain_dprag.vectorstores import (
    COSINE,
    COSINE_DISTANCE,
    L2_UNIT,
    NEGATIVE_INNER_PRODUCT,
    RELEVANCE,
    SQUARED_L2_UNIT,
    NormalizedEmbeddings,
    ScoreFunction,
    faiss_inner_product,
    search_with_scores,
)

__all__ = [
    "COSINE",
    "COSINE_DISTANCE",
    "L2_UNIT",
    "NEGATIVE_INNER_PRODUCT",
    "QUERY_END_EVENT",
    "QUERY_START_EVENT",
    "RELEVANCE",
    "SQUARED_L2_UNIT",
    "DPDatastoreClassifier",
    "DPRAGChain",
    "DPRAGOutput",
    "DPRetriever",
    "LangChainTextModel",
    "NormalizedEmbeddings",
    "PrivateDataError",
    "ScoreFunction",
    "condense_question",
    "condensed_chat",
    "context_template",
    "document_id",
    "faiss_inner_product",
    "privacy_unit",
    "search_with_scores",
    "to_scored_document",
]
