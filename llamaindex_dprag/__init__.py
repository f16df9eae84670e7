"""LlamaIndex adapters for dprag: a DP query engine, DP node postprocessors, model adapters.

The face holds what an app builds with: the query engine and its options, the
query bundle that carries a query id, the responses and events it returns, the
postprocessors, the model adapter, the datastore engine and the FAISS store
helper. Everything else (node conversion, the sources the engine reads, private
sections, prompt templates) stays importable from its own module
(``llamaindex_dprag.units``, ``.sources``, ``._quiet``, ``.prompts``).

>>> from llamaindex_dprag import DPQueryEngine
>>> DPQueryEngine.__name__
'DPQueryEngine'
"""

try:
    import llama_index.core  # noqa: F401 (the framework this package adapts)
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("llamaindex_dprag", missing, extra="llamaindex") from missing

from llamaindex_dprag.bundles import DPQueryBundle
from llamaindex_dprag.datastore import DPDatastoreQueryEngine
from llamaindex_dprag.events import DPQueryEndEvent, DPQueryStartEvent
from llamaindex_dprag.llms import LlamaIndexTextModel
from llamaindex_dprag.postprocessors import DPThresholdPostprocessor, PrivacyBudgetPostprocessor
from llamaindex_dprag.query_engine import DPQueryEngine, EngineOptions
from llamaindex_dprag.responses import (
    DPAsyncStreamingResponse,
    DPResponse,
    DPStreamingResponse,
)
from llamaindex_dprag.vector_stores import COSINE_RANGE, cosine_faiss_store

__all__ = [
    "COSINE_RANGE",
    "DPAsyncStreamingResponse",
    "DPDatastoreQueryEngine",
    "DPQueryBundle",
    "DPQueryEndEvent",
    "DPQueryEngine",
    "DPQueryStartEvent",
    "DPResponse",
    "DPStreamingResponse",
    "DPThresholdPostprocessor",
    "EngineOptions",
    "LlamaIndexTextModel",
    "PrivacyBudgetPostprocessor",
    "cosine_faiss_store",
]
