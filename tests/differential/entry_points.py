"""Run one cell in one world and record what it shows (:class:`observations.Observation`).

:func:`observe` builds the world (corpus, store, engine, budgets, mechanism),
runs the entry point's runner (one function per ``EntryPoint.runner``) and
reads what an operator reads afterwards. Each runner asks the question twice
with the same query id (:data:`worlds.QUERY_ID`): the second ask shows what a
reused id does. Everything is seeded identically in both worlds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from host import Seen, frames_of, watching
from matrix import Cell, Context, Neighbour
from observations import Ask, Observation, normalise, outcome_of, public_part, released_part
from worlds import (
    BASES,
    QUERY_ID,
    QUESTION,
    SEED,
    Budgets,
    Corpus,
    Engine,
    Lab,
    base_rng,
    embedding_endpoint,
    raising_core,
    raising_lc,
    raising_li,
    requests_of,
    rows_with,
)

from dprag_core.algorithms.base import Mechanism
from dprag_core.answers import DPAnswer

__all__ = [
    "RUNNERS",
    "Tamper",
    "World",
    "cells_test",
    "check",
    "compare",
    "corpus_for",
    "observe",
    "use_mechanism",
]

STORE_READING = ("score_function", "exact_search", "partition")
"""The store options that say how to read a LangChain store (``open_store``'s)."""

RUN_ID = uuid.UUID("00000000-0000-4000-8000-000000000036")
"""DPRetriever's run id, the same for both asks (its query id)."""


def corpus_for(neighbour: Neighbour, base: str, *, has_x: bool) -> Corpus:
    """The corpus of one world: the base, the neighbour's extra records, x or not."""
    rows = BASES[base](base_rng()) + neighbour.extra()
    x = neighbour.x()
    if has_x:
        rows = rows_with(rows, x, first=neighbour.first)
    refs = tuple(r.ref for r in [*neighbour.extra(), x])
    return Corpus(
        rows=tuple(rows), x=x, has_x=has_x,
        raising=refs if neighbour.raising else (),
        ledger_raising=refs if neighbour.ledger_raising else (),
    )  # fmt: skip


@dataclass
class World:
    """One world of a cell: its corpus and the parts built over it."""

    cell: Cell
    corpus: Corpus
    store: Any
    engine: Engine
    budgets: Budgets
    subject: Any  # the mechanism (generators) or the selection step's options
    asks: list[Ask]
    embedding: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # its requests

    @property
    def x_unit(self) -> str:
        return self.corpus.x.ref


def _spy(mechanism: Any, ask: Callable[[], Ask]) -> None:
    """Record, per call from outside, the real documents the mechanism receives."""
    answer, stream = mechanism.answer, mechanism.stream
    busy = [False]  # answer() may run stream(): one call

    def seen(docs: Any) -> None:
        ask().candidates.append([(d.id, d.unit) for d in docs if not d.is_padding])

    def spied_answer(question: str, docs: Any, **kw: Any) -> Any:
        seen(docs)
        busy[0] = True
        try:
            return answer(question, docs, **kw)
        finally:
            busy[0] = False

    def spied_stream(question: str, docs: Any, **kw: Any) -> Any:
        if not busy[0]:
            seen(docs)
        return stream(question, docs, **kw)

    mechanism.answer, mechanism.stream = spied_answer, spied_stream


def build_world(cell: Cell, lab: Lab, folder: Path, pg_url: str | None, *, has_x: bool) -> World:
    """The world's corpus, store, engine, budgets and mechanism (a selection step's options)."""
    base = cell.neighbour.base if cell.store.corpus == "small" else cell.store.corpus
    corpus = corpus_for(cell.neighbour, base, has_x=has_x)
    key = (cell.store.name, cell.neighbour.name, base, has_x)
    if key not in lab.cache:
        try:
            lab.cache[key] = cell.store.build(corpus, pg_url)
        except Exception as error:  # the store cannot hold x: no such neighbour here
            lab.cache[key] = error
    store = lab.cache[key]
    if isinstance(store, Exception):
        import pytest

        pytest.skip(
            f"{cell.store.name} cannot hold the corpus of {cell.neighbour.name} "
            f"({corpus.side}): {type(store).__name__}: {store}"
        )
    folder.mkdir(parents=True)
    engine = cell.engine.build(lab, cell.entry.framework) if cell.engine else Engine()
    engine.fault.mode = cell.neighbour.endpoint
    budgets = Budgets(folder, raising=corpus.ledger_raising)
    ctx = Context(engine, budgets, cell.store.score, cell.store.score_range)
    world = World(cell, corpus, store, engine, budgets, cell.mechanism.build(ctx), [])
    if isinstance(world.subject, Mechanism):
        _spy(world.subject, lambda: world.asks[-1])
    return world


# -- reading the budgets as an operator does ----------------------------------------------


def _cli(*args: str) -> str:
    from dprag_core.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["ledger", *args])
        except SystemExit as stop:  # an operator error: one line, its text is the observation
            return f"exit {stop.code}"
    return out.getvalue()


