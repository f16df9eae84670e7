"""LlamaIndex instrumentation events of a DP query: public fields only.

:class:`DPQueryStartEvent` (after the query's cost was charged) and
:class:`DPQueryEndEvent` (when its answer is released: at the end of the
stream for a streaming engine) are sent to the dispatcher of
:mod:`llamaindex_dprag.query_engine`, so every event handler on the root
dispatcher receives them, next to LlamaIndex's own ``QueryStartEvent`` /
``QueryEndEvent``. Their fields are exactly the core payloads of
:mod:`dprag_core.events` (the module says why each is public); nothing else of
the query (no timings, no counts per voter or per document, no token usage of
the private prompts) is reported.

>>> from dprag_core.answers import DPAnswer
>>> from dprag_core.budget import Budget
>>> from dprag_core.events import end_payload
>>> event = DPQueryEndEvent(**end_payload(DPAnswer("", Budget(1.0), "DPVote",
...                                                {"stop_reason": "null_token"})))
>>> event.stop_reason, event.class_name()
('null_token', 'DPQueryEndEvent')
"""

from __future__ import annotations

from llama_index.core.instrumentation.events import BaseEvent

__all__ = ["DPQueryEndEvent", "DPQueryStartEvent"]


class DPQueryStartEvent(BaseEvent):
    """A DP query was charged and starts: its mechanism and the (ε, δ) it was charged.

    ``epsilon``/``delta`` are None for a mechanism without a fixed per-query
    cost (MuRAG charges its per-unit ledger inside the query; baselines nothing).
    """

    mechanism: str
    epsilon: float | None = None
    delta: float | None = None

    @classmethod
    def class_name(cls) -> str:
        """The event's name for handlers."""
        return "DPQueryStartEvent"


class DPQueryEndEvent(BaseEvent):
    """A DP answer was released: its guarantee, why it ended, what it released privately."""

    mechanism: str
    epsilon: float
    delta: float
    stop_reason: str | None = None
    private_tokens: int | None = None
    keywords_released: int | None = None
    public_fallback: bool = False

    @classmethod
    def class_name(cls) -> str:
        """The event's name for handlers."""
        return "DPQueryEndEvent"
