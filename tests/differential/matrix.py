"""The differential matrix: entry points x mechanisms x engines x stores x neighbours (x kinds).

Every dimension is one table below; a **cell** picks one row of each, and the
cells that go together (:func:`valid`) form the full matrix (:func:`full_matrix`,
run with ``DPRAG_DIFFERENTIAL=full``). Every commit runs a diagonal through it
(:func:`diagonal`): every row of every table at least once, plus :data:`PINNED`,
the cells that reproduce issue 36's cases. docs/architecture.md, "Testing: the
differential harness", says what is compared.

Adding to the matrix is one row:

- a mechanism: a :class:`MechanismRow` in :data:`MECHANISMS` (its name, what it
  needs from an engine: ``token``, ``logprob`` or ``text``, and how to build it
  from a :class:`Context`: the world's engine, budgets and the store's score
  scale; ``ledger=`` if it charges a per-unit ledger). An answer-level
  mechanism that needs a text model is a ``text`` row;
- an engine: an :class:`EngineRow` in :data:`ENGINES` (a fresh ``worlds.Engine``
  per world over shared weights or a fresh server double);
- a store or a retrieval path: a :class:`StoreRow` in :data:`STORES` (a builder
  over a world's ``Corpus``; the entry point's options; ``retriever=`` for a
  retriever of the store's; ``refuses=`` the x kinds it cannot hold). A
  partitioned search over a store is a ``StoreRow`` whose builder returns it;
- an x kind: a :class:`Neighbour` in :data:`NEIGHBOURS`;
- an entry point: an :class:`EntryPoint` in :data:`ENTRY_POINTS` and its runner
  in tests/differential/entry_points.py (``RUNNERS``).

The diagonal then covers the new row by itself. Differences the current code
still shows are listed once, in :data:`KNOWN`: a predicate over cells, the
issue case and what differs. Those cells are ``xfail(strict=True)``: when the
fix lands they pass, the strict marker fails, and the entry is removed.

>>> len({c.neighbour.name for c in diagonal()}) == len(NEIGHBOURS)
True
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from leaky import IdsInDetails
from worlds import Budgets, Corpus, Engine, Lab, near

from dprag_core.algorithms import (
    DPICL,
    DPKSA,
    KSA,
    RAG,
    AnswerVote,
    DPAnswerVote,
    DPSparseVote,
    DPVote,
    MuRAG,
    MuRAGAda,
    NaiveMulti,
    NonRAG,
    VoteRAG,
)

__all__ = [
    "ENGINES",
    "ENTRY_POINTS",
    "KNOWN",
    "MECHANISMS",
    "NEIGHBOURS",
    "STORES",
    "Cell",
    "cell_of",
    "diagonal",
    "full_matrix",
    "selected",
]

# -- mechanisms --------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a mechanism row builds on in one world: the engine, budgets, the store's scale."""

    engine: Engine
    budgets: Budgets
    score: Callable[[float], float]  # a cosine in the entry point's score units
    score_range: tuple[float, float]


@dataclass(frozen=True)
class MechanismRow:
    """A mechanism: what it needs (``token``, ``logprob``, ``text``; or a selection step,
    ``threshold`` / ``ledger``) and how to build it in a world.

    Settings are chosen so that most releases are the same in D and D + x (the
    padded voters carry the vote at a large ε; the noise carries it at a small
    one), so the observables that follow the release are compared too.
    """

    name: str
    needs: str
    build: Callable[[Context], Any]
    ledger: str = ""  # charges a per-unit ledger: "public" rows (each unit on its own
    # score) or rows "derived" from the release (MuRAG-Ada's DP bin walk)


VOTE: dict[str, Any] = {"m": 8, "k": 1, "max_new_tokens": 8}
LARGE: dict[str, Any] = {"epsilon": 800.0, "delta": 1e-4, "epsilon_token": 40.0}
PURE: dict[str, Any] = {"epsilon": 40.0, "delta": 0.0, "epsilon_token": 4.0,
                        "selection": "exponential"}  # fmt: skip
WORD: dict[str, Any] = {"unit": "word", "max_word_tokens": 4}
KSA_SMALL: dict[str, Any] = {"n_docs": 8, "response_tokens": 8, "answer_tokens": 6}
TAU = 0.9
"""MuRAG's public relevance threshold (a cosine): above every base record, below x."""