def read_budgets(world: World, obs: Observation) -> None:
    """``dprag ledger status / history / export`` of the world's budgets."""
    path = str(world.budgets.path)
    if world.budgets.has_accountant:
        where = ("--sqlite", path, "--table", "corpus")
        obs.budget = normalise({
            "status": json.loads(_cli("status", *where, "--json")),
            "history": _cli("history", *where, "--last", "0").replace(path, "<store>"),
            "export": json.loads(_cli("export", *where, "--format", "json")),
        })  # fmt: skip
    if world.budgets.has_ledger:
        where = ("--sqlite", path, "--ledger")
        (status,) = json.loads(_cli("status", *where, "--json"))
        keep = ("kind", "store", "name", "budget_per_unit", "refusals")
        obs.ledger_public = normalise({k: status[k] for k in keep})
        rows = json.loads(_cli("export", *where, "--format", "json"))
        obs.ledger_rows = normalise([r for r in rows if r["unit"] != world.x_unit])
        obs.ledger_derived = world.cell.mechanism.ledger == "derived"


def read_engine(world: World, obs: Observation) -> None:
    """What the server and the hosted API received; the model sessions and their rows."""
    engine = world.engine
    if engine.server is not None:
        requests = requests_of(engine.server)
        obs.requests = requests
        obs.first_call = requests[:1]
        obs.over_context = sum(r["over_context"] for r in requests)
    if engine.hosted is not None:
        obs.hosted = list(engine.hosted)
        obs.first_call = engine.hosted[:1]
    logs = engine.row_logs()
    obs.sessions = [{"rows": len(log.prompts), "steps": log.steps} for log in logs]
    obs.rows = logs
    if engine.endpoint is not None:
        obs.endpoint = list(engine.endpoint)
    obs.embedding = list(world.embedding)


Tamper = Callable[[World], None]
"""A change to a built world before it runs (the positive controls' leaks)."""


def observe(
    cell: Cell,
    lab: Lab,
    folder: Path,
    pg_url: str | None,
    *,
    has_x: bool,
    tamper: Tamper | None = None,
) -> Observation:
    """Build one world, run its entry point (two asks, one id) and read what it shows."""
    world = build_world(cell, lab, folder, pg_url, has_x=has_x)
    if tamper is not None:
        tamper(world)
    lab.fresh_host_state()
    try:
        RUNNERS[cell.entry.runner](world)
    except Exception as error:  # the entry point refused the store when built
        if world.asks or not cell.store.may_be_refused:
            raise
        world.asks.append(Ask(outcome="refused when built: " + outcome_of(error)))
    obs = Observation(world.corpus.side, world.x_unit, world.asks)
    read_budgets(world, obs)
    read_engine(world, obs)
    route = world.subject.candidates_needed() if isinstance(world.subject, Mechanism) else None
    for ask in obs.asks:
        ask.route = route
    return obs


def use_mechanism(world: World, mechanism: Mechanism) -> None:
    """Run ``mechanism`` in ``world`` instead of the cell's (its candidates recorded)."""
    world.subject = mechanism
    _spy(mechanism, lambda: world.asks[-1])


# -- the runners -------------------------------------------------------------------------


def _ask(world: World, run: Callable[[Ask], None]) -> None:
    """Ask once: ``run`` fills the Ask; an exception is its outcome (and its frames what an
    error tracker captures); what the host saw meanwhile is recorded (host.py)."""
    ask = Ask()
    world.asks.append(ask)
    seen = Seen()
    try:
        with watching(seen), embedding_endpoint(world.engine.fault, world.embedding):
            run(ask)
    except Exception as error:
        ask.outcome = outcome_of(error)
        if world.cell.entry.events:  # else the caller's own frames hold every document
            ask.frames.append({"to": "caller", "frames": frames_of(error)})
    ask.host = {"stdout": seen.stdout, "stderr": seen.stderr, "warnings": seen.warnings,
                "logs": seen.logs}  # fmt: skip
    ask.work = dataclasses.asdict(seen.work)


