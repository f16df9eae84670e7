"""Real LlamaIndex objects for the adapter tests: a deterministic embedding, a corpus
with canary secrets, a FAISS-backed VectorStoreIndex, and leak scanners.

The embedding hashes words into a normalised bag-of-words vector: scores differ
between documents (``MockEmbedding`` gives every node the same score).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span.simple import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode

from llamaindex_dprag.vector_stores import cosine_faiss_store

DIM = 256
# the secrets: they appear only inside private documents (text and metadata)
CANARY = "vexoradine9931"
META_CANARY = "metasecret4417"
QUESTION = "Which treatment does patient Zorblax Quintavue receive?"


class HashEmbedding(BaseEmbedding):
    """Hashing bag-of-words embedding, L2-normalised; counts its calls."""

    _calls: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    @property
    def calls(self) -> int:
        return self._calls

    def _vector(self, text: str) -> list[float]:
        self._calls += 1
        v = np.zeros(DIM)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            v[h % DIM] += 1.0 if (h >> 32) & 1 else -1.0
        norm = float(np.linalg.norm(v))
        return (v / norm).tolist() if norm else v.tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


PATIENTS = [
    ("Alice Martin", "migraine", "aspirin"),
    ("Bob Durand", "asthma", "salbutamol"),
    ("Chloe Lefevre", "diabetes", "metformin"),
    ("David Moreau", "hypertension", "lisinopril"),
    ("Emma Petit", "eczema", "hydrocortisone"),
    ("Farid Benali", "gout", "colchicine"),
    ("Gina Rossi", "anemia", "iron supplements"),
    ("Hugo Blanc", "insomnia", "melatonin"),
    ("Ines Garcia", "arthritis", "ibuprofen"),
    ("Jules Roux", "allergy", "cetirizine"),
    ("Karim Haddad", "bronchitis", "amoxicillin"),
]


def corpus_nodes() -> list[TextNode]:
    """One node per patient record, plus the canary record; each has a source document."""
    records = [
        (f"doc-{i}", f"Patient {name} has {disease} and receives {drug}.", {"patient": f"p{i}"})
        for i, (name, disease, drug) in enumerate(PATIENTS)
    ]
    records.append(
        (
            "doc-canary",
            f"Patient Zorblax Quintavue has chronic migraine and receives {CANARY} daily.",
            {"patient": "p-canary", "note": META_CANARY},
        )
    )
    return [
        TextNode(
            id_=f"node-{doc_id}",
            text=text,
            metadata=meta,
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
        )
        for doc_id, text, meta in records
    ]


def build_index(embed: HashEmbedding | None = None) -> VectorStoreIndex:
    """A VectorStoreIndex over the corpus, in a cosine FAISS store."""
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=DIM))
    return VectorStoreIndex(
        nodes=corpus_nodes(), storage_context=storage, embed_model=embed or HashEmbedding()
    )


# -- leak scanning -------------------------------------------------------------------


def texts(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Iterable[str]:
    """Every string reachable from ``obj`` as a handler could render it."""
    seen = set() if seen is None else seen
    if depth > 8 or id(obj) in seen:
        return
    seen.add(id(obj))
    if obj is None or isinstance(obj, (bool, int, float)):
        return
    if isinstance(obj, str):
        yield obj
        return
    if isinstance(obj, BaseException):
        yield str(obj)
        yield repr(obj)
        yield from texts(obj.args, depth + 1, seen)
        return
    with contextlib.suppress(Exception):  # a repr that fails is not a leak
        yield repr(obj)
    if isinstance(obj, BaseNode):
        yield obj.get_content(metadata_mode="all")
        yield from texts(dict(obj.metadata), depth + 1, seen)
        return
    if isinstance(obj, inspect.BoundArguments):
        yield from texts(dict(obj.arguments), depth + 1, seen)
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from texts(k, depth + 1, seen)
            yield from texts(v, depth + 1, seen)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from texts(v, depth + 1, seen)
        return
    if hasattr(obj, "model_dump"):
        with contextlib.suppress(Exception):
            yield from texts(obj.model_dump(), depth + 1, seen)
        yield from texts(dict(vars(obj)), depth + 1, seen)
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        yield from texts(
            {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, depth + 1, seen
        )


def leaks(obj: Any, secrets: Iterable[str] = (CANARY, META_CANARY)) -> list[str]:
    """The secrets found anywhere in ``obj``."""
    found = set()
    for text in texts(obj):
        low = text.lower()
        found.update(s for s in secrets if s in low)
    return sorted(found)


class EventSink(BaseEventHandler):
    """Records every instrumentation event."""

    events: list[Any] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "EventSink"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)


class SpanSink(BaseSpanHandler[SimpleSpan]):
    """Records what every span handler receives: arguments, instance repr, results, errors."""

    seen: list[Any] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "SpanSink"

    def new_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any = None,
        parent_span_id: str | None = None,
        tags: Any = None,
        **kwargs: Any,
    ) -> SimpleSpan:
        self.seen.append(("enter", id_, bound_args, repr(instance)))
        return SimpleSpan(id_=id_, parent_id=parent_span_id)

    def prepare_to_exit_span(
        self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any
    ) -> SimpleSpan | None:
        self.seen.append(("exit", id_, result))
        return self.open_spans.get(id_)

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        self.seen.append(("drop", id_, err))
        return self.open_spans.get(id_)


class CallbackSink(BaseCallbackHandler):
    """Records every callback-manager event payload."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.payloads: list[Any] = []

    def on_event_start(
        self,
        event_type: Any,
        payload: Any = None,
        event_id: str = "",
        parent_id: str = "",
        **kwargs: Any,
    ) -> str:
        self.payloads.append(("start", event_type, payload))
        return event_id

    def on_event_end(
        self, event_type: Any, payload: Any = None, event_id: str = "", **kwargs: Any
    ) -> None:
        self.payloads.append(("end", event_type, payload))

    def start_trace(self, trace_id: str | None = None) -> None:
        return None

    def end_trace(self, trace_id: str | None = None, trace_map: Any = None) -> None:
        return None


# -- LLMs ----------------------------------------------------------------------------


class QuestionLLM(CustomLLM):
    """Answers with the last question line of its prompt: its *prompts* carry the
    private documents (so its events would leak them) but its answers never do."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="question-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        tail = prompt.rsplit("Question:", 1)[-1].split("\n", 1)[0].strip()
        return CompletionResponse(text=f"about {tail.lower()}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class FailingLLM(CustomLLM):
    """Fails like a provider that quotes the prompt in its error."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="failing-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise ValueError(f"context too long: {prompt}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise ValueError(f"context too long: {prompt}")
