"""Positive controls: the harness reports a difference on each observable when something leaks.

Each test runs one cell twice: as it is (no difference on that observable) and
with a deliberately leaky part (tests/differential/leaky.py) that puts what
the corpus holds into that observable; the harness must report it there. A
harness that could not see a leak would pass everything: these tests are what
makes a passing matrix mean something.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from entry_points import Tamper, World, compare, use_mechanism
from leaky import (
    DocCharging,
    DocEmbedding,
    DocTokenizing,
    LeakyDetails,
    PerDocGeneration,
    PerDocSession,
    Quiet,
    RaisingWithDocuments,
    ReuseLeak,
    UnitCountLedger,
    hnsw_retriever,
    patched_end_payload,
    uncut_prompts,
)
from matrix import Cell, cell_of

from dprag_core.errors import reveal_private_errors
from dprag_core.retrieval.capabilities import HonoursK

CHANNELS = (
    "ask 1: outcome", "ask 2: outcome", "ask 1: output", "ask 1: events", "corpus budget",
    "per-unit ledger rows", "server requests", "prompts over the server's context",
    "hosted text API calls", "model sessions", "rows", "prefill layout", "candidates",
    "ask 1: stdout", "ask 1: stderr", "ask 1: logs", "ask 1: warnings", "ask 1: frames",
    "embedding requests", "model endpoint requests", "ask 1: work past the bound", "ask 1: work",
)  # fmt: skip


def _channels(found: list[str]) -> set[str]:
    """The channels (observations.py) that ``found`` reports a difference on."""
    return {c for c in CHANNELS for line in found if line.startswith(c)}


def _controlled(
    cell: Cell, lab: Any, tmp_path: Path, request: Any, leak: Tamper, *, base: Tamper | None = None
) -> tuple[set[str], set[str]]:
    """(channels that differ as the cell is, with ``base``; and with ``base`` then ``leak``)."""

    def leaky(world: World) -> None:
        if base is not None:
            base(world)
        leak(world)

    clean = compare(cell, lab, tmp_path / "clean", request, tamper=base)
    return _channels(clean), _channels(
        compare(cell, lab, tmp_path / "leaky", request, tamper=leaky)
    )


def _quiet(world: World) -> None:
    use_mechanism(world, Quiet(k=8))


GENERATOR_ENTRIES = {
    "PrivateRAG.answer": "core-list",
    "DPRAGChain.invoke": "lc-inmemory",
    "DPQueryEngine.query": "li-simple",
}


def _hosted_cell(entry: str) -> Cell:
    """A cell whose mechanism the controls replace (a text mechanism on the hosted API)."""
    return cell_of(entry, "RAG", GENERATOR_ENTRIES[entry], "nearest", engine="hosted")


@pytest.mark.parametrize("entry", sorted(GENERATOR_ENTRIES))
def test_a_document_count_in_the_details_is_caught(
    entry: str, lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism putting its document count and an id in public-kind details keys."""
    clean, leaky = _controlled(
        _hosted_cell(entry), lab, tmp_path, request,
        leak=lambda w: use_mechanism(w, LeakyDetails(k=8)), base=_quiet,
    )  # fmt: skip
    assert "ask 1: output" not in clean and "ask 1: output" in leaky


@pytest.mark.parametrize(
    "entry", ["DPRAGChain.invoke", "DPRAGChain.astream_events", "DPQueryEngine.query"]
)
def test_a_document_count_in_the_events_is_caught(
    entry: str,
    lab: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An end-of-query event payload that carries how many documents were retrieved."""
    store = "lc-inmemory" if entry.startswith("DPRAG") else "li-simple"
    cell = cell_of(entry, "RAG", store, "nearest", engine="hosted")
    worlds: list[World] = []

    def count() -> int:  # the documents the current query's mechanism received
        return len(worlds[-1].asks[-1].candidates[-1])

    def watched(world: World) -> None:
        _quiet(world)
        worlds.append(world)

    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=_quiet))
    with patched_end_payload(monkeypatch, count):
        leaky = _channels(compare(cell, lab, tmp_path / "leaky", request, tamper=watched))
    assert "ask 1: events" not in clean and "ask 1: events" in leaky


def test_a_retrieval_error_quoting_documents_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store failing with the text it read: sealed (the same failure in both worlds) until
    the data owner's debug switch lets the message out."""
    cell = _hosted_cell("PrivateRAG.answer")

    def failing(world: World) -> None:
        _quiet(world)
        inner = world.store

        def search(question: str, k: int) -> Any:
            raise ValueError(f"cannot read {[d.text for d in inner(question, k)]}")

        world.store = HonoursK(search)

    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=failing))
    with reveal_private_errors():
        leaky = _channels(compare(cell, lab, tmp_path / "leaky", request, tamper=failing))
    assert "ask 1: outcome" not in clean and "ask 1: outcome" in leaky