def _even_length(question: str, text: str) -> bool:
    """A public record filter that keeps about half the records (a voter of the others
    abstains, its prompt sent without context)."""
    return len(text) % 2 == 0


def _pure(ctx: Context) -> DPSparseVote:
    return DPSparseVote(ctx.engine.token, **VOTE, **PURE)


def _murag(ctx: Context) -> MuRAG:
    return MuRAG(_pure(ctx), ledger=ctx.budgets.ledger(400.0), tau=ctx.score(TAU),
                 epsilon_query=40.0, score_bounds=ctx.score_range)  # fmt: skip


def _murag_ada(ctx: Context) -> MuRAGAda:
    bins = [ctx.score(c) for c in (1.0, TAU, 0.5, 0.0)]
    return MuRAGAda(
        _pure(ctx),
        ledger=ctx.budgets.ledger(400.0),
        bins=bins,
        epsilon_threshold=1.0,
        epsilon_rag=40.0,
        score_bounds=ctx.score_range,
    )


MECHANISMS: list[MechanismRow] = [
    MechanismRow("DPVote", "token", lambda c: DPVote(c.engine.token, **VOTE, **LARGE)),
    MechanismRow("DPVote-word", "token",
                 lambda c: DPVote(c.engine.token, **VOTE, **LARGE, **WORD)),
    MechanismRow("DPSparseVote", "token", lambda c: DPSparseVote(c.engine.token, **VOTE, **LARGE)),
    MechanismRow("DPSparseVote-word", "token",
                 lambda c: DPSparseVote(c.engine.token, **VOTE, **LARGE, **WORD)),
    MechanismRow("DPSparseVote-exponential", "token", _pure),
    MechanismRow("DPICL", "logprob",
                 lambda c: DPICL(c.engine.token, epsilon=1.0, delta=1e-6, max_new_tokens=3,
                                 bounds=c.score_range)),
    MechanismRow("DPKSA", "text",
                 lambda c: DPKSA(c.engine.text, epsilon=1.0, delta=1e-4, **KSA_SMALL)),
    MechanismRow("DPAnswerVote", "text",
                 lambda c: DPAnswerVote(c.engine.text, **VOTE, epsilon=800.0, delta=1e-4)),
    MechanismRow("DPAnswerVote-filtered", "text",
                 lambda c: DPAnswerVote(c.engine.text, **VOTE, epsilon=800.0, delta=1e-4,
                                        record_filter=_even_length)),
    MechanismRow("AnswerVote", "text", lambda c: AnswerVote(c.engine.text, **VOTE)),
    MechanismRow("MuRAG", "token", _murag, ledger="public"),
    MechanismRow("MuRAGAda", "token", _murag_ada, ledger="derived"),
    MechanismRow("NaiveMulti", "token",
                 lambda c: NaiveMulti(_pure(c), accountant=c.budgets.accountant())),
    MechanismRow("VoteRAG", "token", lambda c: VoteRAG(c.engine.token, **VOTE)),
    MechanismRow("RAG", "text", lambda c: RAG(c.engine.text, k=3, max_new_tokens=6)),
    MechanismRow("NonRAG", "token", lambda c: NonRAG(c.engine.token, max_new_tokens=6)),
    MechanismRow("KSA", "text", lambda c: KSA(c.engine.text, **KSA_SMALL)),
    # a mechanism breaking the release half of its contract (document ids in its details)
    MechanismRow("IdsInDetails", "text", lambda c: IdsInDetails(k=8)),
    # the selection steps of DPRetriever and the node postprocessors: their options
    MechanismRow("DPThreshold", "threshold",
                 lambda c: {"epsilon": 1.0, "k": 3, "accountant": c.budgets.accountant()}),
    MechanismRow("LedgerFilter", "ledger",
                 lambda c: {"ledger": c.budgets.ledger(10.0), "tau": c.score(TAU),
                            "epsilon_query": 1.0, "k": 3}, ledger="public"),
]  # fmt: skip

# -- engines -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineRow:
    """A model engine: what it gives (``token``, ``logprob``, ``text``) and how to build it
    fresh in a world (``framework``: the entry point's, for hosted text APIs)."""

    name: str
    gives: frozenset[str]
    build: Callable[[Lab, str], Engine]