def _callback_frames(ask: Ask, errors: list[BaseException]) -> None:
    """The frames of the exceptions a callback received (an error tracker's handler)."""
    for error in {id(e): e for e in errors}.values():
        ask.frames.append({"to": "callback", "frames": frames_of(error)})


def _handler() -> Any:
    """lc_support's RecordingHandler that also keeps every exception it receives."""
    from lc_support import RecordingHandler

    class Handler(RecordingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.errors: list[BaseException] = []

        def _error(self, name: str, error: BaseException, *args: Any, **kwargs: Any) -> None:
            self.errors.append(error)
            self.records.append(f"{name} {(error, *args)!r} {kwargs!r}")

        def on_chain_error(self, error: BaseException, *args: Any, **kwargs: Any) -> None:
            self._error("on_chain_error", error, *args, **kwargs)

        def on_retriever_error(self, error: BaseException, *args: Any, **kwargs: Any) -> None:
            self._error("on_retriever_error", error, *args, **kwargs)

        def on_llm_error(self, error: BaseException, *args: Any, **kwargs: Any) -> None:
            self._error("on_llm_error", error, *args, **kwargs)

        def on_tool_error(self, error: BaseException, *args: Any, **kwargs: Any) -> None:
            self._error("on_tool_error", error, *args, **kwargs)

    return Handler()


def _accountant(world: World) -> Any:
    mechanism = world.subject
    own = mechanism.corpus_accountant()
    if own is not None:
        return own
    return None if mechanism.query_cost() is None else world.budgets.accountant()


def _answer_parts(answer: DPAnswer) -> tuple[Any, Any]:
    """(public output, release) of a DPAnswer."""
    details = dict(answer.details)
    output = {
        "keys": sorted(details),
        "mechanism": answer.mechanism,
        "guarantee": normalise(answer.guarantee),
        "uses_corpus": answer.uses_corpus,
        "details": normalise(public_part(details)),
    }
    return output, {"text": answer.text, "details": normalise(released_part(details))}


def _core_source(world: World) -> Any:
    return raising_core(world.store, world.corpus) if world.corpus.raising else world.store


def core_answer(world: World) -> None:
    from dprag_core import PrivateRAG

    rng = np.random.default_rng(SEED)
    app = PrivateRAG(world.subject, _core_source(world), accountant=_accountant(world))

    def run(ask: Ask) -> None:
        ask.output, ask.release = _answer_parts(app.answer(QUESTION, rng=rng, query_id=QUERY_ID))

    for _ in range(2):
        _ask(world, run)


def core_stream(world: World) -> None:
    from dprag_core import PrivateRAG

    rng = np.random.default_rng(SEED)
    app = PrivateRAG(world.subject, _core_source(world), accountant=_accountant(world))

    def run(ask: Ask) -> None:
        *chunks, last = app.stream(QUESTION, rng=rng, query_id=QUERY_ID)
        assert isinstance(last, DPAnswer)
        ask.output, release = _answer_parts(last)
        ask.release = {**release, "chunks": chunks}

    for _ in range(2):
        _ask(world, run)


# LangChain


def _lc_source(world: World) -> dict[str, Any]:
    store = world.cell.store
    options: dict[str, Any] = {"unit_key": "ref", **store.options}
    if world.corpus.raising:  # the reading options go to the user's retriever, over the store
        reading = {k: v for k, v in store.options.items() if k in STORE_READING}
        retriever = raising_lc(world.store, world.corpus, **reading)
        rest = {k: v for k, v in options.items() if k not in STORE_READING}
        return {**rest, "retriever": retriever, "retriever_honours_k": True}
    if store.retriever is not None:
        return {**options, "retriever": store.retriever(world.store)}
    return {**options, "vectorstore": world.store}


def _chain(world: World) -> Any:
    from langchain_dprag import DPRAGChain

    return DPRAGChain(mechanism=world.subject, accountant=_accountant(world), rng=SEED,
                      **_lc_source(world))  # fmt: skip


def _lc_config() -> dict[str, Any]:
    from langchain_dprag.chain import QUERY_ID_KEY

    return {"configurable": {QUERY_ID_KEY: QUERY_ID}}


def _lc_output(out: Any) -> tuple[Any, Any]:
    data = out.model_dump()
    details = data.pop("details")
    release = {"text": data.pop("answer"), "answer_source": data.pop("answer_source")}
    output = {
        **normalise(data),
        "keys": sorted(details),
        "details": normalise(public_part(details)),
    }
    return output, {**release, "details": normalise(released_part(details))}


def chain_invoke(world: World) -> None:
    chain = _chain(world)

    def run(ask: Ask) -> None:
        handler = _handler()
        try:
            out = chain.invoke(QUESTION, {**_lc_config(), "callbacks": [handler]})
            ask.output, ask.release = _lc_output(out)
        finally:
            ask.events = [normalise(r) for r in handler.records]
            _callback_frames(ask, handler.errors)

    for _ in range(2):
        _ask(world, run)


def chain_events(world: World) -> None:
    chain = _chain(world)

    async def events() -> list[Any]:
        return [e async for e in chain.astream_events(QUESTION, _lc_config(), version="v2")]

    def run(ask: Ask) -> None:
        seen = asyncio.run(events())
        ask.events = [normalise({k: e.get(k) for k in ("event", "name", "data", "tags")})
                      for e in seen]  # fmt: skip
        root = [e for e in seen if e["name"] == "DPRAGChain"]
        chunks = [e["data"]["chunk"].answer for e in root if e["event"] == "on_chain_stream"]
        (end,) = [e["data"]["output"] for e in root if e["event"] == "on_chain_end"]
        ask.output, release = _lc_output(end)
        ask.release = {**release, "chunks": chunks}

    for _ in range(2):
        _ask(world, run)


def dp_retriever(world: World) -> None:
    from langchain_dprag import DPRetriever

    options = {k: v for k, v in world.cell.store.options.items() if k in STORE_READING}
    retriever = DPRetriever(vectorstore=world.store, unit_key="ref", rng=SEED, **options,
                            **world.subject)  # fmt: skip

    def run(ask: Ask) -> None:
        handler = _handler()
        try:
            docs = retriever.invoke(QUESTION, {"run_id": RUN_ID, "callbacks": [handler]})
            ask.output = {"type": type(docs).__name__}
            ask.release = [normalise(d.model_dump()) for d in docs]  # returned in full
        finally:
            ask.events = [normalise(r) for r in handler.records]
            _callback_frames(ask, handler.errors)

    for _ in range(2):
        _ask(world, run)


# LlamaIndex


@contextlib.contextmanager
def li_channels() -> Iterator[tuple[Any, Any, Any, Any]]:
    """Sinks on the root dispatcher and a callback manager (li_helpers), for one run."""
    from li_helpers import CallbackSink, EventSink, QuestionLLM, SpanSink
    from llama_index.core import Settings
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.instrumentation import get_dispatcher

    events, spans, callbacks = EventSink(), SpanSink(), CallbackSink()
    root = get_dispatcher()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    old_llm = Settings._llm
    Settings.llm = QuestionLLM()  # nothing may fall back to OpenAI
    try:
        yield events, spans, callbacks, CallbackManager([callbacks])
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)
        Settings._llm = old_llm