def test_a_query_id_remembered_only_after_enough_documents_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A reused id refused only when the first query read five documents (x's presence)."""
    clean, leaky = _controlled(
        _hosted_cell("PrivateRAG.answer"), lab, tmp_path, request,
        leak=lambda w: use_mechanism(w, ReuseLeak(k=8)), base=_quiet,
    )  # fmt: skip
    assert "ask 2: outcome" not in clean and "ask 2: outcome" in leaky


def test_a_charge_per_document_in_the_corpus_budget_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism charging the corpus budget once per document it read."""
    clean, leaky = _controlled(
        _hosted_cell("PrivateRAG.answer"), lab, tmp_path, request,
        leak=lambda w: use_mechanism(w, DocCharging(w.budgets.accountant(), k=8)), base=_quiet,
    )  # fmt: skip
    assert "corpus budget" not in clean and "corpus budget" in leaky


def test_a_ledger_charging_by_the_units_charged_together_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """MuRAG over a ledger whose charge of a unit depends on the others charged with it."""
    from dprag_core.algorithms import MuRAG

    cell = cell_of("PrivateRAG.answer", "MuRAG", "core-list", "nearest", engine="eager")

    def murag(ledger_kind: Any) -> Tamper:
        def build(world: World) -> None:
            ledger = ledger_kind(world.budgets.path, budget_per_unit=400.0, create=True)
            world.budgets._ledger = ledger
            use_mechanism(world, MuRAG(world.subject.inner, ledger=ledger, tau=0.55,
                                       epsilon_query=40.0))  # fmt: skip

        return build

    from dprag_core.accounting.ledger import SQLiteLedger

    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=murag(SQLiteLedger)))
    leaky = _channels(
        compare(cell, lab, tmp_path / "leaky", request, tamper=murag(UnitCountLedger))
    )
    assert "per-unit ledger rows" not in clean and "per-unit ledger rows" in leaky


@pytest.mark.parametrize(
    ("engine", "neighbour", "channel", "uncut"),
    [
        ("scripted-server", "nearest", "server requests", False),
        ("scripted-server", "longest", "prompts over the server's context", True),
        ("eager", "nearest", "model sessions", False),
    ],
)
def test_a_session_per_document_is_caught(
    engine: str,
    neighbour: str,
    channel: str,
    uncut: bool,
    lab: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A mechanism prefilling one row per document it read: the server sees the rows, the
    engine a batch of that size; ``uncut``: on a served model that sends its prompts whole
    (as before the public envelope), x's row is a prompt over the server's context."""
    cell = cell_of("PrivateRAG.answer", "NonRAG", "core-list", neighbour, engine=engine)

    def leak(world: World) -> None:
        if uncut:
            uncut_prompts(world.engine.text)
        use_mechanism(world, PerDocSession(world.engine.token, k=8))

    clean, leaky = _controlled(cell, lab, tmp_path, request, base=_quiet, leak=leak)
    assert channel not in clean and channel in leaky


def test_a_call_per_document_to_a_hosted_api_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism asking a hosted text API once per document it read."""
    clean, leaky = _controlled(
        _hosted_cell("PrivateRAG.answer"), lab, tmp_path, request, base=_quiet,
        leak=lambda w: use_mechanism(w, PerDocGeneration(w.engine.text, k=8)),
    )  # fmt: skip
    assert "hosted text API calls" not in clean and "hosted text API calls" in leaky


def test_rows_padded_to_the_longest_row_are_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch laid out to its longest row (data-dependent), as before the public width:
    the static batch's prefill shapes differ (whatever is released), on every CPU."""
    import torch

    import dprag_core.models.hf as hf

    cell = cell_of("PrivateRAG.answer", "DPVote", "core-list", "longest", engine="static")
    clean = _channels(compare(cell, lab, tmp_path / "clean", request))
    real = hf._left_pad

    def longest(rows: list[list[int]], pad: int, device: torch.device, width: int) -> Any:
        return real(rows, pad, device, max(len(r) for r in rows))

    monkeypatch.setattr(hf, "_left_pad", longest)
    leaky = _channels(compare(cell, lab, tmp_path / "leaky", request))
    assert "prefill layout" not in clean and "rows" not in clean
    assert "prefill layout" in leaky


def _rows_prefill(world: World) -> None:
    """The eager engine's opt-in ``prefill="rows"``: each row prefilled at its own length."""
    world.engine.token.inner.prefill_kind = "rows"


def test_the_per_row_prefill_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The eager engine's default prefill is one forward over the public width; prefilling
    each row alone (what ``prefill="rows"`` opts into) makes the forwards' shapes follow
    x's token count: the prefill layout differs."""
    cell = cell_of("PrivateRAG.answer", "DPVote", "core-list", "longest", engine="eager")
    clean, leaky = _controlled(cell, lab, tmp_path, request, leak=_rows_prefill)
    assert "prefill layout" not in clean and "prefill layout" in leaky


def test_an_approximate_index_declared_exact_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A FAISS HNSW index behind HonoursK (a broken promise): x moves other records out."""
    from worlds import BASES, Corpus, base_rng, core_list

    cell = cell_of("PrivateRAG.answer", "VoteRAG", "core-faiss", "nearest", engine="eager")

    def large(world: World) -> list[Any]:  # 300 records, and x in D + x
        _quiet(world)
        return BASES["large"](base_rng()) + ([world.corpus.x] if world.corpus.has_x else [])

    def flat(world: World) -> None:
        world.store = core_list(Corpus(tuple(large(world)), world.corpus.x, world.corpus.has_x))

    def hnsw(world: World) -> None:
        world.store = hnsw_retriever(large(world))

    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=flat))
    leaky = _channels(compare(cell, lab, tmp_path / "leaky", request, tamper=hnsw))
    assert "candidates" not in clean and "candidates" in leaky


def _stderr(text: str) -> None:
    os.write(2, (text + "\n").encode())  # under Python's sys.stderr: the descriptor itself


def _silent_logger(text: str) -> None:
    logger = logging.getLogger("leaky.silent")  # exists before the ask, propagates nothing
    logger.debug(text)


logging.getLogger("leaky.silent").propagate = False

EMITTERS: dict[str, tuple[str, Any]] = {  # how it leaks: (the channel, the emitter)
    "print": ("ask 1: stdout", print),
    "fd-2": ("ask 1: stderr", _stderr),
    "debug-log": ("ask 1: logs", lambda text: logging.getLogger("langchain_dprag.x").debug(text)),
    "unpropagated-log": ("ask 1: logs", _silent_logger),
    "warning": ("ask 1: warnings", lambda text: warnings.warn(text, UserWarning, stacklevel=1)),
}


@pytest.mark.parametrize("how", sorted(EMITTERS))
def test_a_document_count_printed_logged_or_warned_is_caught(
    how: str,
    lab: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An adapter that prints (stdout; stderr at the descriptor), logs at DEBUG (also from a
    logger that does not propagate) or warns how many documents the query read, once the
    answer is released (outside the private section, where nothing seals it)."""
    cell = _hosted_cell("DPRAGChain.invoke")
    worlds: list[World] = []

    def count() -> int:
        return len(worlds[-1].asks[-1].candidates[-1])

    def watched(world: World) -> None:
        _quiet(world)
        worlds.append(world)

    channel, emit = EMITTERS[how]
    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=_quiet))
    with patched_end_payload(monkeypatch, count, emit=emit):
        leaky = _channels(compare(cell, lab, tmp_path / "leaky", request, tamper=watched))
    assert channel not in clean and channel in leaky


