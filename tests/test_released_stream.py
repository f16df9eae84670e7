"""A stream releases exactly its answer's text: the chunks joined are the DPAnswer's text.

A mechanism of the user's own whose stream yields other chunks (here: a document's text)
than its answer is refused with the one fixed failure before any chunk is released; a
user's mechanism that keeps the contract streams as before. dprag's own mechanisms stream
live, and one that broke the contract would fail at its end, its answer not released.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from toy_mechanisms import RELEASED, ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.algorithms.base import StreamingMechanism
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.errors import PrivateDataError, reveal_private_errors
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import streams_own_text
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

SECRET = "qx93canary-ermengarde"


@HonoursK
def retriever(question: str, k: int) -> list[ScoredDocument]:
    return [ScoredDocument("d0", f"record: {SECRET}", 0.9)]


class Streaming(StreamingMechanism):
    """A user's streaming mechanism: ``leak`` streams a document, then answers "Paris"."""

    name = "Mine"

    def __init__(self, *, leak: bool) -> None:
        self.leak = leak

    def candidates_needed(self) -> int:
        return 1

    def query_cost(self) -> Budget:
        return Budget(1.0, 1e-6)

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        if self.leak:
            yield docs[0].text
        else:
            yield "Par"
            yield "is"
        yield DPAnswer("Paris", Budget(1.0, 1e-6), self.name, dict(RELEASED))


def _app(mechanism: StreamingMechanism | ToyMechanism) -> PrivateRAG:
    return PrivateRAG(mechanism, retriever, accountant=InMemoryCorpusAccountant(Budget(9, 1e-3)))


def test_a_users_stream_of_other_chunks_is_refused_before_anything_leaves() -> None:
    stream = _app(Streaming(leak=True)).stream("Capital?")
    with pytest.raises(PrivateDataError):
        next(stream)  # the first step: nothing was released
    with reveal_private_errors(), pytest.raises(ValueError, match="join to its DPAnswer's text"):
        next(_app(Streaming(leak=True)).stream("Capital?"))


def test_a_users_stream_that_keeps_the_contract_streams() -> None:
    items = list(_app(Streaming(leak=False)).stream("Capital?"))
    assert items[:2] == ["Par", "is"] and isinstance(items[2], DPAnswer)
    assert not streams_own_text(Streaming(leak=False))


class BrokenBuiltIn(Streaming):
    """As if dprag's own mechanism broke the contract: streamed live, failing at its end."""

    __module__ = "dprag_core.algorithms.broken"

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        yield "Rome"
        yield DPAnswer("Paris", Budget(1.0, 1e-6), self.name, dict(RELEASED))


def test_a_live_stream_that_breaks_the_contract_releases_no_answer() -> None:
    mechanism = BrokenBuiltIn(leak=False)
    assert streams_own_text(mechanism)
    stream = _app(mechanism).stream("Capital?")
    assert next(stream) == "Rome"
    with pytest.raises(PrivateDataError):
        next(stream)