IN_PROCESS = frozenset({"token", "logprob", "text"})
SERVED = frozenset({"token", "text"})

ENGINES: list[EngineRow] = [
    EngineRow("eager", IN_PROCESS, lambda lab, fw: lab.hf("llama", "eager")),
    # the tiny Llama with a tokenizer whose model_max_length is set (transformers then warns
    # on a longer text)
    EngineRow("eager-capped", IN_PROCESS, lambda lab, fw: lab.hf("llama", "eager", capped=True)),
    EngineRow("static", IN_PROCESS, lambda lab, fw: lab.hf("llama", "static")),
    EngineRow("reader", IN_PROCESS, lambda lab, fw: lab.hf("reader", "eager")),
    EngineRow("server", SERVED, lambda lab, fw: lab.server("model", lookahead_tokens=1)),
    EngineRow("scripted-server", SERVED,
              lambda lab, fw: lab.server("scripted", lookahead_tokens=1)),
    EngineRow("hosted", frozenset({"text"}), lambda lab, fw: lab.hosted(fw)),
]  # fmt: skip

# -- stores ------------------------------------------------------------------------------


def _cosine(c: float) -> float:
    return c


@dataclass(frozen=True)
class StoreRow:
    """A store (or retriever) of one framework, built over a world's corpus.

    ``options``: what the entry point is given besides it; ``score``: a cosine
    in the entry point's score units (LlamaIndex distance stores: negated
    distances) and ``score_range`` their public range; ``corpus``: the base
    corpus x is added to when not the neighbour's own (``large``: enough records
    for an approximate search to show; ``threshold``: near and far records, where
    scores read the wrong way round change the charges);
    ``retriever``: the store's own retriever the entry point gets instead;
    ``refuses``: the x kinds it cannot store (a lone surrogate is not UTF-8;
    PostgreSQL text holds no NUL): no such neighbour exists there;
    ``may_be_refused``: a configuration an entry point may rightly refuse when
    built (then the refusal is the observation, the same in both worlds);
    elsewhere a refusal fails the cell.
    """

    name: str
    framework: str
    build: Callable[[Corpus, str | None], Any]
    options: dict[str, Any] = field(default_factory=dict)
    score: Callable[[float], float] = _cosine
    score_range: tuple[float, float] = (-1.0, 1.0)
    postgres: bool = False
    corpus: str = "small"
    retriever: Callable[[Any], Any] | None = None
    refuses: frozenset[str] = frozenset()  # x kinds the store refuses to hold
    may_be_refused: bool = False  # the entry point may refuse it when built (alike in D, D+x)


