"""Fixtures for the LlamaIndex adapter tests: explicit Settings (no OpenAI default),
a FAISS-backed index, and sinks on every side channel (instrumentation events and
spans on the root dispatcher, callback-manager events, logs)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from li_helpers import CallbackSink, EventSink, HashEmbedding, SpanSink, build_index
from llama_index.core import Settings
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher


@dataclass
class Channels:
    """Everything a side channel received during a test."""

    events: EventSink
    spans: SpanSink
    callbacks: CallbackSink
    caplog: pytest.LogCaptureFixture
    extra: list[Any] = field(default_factory=list)

    def clear(self) -> None:
        """Forget what was recorded so far (e.g. while building the index)."""
        self.events.events.clear()
        self.spans.seen.clear()
        self.callbacks.payloads.clear()
        self.caplog.clear()

    def everything(self) -> list[Any]:
        records = [(r.getMessage(), r.args, r.exc_text) for r in self.caplog.records]
        return [
            self.events.events,
            self.spans.seen,
            self.callbacks.payloads,
            records,
            self.caplog.text,
            self.extra,
        ]


@pytest.fixture
def channels(caplog: pytest.LogCaptureFixture) -> Iterator[Channels]:
    """Attach sinks to the root dispatcher and to Settings.callback_manager (before any
    LlamaIndex object of the test is built), capture logs at DEBUG."""
    caplog.set_level(logging.DEBUG)
    events, spans, callbacks = EventSink(), SpanSink(), CallbackSink()
    root = get_dispatcher()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    old_cb = Settings._callback_manager
    Settings.callback_manager = CallbackManager([callbacks])
    try:
        yield Channels(events, spans, callbacks, caplog)
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)
        Settings._callback_manager = old_cb


@pytest.fixture(autouse=True)
def explicit_settings() -> Iterator[None]:
    """Settings.embed_model / llm set explicitly: nothing may fall back to OpenAI."""
    from li_helpers import QuestionLLM

    old_embed, old_llm = Settings._embed_model, Settings._llm
    Settings.embed_model = HashEmbedding()
    Settings.llm = QuestionLLM()
    try:
        yield
    finally:
        Settings._embed_model, Settings._llm = old_embed, old_llm


@pytest.fixture
def index(channels: Channels) -> Any:
    """A VectorStoreIndex over the canary corpus in a cosine FAISS store; indexing itself
    (which reports the documents to the embedding events) is not recorded."""
    built = build_index()
    channels.clear()
    return built
