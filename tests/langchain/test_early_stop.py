"""A consumer that stops a DPRAGChain stream early leaves no run open and no generator paused.

Every run a tracer saw open (the chain run, the nested chat-model run of the
released answer) is closed by an end or an error, and the mechanism's private
generator (whose frame holds the documents) is closed: for ``stream``,
``astream`` and ``astream_events``, stopped by ``break``, by an explicit
``aclose()`` (at once, not when the garbage collector gets to it), or by a
cancellation while a step runs in the worker thread (of the consumer, or of the
step's own task, as ``asyncio.run`` cancels leftover tasks when it shuts down).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import aclosing
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, budget
from toy_mechanisms import ToyMechanism

from dprag_core.answers import DPAnswer
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain


class Closable(ToyMechanism):
    """Streams word by word, optionally pausing after the first; records being closed.

    It stands in for dprag's own streaming mechanisms, which stream live
    (:func:`dprag_core.pipeline.streams_own_text`: a mechanism of the user's own is run
    whole before its first chunk leaves, so it never pauses between released chunks).
    """

    __module__ = "dprag_core.algorithms"  # streamed live, as dprag's own mechanisms are

    def __init__(self, pause: threading.Event | None = None) -> None:
        super().__init__(k=3)
        self.pause = pause
        self.waiting = threading.Event()
        self.closed = 0

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        try:
            for i, item in enumerate(super().stream(question, docs, rng=rng)):
                if i == 1 and self.pause is not None:
                    self.waiting.set()
                    self.pause.wait(timeout=30)
                yield item
        finally:
            self.closed += 1


class Runs(BaseCallbackHandler):
    """Every run opened, and how each was closed (``"end"`` or the error's type)."""

    def __init__(self) -> None:
        self.opened: dict[UUID, str] = {}
        self.closed: dict[UUID, str] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self.opened[run_id] = "chain"

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any
    ) -> None:
        self.opened[run_id] = "chat_model"

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self.closed[run_id] = "end"

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        self.closed[run_id] = "end"

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self.closed[run_id] = type(error).__name__

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self.closed[run_id] = type(error).__name__

    def dangling(self) -> list[str]:
        return [kind for run, kind in self.opened.items() if run not in self.closed]


def _setup(
    store: InMemoryVectorStore, pause: threading.Event | None = None
) -> tuple[DPRAGChain, Closable, Runs, dict[str, Any]]:
    mechanism = Closable(pause)
    chain = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget())
    runs = Runs()
    return chain, mechanism, runs, {"callbacks": [runs]}


def _assert_closed(runs: Runs, mechanism: Closable) -> None:
    assert sorted(runs.opened.values()) == ["chain", "chat_model"]
    assert runs.dangling() == []
    assert mechanism.closed == 1


async def _settle(runs: Runs, mechanism: Closable) -> None:
    """Let the event loop finalize what a ``break`` left behind (bounded, no timing asserted)."""
    for _ in range(500):
        if not runs.dangling() and mechanism.closed:
            return
        await asyncio.sleep(0.01)


def test_stream_stopped_early_closes_every_run(store: InMemoryVectorStore) -> None:
    chain, mechanism, runs, config = _setup(store)
    for _ in chain.stream(QUESTION, config):
        break
    _assert_closed(runs, mechanism)
    answer_run = next(r for r, kind in runs.opened.items() if kind == "chat_model")
    assert runs.closed[answer_run] == "GeneratorExit"  # as LangChain's own chat models report


async def test_astream_closed_early_closes_every_run_at_once(store: InMemoryVectorStore) -> None:
    chain, mechanism, runs, config = _setup(store)
    async with aclosing(chain.astream(QUESTION, config)) as stream:
        async for _ in stream:
            break
    _assert_closed(runs, mechanism)  # no loop turn needed: aclose() reached every layer


async def test_astream_break_closes_every_run(store: InMemoryVectorStore) -> None:
    chain, mechanism, runs, config = _setup(store)
    async for _ in chain.astream(QUESTION, config):
        break
    await _settle(runs, mechanism)
    _assert_closed(runs, mechanism)


async def test_astream_events_stopped_early_closes_every_run(store: InMemoryVectorStore) -> None:
    chain, mechanism, runs, config = _setup(store)
    async with aclosing(chain.astream_events(QUESTION, config, version="v2")) as events:
        async for event in events:
            if event["event"] == "on_chat_model_stream":
                break
    await _settle(runs, mechanism)
    _assert_closed(runs, mechanism)


async def test_a_cancelled_step_closes_the_stream_once_it_returns(
    store: InMemoryVectorStore,
) -> None:
    pause = threading.Event()
    chain, mechanism, runs, config = _setup(store, pause)
    stream = chain.astream(QUESTION, config)
    assert (await anext(stream)).answer == "3"
    step = asyncio.ensure_future(anext(stream))  # the mechanism pauses in the worker thread
    await asyncio.sleep(0.05)
    step.cancel()
    await asyncio.gather(step, return_exceptions=True)
    assert mechanism.closed == 0  # still running: it cannot be closed under the thread
    pause.set()
    await _settle(runs, mechanism)
    _assert_closed(runs, mechanism)


@pytest.mark.parametrize("cancelled", [["step"], ["consumer", "step"]])
async def test_a_cancelled_step_task_closes_the_stream_in_its_thread(
    store: InMemoryVectorStore, cancelled: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    pause = threading.Event()
    chain, mechanism, runs, config = _setup(store, pause)
    stream = chain.astream(QUESTION, config)
    assert (await anext(stream)).answer == "3"
    tasks = {"consumer": asyncio.ensure_future(anext(stream))}
    for _ in range(500):  # bounded wait until the worker thread runs the paused step
        if mechanism.waiting.is_set():
            break
        await asyncio.sleep(0.01)
    (tasks["step"],) = [
        t
        for t in asyncio.all_tasks()
        if "run_in_executor" in getattr(t.get_coro(), "__qualname__", "")
    ]
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for name in cancelled:  # as asyncio.run's shutdown cancels what is left
            tasks[name].cancel()
            await asyncio.sleep(0)
        outcome = (await asyncio.gather(tasks["consumer"], return_exceptions=True))[0]
        assert isinstance(outcome, asyncio.CancelledError)  # not "generator already executing"
        assert mechanism.closed == 0  # still running: it cannot be closed under the thread
        pause.set()
        await _settle(runs, mechanism)
    _assert_closed(runs, mechanism)
    assert "already executing" not in caplog.text