def _stores() -> list[StoreRow]:
    from worlds import (
        PARTITION,
        core_faiss,
        core_faiss_cells,
        core_list,
        lc_chroma_hnsw,
        lc_faiss_cells,
        lc_faiss_dprag,
        lc_kind,
        lc_pgvector_v2,
        li_kind,
        li_simple_cells,
    )

    from langchain_dprag import COSINE

    distance = {"score_direction": "distance"}
    no_surrogate = frozenset({"surrogate-id"})
    no_vector = frozenset({"zero-vector"})  # FaissCorpus refuses a zero vector when added
    postgres = frozenset({"surrogate-id", "nul-id"})
    return [
        StoreRow("core-list", "core", lambda c, pg: core_list(c)),
        StoreRow("core-faiss", "core", lambda c, pg: core_faiss(c), refuses=no_vector),
        # the partitioned search: exact in the cells the question probes (a public partition)
        StoreRow("core-faiss-cells", "core", lambda c, pg: core_faiss_cells(c),
                 refuses=no_vector),
        StoreRow("lc-faiss-cells", "langchain", lambda c, pg: lc_faiss_cells(c),
                 options={"partition": PARTITION}, refuses=frozenset({"raising", *no_vector})),
        StoreRow("li-simple-cells", "llamaindex", lambda c, pg: li_simple_cells(c),
                 options={"partition": PARTITION}, refuses=frozenset({"raising"})),
        StoreRow("lc-inmemory", "langchain", lc_kind("inmemory")),
        StoreRow("lc-faiss", "langchain", lambda c, pg: lc_faiss_dprag(c)),
        StoreRow("lc-chroma", "langchain", lc_kind("chroma_cosine"), refuses=no_surrogate),
        StoreRow("lc-qdrant", "langchain", lc_kind("qdrant_cosine")),
        StoreRow("lc-lancedb", "langchain", lc_kind("lancedb_l2"), refuses=no_surrogate),
        StoreRow("lc-milvus", "langchain", lc_kind("milvus_cosine"), refuses=no_surrogate),
        StoreRow("lc-pgvector", "langchain", lc_kind("pgvector_cosine"), postgres=True,
                 refuses=postgres),
        # langchain-postgres's PGVectorStore v2, read with its own distance strategy; and
        # with the built-in COSINE given (the fix an older refusal suggested): refused with
        # the right fix, or read right
        StoreRow("lc-pgvector-v2", "langchain", lambda c, pg: lc_pgvector_v2(c, pg or ""),
                 postgres=True, corpus="threshold", refuses=postgres),
        StoreRow("lc-pgvector-v2-cosine", "langchain",
                 lambda c, pg: lc_pgvector_v2(c, pg or ""),
                 options={"score_function": COSINE, "exact_search": True}, postgres=True,
                 corpus="threshold", refuses=postgres, may_be_refused=True),
        # a filtered retriever declared k-honouring over a weak HNSW graph: dprag searches the
        # store itself, exactly, with the retriever's filter
        StoreRow("lc-chroma-filtered", "langchain", lambda c, pg: lc_chroma_hnsw(c),
                 options={"retriever_honours_k": True}, corpus="large", refuses=no_surrogate,
                 retriever=lambda s: s.as_retriever(search_kwargs={"filter": {"group": "even"}})),
        StoreRow("li-simple", "llamaindex", li_kind("simple")),
        StoreRow("li-faiss", "llamaindex", li_kind("faiss_cosine")),
        StoreRow("li-chroma", "llamaindex", li_kind("chroma_cosine"), options=distance,
                 score=lambda c: c - 1.0, score_range=(-2.0, 0.0), refuses=no_surrogate),
        StoreRow("li-qdrant", "llamaindex", li_kind("qdrant_cosine")),
        StoreRow("li-milvus", "llamaindex", li_kind("milvus_cosine"), refuses=no_surrogate),
        StoreRow("li-lancedb", "llamaindex", li_kind("lancedb_l2"), options=distance,
                 score=lambda c: 2.0 * c - 2.0, score_range=(-4.0, 0.0), refuses=no_surrogate),
        StoreRow("li-pgvector", "llamaindex", li_kind("pgvector"), postgres=True,
                 refuses=postgres),
    ]  # fmt: skip


STORES: list[StoreRow] = _stores()

# -- neighbours (x kinds) ---------------------------------------------------------------


@dataclass(frozen=True)
class Neighbour:
    """An adversarial x: the record D + x adds, the base corpus it is added to.

    ``first``: D + x is built in another insertion order (x first, the base
    reversed); ``raising``: references whose retrieval makes the source raise
    (x an error of dprag's own public class, ``r`` in D a plain one: both worlds
    fail, and must fail alike); ``ledger_raising``: units whose charge makes the
    per-unit ledger raise, alike; ``endpoint``: how the world's endpoints fail on an input
    holding ``worlds.MARKER`` (x's text holds it): ``refuse`` (the model endpoint's content
    filter), ``timeout`` (the model endpoint times out), ``embedding`` (the embedding
    endpoint raises); ``framework``: the x needs a framework store (metadata, embeddings).
    """

    name: str
    x: Callable[[], Any]
    base: str = "small"
    first: bool = False
    extra: Callable[[], list[Any]] = lambda: []
    raising: bool = False
    ledger_raising: bool = False
    endpoint: str = ""
    framework: bool = False


def _row(ref: str, text: str, vector: tuple[float, ...], **metadata: Any) -> Any:
    from store_cases import Row

    return Row(ref, text, vector, tuple(metadata.items()))


def _q() -> tuple[float, ...]:
    from store_cases import query_vector

    return tuple(float(v) for v in query_vector())


LONG_X = "Bob Durand takes salbutamol every morning for his asthma. " * 70
"""About 4 000 tokens (the tiny models' tokenizer), far over every public prompt width."""


