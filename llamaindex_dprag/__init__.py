"""LlamaIndex adapters for dprag: a DP query engine, DP node postprocessors, model adapters.

>>> from llamaindex_dprag import DPQueryEngine
>>> DPQueryEngine.__name__
'DPQueryEngine'
"""

try:
    import llama_index.core  # noqa: F401 (the framework this package adapts)
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("llamaindex_dprag", missing, extra="llamaindex") from missing

from llamaindex_dprag._quiet import PrivateStageError, private_section
from llamaindex_dprag.datastore import DPDatastoreQueryEngine
from llamaindex_dprag.events import DPQueryEndEvent, DPQueryStartEvent
from llamaindex_dprag.llms import LlamaIndexTextModel
from llamaindex_dprag.postprocessors import DPThresholdPostprocessor, PrivacyBudgetPostprocessor
from llamaindex_dprag.prompts import context_template
from llamaindex_dprag.query_engine import DPQueryEngine, EngineOptions, answer_metadata
from llamaindex_dprag.responses import (
    DPAsyncStreamingResponse,
    DPResponse,
    DPStreamingResponse,
)
from llamaindex_dprag.sources import IndexSource, RetrieverSource
from llamaindex_dprag.units import node_unit, to_scored_document, to_scored_documents
from llamaindex_dprag.vector_stores import COSINE_RANGE, cosine_faiss_store

__all__ = [
    "COSINE_RANGE",
    "DPAsyncStreamingResponse",
    "DPDatastoreQueryEngine",
    "DPQueryEndEvent",
    "DPQueryEngine",
    "DPQueryStartEvent",
    "DPResponse",
    "DPStreamingResponse",
    "DPThresholdPostprocessor",
    "EngineOptions",
    "IndexSource",
    "LlamaIndexTextModel",
    "PrivacyBudgetPostprocessor",
    "PrivateStageError",
    "RetrieverSource",
    "answer_metadata",
    "context_template",
    "cosine_faiss_store",
    "node_unit",
    "private_section",
    "to_scored_document",
    "to_scored_documents",
]