@pytest.mark.parametrize("entry", ["PrivateRAG.answer", "DPRAGChain.invoke"])
def test_a_public_error_from_a_frame_holding_documents_is_caught(
    entry: str, lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A failure with one fixed message, raised from a frame whose locals hold the documents:
    sealed, the same in both worlds; let out by the data owner's debug switch, the outcome
    is still the same in both worlds, the frames (and, LangChain, a callback's) are not."""
    cell = _hosted_cell(entry)

    def failing(world: World) -> None:
        use_mechanism(world, RaisingWithDocuments(k=8))

    clean = _channels(compare(cell, lab, tmp_path / "clean", request, tamper=failing))
    with reveal_private_errors():
        leaky = _channels(compare(cell, lab, tmp_path / "leaky", request, tamper=failing))
    assert "ask 1: frames" not in clean and "ask 1: frames" in leaky
    assert "ask 1: outcome" not in leaky  # the frames alone tell the worlds apart


def test_an_embedding_request_per_document_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism embedding each document it read with the store's embedding model."""
    clean, leaky = _controlled(
        _hosted_cell("DPRAGChain.invoke"), lab, tmp_path, request, base=_quiet,
        leak=lambda w: use_mechanism(w, DocEmbedding(w.store.embeddings, k=8)),
    )  # fmt: skip
    assert "embedding requests" not in clean and "embedding requests" in leaky


def test_a_model_request_per_document_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism asking its model endpoint once per document it read (what a fallback that
    re-sends each prompt alone does): the provider's request schedule shows it."""
    clean, leaky = _controlled(
        _hosted_cell("DPQueryEngine.query"), lab, tmp_path, request, base=_quiet,
        leak=lambda w: use_mechanism(w, PerDocGeneration(w.engine.text, k=8)),
    )  # fmt: skip
    assert "model endpoint requests" not in clean and "model endpoint requests" in leaky


def test_tokenizing_a_whole_document_is_caught(
    lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A mechanism tokenizing each document whole: x of 20 000 words is work past the bound
    (and one more tokenizer call)."""
    cell = cell_of("PrivateRAG.answer", "NonRAG", "core-list", "huge", engine="eager")
    clean, leaky = _controlled(
        cell, lab, tmp_path, request, base=_quiet,
        leak=lambda w: use_mechanism(w, DocTokenizing(w.engine.token, k=8)),
    )  # fmt: skip
    assert "ask 1: work past the bound" not in clean and "ask 1: work past the bound" in leaky


def _retrying(world: World) -> None:
    """The served model's endpoint retrying every request (its own policy, on by default for
    a timeout), whatever its caller asks."""
    endpoint = world.engine.text.endpoint
    complete = endpoint.complete
    endpoint.complete = lambda prompts, *, max_tokens, retry=True: complete(
        prompts, max_tokens=max_tokens
    )


@pytest.mark.parametrize(
    ("mechanism", "engine"), [("DPKSA", "server"), ("DPSparseVote", "scripted-server")]
)
def test_a_served_prompt_retried_after_it_timed_out_is_caught(
    mechanism: str, engine: str, lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A served model whose per-prompt requests (DP-KSA's texts, a token session's rows)
    are retried: x's prompt times out, and is sent twice more, in D + x only (the scripted
    server: the voters release the same in both worlds, so the schedules are compared)."""
    cell = cell_of("PrivateRAG.answer", mechanism, "core-list", "timeout", engine=engine)
    clean, leaky = _controlled(cell, lab, tmp_path, request, leak=_retrying)
    assert "model endpoint requests" not in clean and "model endpoint requests" in leaky


def _one_request_per_decision(world: World) -> None:
    """The served model's token sessions sending every row of a decision in one request,
    whose failure fails the query (no row abstains)."""
    model = world.engine.text

    def each_row(rows: Any, max_tokens: int, read: Any) -> list[Any]:
        return [read(done) for done in model.endpoint.complete(rows, max_tokens=max_tokens)]

    model.each_row = each_row


@pytest.mark.parametrize("neighbour", ["refused", "timeout"])
def test_a_session_whose_refused_row_fails_the_query_is_caught(
    neighbour: str, lab: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A token session sending every row in one request: the server refuses (or times out
    on) x's row, the request fails, and the query with it, in D + x only."""
    cell = cell_of("PrivateRAG.answer", "DPSparseVote", "core-list", neighbour, engine="server")
    clean, leaky = _controlled(cell, lab, tmp_path, request, leak=_one_request_per_decision)
    assert "ask 1: outcome" not in clean and "ask 1: outcome" in leaky