HUGE_X = "Bob Durand takes salbutamol every morning for his asthma. " * 2000
"""20 000 words (about 118 000 bytes): work that grows with it shows (host.py)."""

FLAGGED_X = "Bob Durand takes salbutamol ({marker})."
"""x's text where an endpoint fails on it (``worlds.MARKER`` in it)."""

COLLIDING = {"unit_key": "r1", "id": "r1", "score": 99.0, "_id": "r1", "doc_id": "r1"}
"""x's metadata: dprag's own keys and the stores' (``_id``, ``doc_id``), naming record r1."""


def _flagged(ref: str) -> Any:
    from worlds import MARKER

    return _row(ref, FLAGGED_X.format(marker=MARKER), near(0.95))


def _tied() -> Any:
    from worlds import BASES, base_rng

    return _row("x-tied", "Bob Durand takes salbutamol, record x-tied.",
                BASES["tied"](base_rng())[3].vector)  # fmt: skip


NEIGHBOURS: list[Neighbour] = [
    Neighbour("nearest", lambda: _row("x", "Bob Durand takes salbutamol.", _q())),
    Neighbour("longest", lambda: _row("x-long", LONG_X, near(0.95))),
    Neighbour("unicode-id",
              lambda: _row("x-ünï-🩺\u200f\u0301", "Zoë Ångström takes salbutamol 🩺.",
                           near(0.95))),
    Neighbour("surrogate-id",
              lambda: _row("x-\ud800", "Bob takes salbutamol \udc00.", near(0.95))),
    Neighbour("nul-id", lambda: _row("x\x00nul", "Bob takes salbutamol\x00.", near(0.95))),
    Neighbour("long-id", lambda: _row("x" * 2000, "Bob Durand takes salbutamol.", near(0.95))),
    Neighbour("tied", _tied, base="tied", first=True),
    Neighbour("raising", lambda: _row("x-raise", "Bob Durand takes salbutamol.", near(0.97)),
              extra=lambda: [_row("r-raise", "Carol Weiss takes insulin.", near(0.75, seed=5))],
              raising=True),
    Neighbour("ledger-raising",
              lambda: _row("x-ledger", "Bob Durand takes salbutamol.", near(0.97)),
              extra=lambda: [_row("r-ledger", "Carol Weiss takes insulin.", near(0.95, seed=5))],
              ledger_raising=True),
    Neighbour("short", lambda: _row("x-short", "Bob takes salbutamol.", near(0.85)),
              base="long"),
    Neighbour("refused", lambda: _flagged("x-refused"), endpoint="refuse"),
    Neighbour("timeout", lambda: _flagged("x-timeout"), endpoint="timeout"),
    Neighbour("embedding-raising", lambda: _flagged("x-embed"), endpoint="embedding",
              framework=True),
    Neighbour("colliding-metadata",
              lambda: _row("x-meta", "Bob Durand takes salbutamol.", near(0.95), **COLLIDING),
              framework=True),
    Neighbour("huge", lambda: _row("x-huge", HUGE_X, near(0.95))),
    Neighbour("zero-vector", lambda: _row("x-zero", "Bob Durand takes salbutamol.",
                                          (0.0,) * len(near(0.5)))),
]  # fmt: skip

# -- entry points ------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryPoint:
    """A public entry point: its framework, the mechanism kinds it takes, its runner name
    (a function of tests/differential/entry_points.py)."""

    name: str
    framework: str
    accepts: frozenset[str]
    runner: str
    events: bool = True  # False: its framework's events (and the frames of an exception
    # raised in it: the caller's own hold every node) carry the caller's own documents


GENERATORS = frozenset({"token", "logprob", "text"})