def _engine(world: World, manager: Any, **options: Any) -> Any:
    from llamaindex_dprag import DPQueryEngine

    store = world.cell.store
    common = {
        "mechanism": world.subject,
        "budget": _accountant(world),
        "rng": SEED,
        "unit_key": "ref",
        "callback_manager": manager,
        **store.options,
        **options,
    }
    if world.corpus.raising:
        return DPQueryEngine.from_retriever(
            raising_li(world.store, world.corpus), returns_everything=True, **common
        )
    return DPQueryEngine.from_index(world.store, **common)


def _li_output(response: Any, chunks: list[str] | None = None) -> tuple[Any, Any]:
    metadata = dict(response.metadata or {})
    details = metadata.pop("details", {})
    stop = metadata.pop("stop_reason", None)
    source = metadata.pop("answer_source", None)
    output = {
        "type": type(response).__name__,
        "source_nodes": len(response.source_nodes),
        **normalise(metadata),
        "keys": sorted(details),
        "details": normalise(public_part(details)),
    }
    text = response.response if chunks is None else "".join(chunks)
    release = {"text": text, "stop_reason": stop, "answer_source": source,
               "details": normalise(released_part(details))}  # fmt: skip
    return output, release if chunks is None else {**release, "chunks": chunks}


def _li_events(events: Any, spans: Any, callbacks: Any) -> Any:
    return normalise({"events": events.events, "spans": spans.seen,
                      "callbacks": callbacks.payloads})  # fmt: skip