ENTRY_POINTS: list[EntryPoint] = [
    EntryPoint("PrivateRAG.answer", "core", GENERATORS, "core_answer"),
    EntryPoint("PrivateRAG.stream", "core", GENERATORS, "core_stream"),
    EntryPoint("DPRAGChain.invoke", "langchain", GENERATORS, "chain_invoke"),
    EntryPoint("DPRAGChain.astream_events", "langchain", GENERATORS, "chain_events"),
    EntryPoint("DPRetriever", "langchain", frozenset({"threshold", "ledger"}), "dp_retriever"),
    EntryPoint("DPQueryEngine.query", "llamaindex", GENERATORS, "engine_query"),
    EntryPoint("DPQueryEngine.stream", "llamaindex", GENERATORS, "engine_stream"),
    EntryPoint("DPThresholdPostprocessor", "llamaindex", frozenset({"threshold"}),
               "threshold_postprocessor", events=False),
    EntryPoint("PrivacyBudgetPostprocessor", "llamaindex", frozenset({"ledger"}),
               "budget_postprocessor", events=False),
]  # fmt: skip

# -- cells -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One entry point, mechanism, engine (None for a selection step), store and x."""

    entry: EntryPoint
    mechanism: MechanismRow
    engine: EngineRow | None
    store: StoreRow
    neighbour: Neighbour

    @property
    def id(self) -> str:
        engine = self.engine.name if self.engine else "-"
        return "|".join(
            (self.entry.name, self.mechanism.name, engine, self.store.name, self.neighbour.name)
        )


def valid(cell: Cell) -> bool:
    """Whether the rows go together (a cell of the full matrix)."""
    entry, mech, engine, store, x = (
        cell.entry, cell.mechanism, cell.engine, cell.store, cell.neighbour,
    )  # fmt: skip
    if store.framework != entry.framework or mech.needs not in entry.accepts:
        return False
    generator = mech.needs in GENERATORS
    if generator != (engine is not None):
        return False
    if engine is not None and mech.needs not in engine.gives:
        return False
    if store.retriever is not None and not generator:
        return False  # DPRetriever and the postprocessors take no retriever of the store's
    if x.raising and (not generator or store.retriever is not None or store.corpus != "small"):
        return False  # the source is wrapped: a generator's own retrieval only, and D's
        # raising record must be read (the small base: every record is)
    if x.ledger_raising and not mech.ledger:
        return False
    if x.endpoint in ("refuse", "timeout") and (engine is None or "logprob" in engine.gives):
        return False  # a model endpoint's failure: served and hosted engines only
    if x.framework and store.framework == "core":
        return False  # metadata and embeddings are a framework store's
    if x.name in store.refuses:
        return False
    return not (store.corpus != "small" and x.base != "small")


@functools.cache
def full_matrix() -> tuple[Cell, ...]:
    """Every valid cell, in table order."""
    return tuple(
        cell
        for entry in ENTRY_POINTS
        for store in STORES
        if store.framework == entry.framework
        for mech in MECHANISMS
        if mech.needs in entry.accepts
        for engine in [None, *ENGINES]
        for x in NEIGHBOURS
        if valid(cell := Cell(entry, mech, engine, store, x))
    )


def _named(table: Sequence[Any], name: str) -> Any:
    (found,) = [row for row in table if row.name == name]
    return found


def cell_of(
    entry: str, mechanism: str, store: str, neighbour: str, engine: str | None = None
) -> Cell:
    """The cell of these rows (by name); a ValueError if they do not go together."""
    cell = Cell(
        _named(ENTRY_POINTS, entry), _named(MECHANISMS, mechanism),
        None if engine is None else _named(ENGINES, engine), _named(STORES, store),
        _named(NEIGHBOURS, neighbour),
    )  # fmt: skip
    if not valid(cell):
        raise ValueError(f"the rows of {cell.id} do not go together")
    return cell


PINNED: list[dict[str, str]] = [
    # case 1: a reused query id tells whether x is above tau (every path)
    {"entry": "PrivateRAG.answer", "mechanism": "MuRAG", "engine": "eager",
     "store": "core-faiss", "neighbour": "nearest"},
    {"entry": "DPRAGChain.invoke", "mechanism": "MuRAG", "engine": "scripted-server",
     "store": "lc-inmemory", "neighbour": "nearest"},
    {"entry": "DPQueryEngine.query", "mechanism": "MuRAG", "engine": "static",
     "store": "li-simple", "neighbour": "unicode-id"},
    {"entry": "PrivacyBudgetPostprocessor", "mechanism": "LedgerFilter", "store": "li-faiss",
     "neighbour": "nearest"},
    # case 2: a server's context limit
    {"entry": "PrivateRAG.answer", "mechanism": "DPSparseVote", "engine": "server",
     "store": "core-list", "neighbour": "longest"},
    # case 3: eager rows with every voter at the public width
    {"entry": "PrivateRAG.answer", "mechanism": "DPVote", "engine": "eager",
     "store": "core-list", "neighbour": "short"},
    # case 4: word units over a server
    {"entry": "PrivateRAG.stream", "mechanism": "DPSparseVote-word",
     "engine": "scripted-server", "store": "core-list", "neighbour": "nearest"},
    # case 5: a source raising dprag's own public error class
    {"entry": "DPRAGChain.invoke", "mechanism": "DPSparseVote", "engine": "eager",
     "store": "lc-inmemory", "neighbour": "raising"},
    # case 6: a mechanism's details reach the output unchecked
    {"entry": "DPQueryEngine.query", "mechanism": "IdsInDetails", "engine": "hosted",
     "store": "li-qdrant", "neighbour": "nearest"},
    # case 7: float32 scores and ties, PGVectorStore v2, a filtered approximate retriever
    {"entry": "DPRAGChain.invoke", "mechanism": "DPVote", "engine": "eager",
     "store": "lc-faiss", "neighbour": "tied"},
    {"entry": "DPRAGChain.invoke", "mechanism": "MuRAG", "engine": "eager",
     "store": "lc-pgvector-v2", "neighbour": "nearest"},
    {"entry": "DPRAGChain.invoke", "mechanism": "MuRAG", "engine": "eager",
     "store": "lc-pgvector-v2-cosine", "neighbour": "nearest"},
    {"entry": "DPRAGChain.invoke", "mechanism": "VoteRAG", "engine": "eager",
     "store": "lc-chroma-filtered", "neighbour": "nearest"},
    # the answer-level mechanism and the partitioned search, through every framework
    {"entry": "PrivateRAG.answer", "mechanism": "DPAnswerVote", "engine": "server",
     "store": "core-faiss-cells", "neighbour": "longest"},
    {"entry": "DPRAGChain.invoke", "mechanism": "DPAnswerVote", "engine": "hosted",
     "store": "lc-faiss-cells", "neighbour": "nearest"},
    {"entry": "DPQueryEngine.query", "mechanism": "DPAnswerVote", "engine": "hosted",
     "store": "li-simple-cells", "neighbour": "nearest"},
    {"entry": "DPRetriever", "mechanism": "LedgerFilter", "store": "lc-faiss-cells",
     "neighbour": "nearest"},
    {"entry": "DPThresholdPostprocessor", "mechanism": "DPThreshold", "store": "li-simple-cells",
     "neighbour": "unicode-id"},
    # case 5 through the ledger-filter selection steps, ties in FaissCorpus's cells
    {"entry": "DPRetriever", "mechanism": "LedgerFilter", "store": "lc-inmemory",
     "neighbour": "ledger-raising"},
    {"entry": "PrivacyBudgetPostprocessor", "mechanism": "LedgerFilter", "store": "li-simple",
     "neighbour": "ledger-raising"},
    {"entry": "PrivateRAG.answer", "mechanism": "VoteRAG", "engine": "eager",
     "store": "core-faiss-cells", "neighbour": "tied"},
    # a placeholder record grows the search, LangChain shows one more retriever run
    {"entry": "DPRAGChain.astream_events", "mechanism": "RAG", "engine": "hosted",
     "store": "lc-inmemory", "neighbour": "long-id"},
    # issue 40 case 1: an endpoint refusing (or timing out on) x's prompt
    {"entry": "PrivateRAG.answer", "mechanism": "DPKSA", "engine": "hosted",
     "store": "core-list", "neighbour": "refused"},
    {"entry": "DPRAGChain.invoke", "mechanism": "DPKSA", "engine": "server",
     "store": "lc-inmemory", "neighbour": "timeout"},
    {"entry": "DPQueryEngine.query", "mechanism": "DPAnswerVote", "engine": "hosted",
     "store": "li-simple", "neighbour": "refused"},
    # case 3: work that grows with a retrieved document's length
    {"entry": "PrivateRAG.answer", "mechanism": "DPAnswerVote-filtered", "engine": "hosted",
     "store": "core-list", "neighbour": "huge"},
    {"entry": "PrivateRAG.answer", "mechanism": "DPVote", "engine": "eager",
     "store": "core-list", "neighbour": "huge"},
    {"entry": "PrivateRAG.answer", "mechanism": "DPSparseVote", "engine": "server",
     "store": "core-list", "neighbour": "huge"},
    # case 4: transformers' length warning on stderr, numpy's warning on a zero vector
    {"entry": "PrivateRAG.answer", "mechanism": "DPKSA", "engine": "eager-capped",
     "store": "core-list", "neighbour": "huge"},
    {"entry": "DPQueryEngine.query", "mechanism": "RAG", "engine": "hosted",
     "store": "li-simple", "neighbour": "zero-vector"},
    # the embedding endpoint and dprag's own metadata keys, through each framework
    {"entry": "DPRAGChain.invoke", "mechanism": "RAG", "engine": "hosted",
     "store": "lc-inmemory", "neighbour": "embedding-raising"},
    {"entry": "DPQueryEngine.query", "mechanism": "DPSparseVote", "engine": "scripted-server",
     "store": "li-qdrant", "neighbour": "colliding-metadata"},
]  # fmt: skip