def _engine_runs(world: World, *, streaming: bool) -> None:
    from llamaindex_dprag.bundles import DPQueryBundle

    with li_channels() as (events, spans, callbacks, manager):
        engine = _engine(world, manager, streaming=streaming)

        def run(ask: Ask) -> None:
            for sink in (events.events, spans.seen, callbacks.payloads):
                sink.clear()
            try:
                response = engine.query(DPQueryBundle(QUESTION, query_id=QUERY_ID))
                chunks = list(response.response_gen) if streaming else None
                ask.output, ask.release = _li_output(response, chunks)
            finally:
                ask.events = _li_events(events, spans, callbacks)
                dropped = [e for kind, _, e, *_ in spans.seen if kind == "drop" and e]
                _callback_frames(ask, dropped)

        for _ in range(2):
            _ask(world, run)


def engine_query(world: World) -> None:
    _engine_runs(world, streaming=False)


def engine_stream(world: World) -> None:
    _engine_runs(world, streaming=True)


def _postprocess(world: World, post: Any) -> None:
    from llamaindex_dprag.bundles import DPQueryBundle
    from llamaindex_dprag.cell_retriever import PartitionedRetriever

    top = len(world.corpus.rows)
    partition = world.cell.store.options.get("partition")
    retriever = (
        world.store.as_retriever(similarity_top_k=top)
        if partition is None
        else PartitionedRetriever(world.store, partition, similarity_top_k=top)
    )
    nodes = retriever.retrieve(QUESTION)

    def run(ask: Ask) -> None:
        kept = post.postprocess_nodes(nodes, DPQueryBundle(QUESTION, query_id=QUERY_ID))
        ask.output = {"type": type(kept).__name__}
        ask.release = [(n.node.metadata.get("ref"), n.node.get_content()) for n in kept]

    for _ in range(2):
        _ask(world, run)


def _post_options(store: Any) -> dict[str, Any]:
    """A store row's options for a postprocessor (a partition is its retriever's, above)."""
    return {k: v for k, v in store.options.items() if k != "partition"}


def threshold_postprocessor(world: World) -> None:
    from llamaindex_dprag import DPThresholdPostprocessor

    options = dict(world.subject)
    store = world.cell.store
    post = DPThresholdPostprocessor(
        epsilon=options["epsilon"], k=options["k"], budget=options["accountant"],
        score_range=store.score_range, unit_key="ref", rng=SEED, **_post_options(store),
    )  # fmt: skip
    _postprocess(world, post)


def budget_postprocessor(world: World) -> None:
    from llamaindex_dprag import PrivacyBudgetPostprocessor

    store = world.cell.store
    post = PrivacyBudgetPostprocessor(unit_key="ref", score_range=store.score_range,
                                      **_post_options(store), **world.subject)  # fmt: skip
    _postprocess(world, post)


RUNNERS: dict[str, Callable[[World], None]] = {
    "core_answer": core_answer,
    "core_stream": core_stream,
    "chain_invoke": chain_invoke,
    "chain_events": chain_events,
    "dp_retriever": dp_retriever,
    "engine_query": engine_query,
    "engine_stream": engine_stream,
    "threshold_postprocessor": threshold_postprocessor,
    "budget_postprocessor": budget_postprocessor,
}


def compare(
    cell: Cell, lab: Lab, folder: Path, request: Any, *, tamper: Tamper | None = None
) -> list[str]:
    """Run the cell in D and in D + x: every deterministic difference (observations.py).

    ``request``: the pytest request (for the PostgreSQL fixture), or None outside pytest.
    """
    from observations import differences

    pg_url = request.getfixturevalue("pg_url") if cell.store.postgres else None
    d = observe(cell, lab, folder / "D", pg_url, has_x=False, tamper=tamper)
    dx = observe(cell, lab, folder / "D+x", pg_url, has_x=True, tamper=tamper)
    return differences(d, dx)


def check(cell: Cell, lab: Lab, folder: Path, request: Any) -> None:
    """Fail on any deterministic difference between D and D + x."""
    found = compare(cell, lab, folder, request)
    assert not found, f"{cell.id}: D and D+x differ\n" + "\n".join(found)


def cells_test(framework: str) -> Callable[..., None]:
    """The test of one framework's selected cells (the test modules' one test each)."""
    import pytest
    from matrix import params

    @pytest.mark.parametrize("cell", params(framework))
    def test_neighbouring_corpora_look_alike(
        cell: Cell, lab: Lab, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        check(cell, lab, tmp_path, request)

    return test_neighbouring_corpora_look_alike