def diagonal() -> list[Cell]:
    """Every row of every table at least once (greedy cover of the full matrix), and PINNED.

    Deterministic: the full matrix in a fixed order, each cell taken when it
    covers a row not yet covered.
    """
    uncovered = {("entry", e.name) for e in ENTRY_POINTS}
    uncovered |= {("mechanism", m.name) for m in MECHANISMS}
    uncovered |= {("engine", e.name) for e in ENGINES}
    uncovered |= {("store", s.name) for s in STORES}
    uncovered |= {("neighbour", n.name) for n in NEIGHBOURS}
    chosen = [cell_of(**names) for names in PINNED]
    cells = full_matrix()
    order = sorted(range(len(cells)), key=lambda i: (i * 7919) % len(cells))
    for cell in chosen + [cells[i] for i in order if settled(cells[i])]:
        rows = {("entry", cell.entry.name), ("mechanism", cell.mechanism.name),
                ("store", cell.store.name), ("neighbour", cell.neighbour.name)}  # fmt: skip
        if cell.engine is not None:
            rows.add(("engine", cell.engine.name))
        if cell in chosen or rows & uncovered:
            if cell not in chosen:
                chosen.append(cell)
            uncovered -= rows
    assert not uncovered, uncovered
    return chosen


def selected() -> list[Cell]:
    """The cells this run tests: the diagonal, or everything with DPRAG_DIFFERENTIAL=full."""
    return list(full_matrix()) if os.environ.get("DPRAG_DIFFERENTIAL") == "full" else diagonal()


# -- known differences on the current code -------------------------------------------------


@dataclass(frozen=True)
class Known:
    """Cells where the harness finds a difference today: ``applies(cell)``, the case, why.

    ``settled(cell)`` is False where whether the difference shows depends on
    the data beyond the case (an approximate index may or may not find x): such
    cells are xfail without ``strict`` and stay out of the diagonal.
    """

    case: str
    what: str
    applies: Callable[[Cell], bool]
    settled: Callable[[Cell], bool] = lambda cell: True  # False: the cell may pass, by chance


KNOWN: list[Known] = []
"""None left: every cell passes strictly (a new entry names its issue case, what differs,
the cells it applies to)."""


def marks(cell: Cell) -> list[Any]:
    """The cell's xfail markers (:data:`KNOWN`): strict where the difference always shows.

    No marker depends on the CPU: rows are compared within
    ``observations.ROW_TOLERANCE`` and the prefill layouts exactly, on every CPU.
    """
    return [
        pytest.mark.xfail(strict=k.settled(cell), reason=f"{k.case}: {k.what}")
        for k in KNOWN
        if k.applies(cell)
    ]


def settled(cell: Cell) -> bool:
    """Whether the cell's outcome is known (no unsettled KNOWN entry applies)."""
    return all(k.settled(cell) for k in KNOWN if k.applies(cell))


def params(framework: str) -> list[Any]:
    """The selected cells of one framework as pytest params (id, marks)."""
    return [
        pytest.param(cell, id=cell.id, marks=marks(cell))
        for cell in selected()
        if cell.entry.framework == framework
    ]
