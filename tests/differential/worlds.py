"""The two worlds of a differential cell: corpora D and D + x, their stores, engines and budgets.

Everything here is built twice per cell, once per world, from the same public
inputs: the same base corpus (x added or not), fresh stores, a fresh model
session pool over the same weights, a fresh server double, fresh budgets in
the world's own folder, the same seed. What differs between the two worlds is
x alone.

Corpora use the rows of tests/stores/store_cases.py (a reference, a text, a
unit vector; the question ``"A"`` has the query vector ``q``), so every store
ranks them by the cosine with ``q``. The base corpus is small (4 records,
cosines 0.8 down to 0.5): with 8 voters of one record each, the padded voters
share one prompt and carry the vote whatever x's voter says, so most releases
are the same in both worlds and the observables that depend on the release
(events, requests) can be compared too.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from host import serving
from server_doubles import ContextLimited, ModelServer, ScriptedServer, served
from store_cases import DIM, QUESTION, Row, at_cosine, lc_store, li_index, query_vector

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.accounting.ledger import SQLiteLedger
from dprag_core.accounting.stores.errors import LedgerUnavailable
from dprag_core.budget import Budget
from dprag_core.models.base import stop_width
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.documents import ScoredDocument

__all__ = [
    "CONTEXT",
    "MARKER",
    "QUERY_ID",
    "QUESTION",
    "SCRIPTS",
    "SEED",
    "Budgets",
    "Corpus",
    "Fault",
    "Lab",
    "Watched",
]

QUERY_ID = "q-1"
"""The query id of a cell's question; asked twice, the second ask shows the id's reuse."""

SEED = 7
"""The seed of every world's noise: the same in D and D + x."""

CONTEXT = 512
"""The server double's context (tokens): a prompt of 512 tokens or more gets HTTP 400."""

SCRIPTS = {
    "salbutamol": " salbutamol",
    "aspirin": " aspirin twice a day",
    "": " aspirin twice a day",
}
"""The scripted server's rows: every voter of D and the public row agree (aspirin twice a
day); a voter holding x (salbutamol) says something else."""


MARKER = "zqx-flagged"
"""What x's text holds where an endpoint refuses it (x kinds ``refused``, ``timeout``,
``embedding-raising``): a model or embedding endpoint fails on any input that contains it."""


@dataclass
class Fault:
    """How a world's endpoints fail on an input holding :data:`MARKER`: ``refuse`` (a
    content filter: HTTP 400 ``content_filter``), ``timeout`` (the request times out) or
    ``embedding`` (the embedding endpoint raises); "" none. Armed by the cell's x kind."""

    mode: str = ""

    def hit(self, text: str, *modes: str) -> str:
        """The failure for ``text`` ("" none) if the mode is one of ``modes``."""
        return self.mode if self.mode in modes and MARKER in text else ""


# -- corpora --------------------------------------------------------------------------


def base_rng() -> np.random.Generator:
    """The generator every base corpus is drawn with (the same in both worlds)."""
    return np.random.default_rng(1)


def record(ref: str, cosine: float, rng: np.random.Generator, text: str | None = None) -> Row:
    """A base record: aspirin, unique text, at ``cosine`` with the question."""
    return Row(
        ref,
        text or f"Alice Martin takes aspirin, record {ref}.",
        at_cosine(query_vector(), cosine, rng),
    )


def small_base(rng: np.random.Generator) -> list[Row]:
    """Four records at cosines 0.8, 0.7, 0.6, 0.5."""
    return [record(f"r{i}", c, rng) for i, c in enumerate((0.8, 0.7, 0.6, 0.5), start=1)]


def tied_base(rng: np.random.Generator) -> list[Row]:
    """Thirteen records: five above 0.7, six sharing one vector (0.6), two below.

    Eight candidates (8 voters of one record) cut the tie group: 3 of its 6.
    """
    tied = at_cosine(query_vector(), 0.6, rng)
    rows = [record(f"r{i}", c, rng) for i, c in enumerate((0.9, 0.85, 0.8, 0.75, 0.7), start=1)]
    rows += [Row(f"t{i}", f"Alice Martin takes aspirin, record t{i}.", tied) for i in range(1, 7)]
    return [*rows, record("r12", 0.3, rng), record("r13", 0.2, rng)]


LONG_RECORD = "Alice Martin takes aspirin twice a day for her migraine. " * 40
"""A record longer than every model's public prompt width (about 500 tokens)."""


def long_base(rng: np.random.Generator) -> list[Row]:
    """Eight long records: every voter's prompt (8 voters of one record) fills the public width."""
    return [
        record(f"r{i}", c, rng, text=f"{LONG_RECORD}(record r{i})")
        for i, c in enumerate(np.linspace(0.8, 0.45, 8), start=1)
    ]


def large_base(rng: np.random.Generator) -> list[Row]:
    """300 random records: enough for an approximate index to show (store_cases.random_rows)."""
    from store_cases import random_rows

    return random_rows(n=300, seed=3)


def threshold_base(rng: np.random.Generator) -> list[Row]:
    """31 records near the question, 9 far from it (store_cases.threshold_rows, without x)."""
    from store_cases import threshold_rows

    return threshold_rows(with_new_unit=False)


BASES: dict[str, Callable[[np.random.Generator], list[Row]]] = {
    "small": small_base,
    "threshold": threshold_base,
    "tied": tied_base,
    "long": long_base,
    "large": large_base,
}


@dataclass(frozen=True)
class Corpus:
    """One world's rows, in insertion order, and x (the row D + x adds)."""

    rows: tuple[Row, ...]
    x: Row
    has_x: bool
    raising: tuple[str, ...] = ()  # refs whose retrieval makes the source raise
    ledger_raising: tuple[str, ...] = ()  # units whose charge makes the ledger raise

    @property
    def side(self) -> str:
        return "D+x" if self.has_x else "D"


# -- budgets --------------------------------------------------------------------------


RAISES: dict[str, Callable[[str], Exception]] = {
    "x": lambda text: LedgerUnavailable(f"the store cannot read {text}"),
    "r": lambda text: ValueError(f"the store cannot read {text}"),
}
"""What a raising record raises: x an error of dprag's own public class, r a plain one."""


def raising_error(ref: str, text: str) -> Exception:
    """The exception the source (or ledger) raises for record ``ref`` (x first, then r)."""
    return RAISES["x" if ref.startswith("x") else "r"](text)


class RaisingLedger(SQLiteLedger):
    """A SQLite ledger whose charge raises when it includes a unit of ``raising`` (x's first)."""

    raising: tuple[str, ...] = ()

    def charge(self, query_id: str, units: Any, cost: float, **options: Any) -> Any:
        units = list(units)
        for unit in sorted(set(units) & set(self.raising), key=lambda u: not u.startswith("x")):
            raise raising_error(unit, f"the ledger row of unit {unit}")
        return super().charge(query_id, units, cost, **options)


@dataclass
class Budgets:
    """A world's corpus budget and per-unit ledger: one SQLite file in the world's folder."""

    folder: Path
    raising: tuple[str, ...] = ()
    _ledger: SQLiteLedger | None = None
    _accountant: SQLiteCorpusAccountant | None = None

    @property
    def path(self) -> Path:
        return self.folder / "dprag.db"

    def accountant(self) -> SQLiteCorpusAccountant:
        if self._accountant is None:
            self._accountant = SQLiteCorpusAccountant(
                self.path, total=Budget(1e4, 0.5), create=True
            )
        return self._accountant

    def ledger(self, budget_per_unit: float) -> SQLiteLedger:
        if self._ledger is None:
            kind = RaisingLedger if self.raising else SQLiteLedger
            self._ledger = kind(self.path, budget_per_unit=budget_per_unit, create=True)
            if isinstance(self._ledger, RaisingLedger):
                self._ledger.raising = self.raising
        return self._ledger

    @property
    def has_ledger(self) -> bool:
        return self._ledger is not None

    @property
    def has_accountant(self) -> bool:
        return self._accountant is not None


# -- sources (stores) -------------------------------------------------------------------


def core_list(corpus: Corpus) -> Any:
    """An in-memory store: the exact cosine ranking (ties by reference), honouring k."""
    q = query_vector()
    ranked = sorted(corpus.rows, key=lambda r: (-float(np.asarray(r.vector) @ q), r.ref))
    docs = [ScoredDocument(r.ref, r.text, float(np.asarray(r.vector) @ q), r.ref) for r in ranked]
    return HonoursK(lambda question, k: docs[:k])


def core_faiss(corpus: Corpus) -> Any:
    """dprag's own FaissCorpus (flat inner product, native range search)."""
    from dprag_core.retrieval.faiss_corpus import FaissCorpus

    faiss_corpus = FaissCorpus(dim=DIM)
    rows = list(corpus.rows)
    faiss_corpus.add(
        [r.ref for r in rows], [r.text for r in rows], np.array([r.vector for r in rows]),
        units=[r.ref for r in rows],
    )  # fmt: skip
    return faiss_corpus.as_retriever(lambda question: query_vector())


PARTITION = PublicPartition.random(dim=DIM, cells=4, probes=2, seed=36)
"""The partitioned rows' public partition: 4 random directions (no data), 2 probed."""


def core_faiss_cells(corpus: Corpus) -> Any:
    """dprag's own FaissCorpus searched in the probed cells of :data:`PARTITION`."""
    from dprag_core.retrieval.faiss_corpus import FaissCorpus

    faiss_corpus = FaissCorpus(dim=DIM, partition=PARTITION)
    rows = list(corpus.rows)
    faiss_corpus.add(
        [r.ref for r in rows], [r.text for r in rows], np.array([r.vector for r in rows]),
        units=[r.ref for r in rows],
    )  # fmt: skip
    return faiss_corpus.as_retriever(lambda question: query_vector())


def lc_faiss_cells(corpus: Corpus) -> Any:
    """langchain_dprag's partitioned FAISS store (the partition's IndexIVFFlat) over the rows."""
    from langchain_core.documents import Document
    from store_cases import TableEmbeddings

    from langchain_dprag.cells import partitioned_faiss

    docs = [
        Document(page_content=r.text, metadata={**dict(r.metadata), "ref": r.ref}, id=r.ref)
        for r in corpus.rows
    ]
    refs = [r.ref for r in corpus.rows]  # the same ids in both worlds (ties are broken by id)
    return partitioned_faiss(docs, TableEmbeddings(list(corpus.rows)), PARTITION, ids=refs)


def li_simple_cells(corpus: Corpus) -> Any:
    """A LlamaIndex SimpleVectorStore index over nodes tagged with their cells."""
    from llama_index.core import VectorStoreIndex
    from store_cases import li_embedding, li_nodes

    from llamaindex_dprag.cells import tag_nodes

    nodes = tag_nodes(li_nodes(list(corpus.rows)), PARTITION)
    return VectorStoreIndex(nodes, embed_model=li_embedding())


def lc_faiss_dprag(corpus: Corpus) -> Any:
    """langchain_dprag's faiss_inner_product over the rows."""
    from langchain_core.documents import Document
    from store_cases import TableEmbeddings

    from langchain_dprag.vectorstores import faiss_inner_product

    docs = [
        Document(page_content=r.text, metadata={**dict(r.metadata), "ref": r.ref}, id=r.ref)
        for r in corpus.rows
    ]
    return faiss_inner_product(docs, TableEmbeddings(list(corpus.rows)))


def lc_pgvector_v2(corpus: Corpus, pg_url: str) -> Any:
    """langchain-postgres's current PGVectorStore (v2), cosine distance."""
    import uuid

    from langchain_core.documents import Document
    from langchain_postgres import PGEngine, PGVectorStore
    from store_cases import TableEmbeddings

    engine = PGEngine.from_connection_string(url=pg_url)
    table = f"v2_{uuid.uuid4().hex[:12]}"
    engine.init_vectorstore_table(table_name=table, vector_size=DIM)
    store = PGVectorStore.create_sync(
        engine=engine, table_name=table, embedding_service=TableEmbeddings(list(corpus.rows))
    )
    docs = [
        Document(page_content=r.text, metadata={**dict(r.metadata), "ref": r.ref})
        for r in corpus.rows
    ]
    store.add_documents(docs, ids=[str(uuid.uuid4()) for _ in docs])
    return store


def lc_chroma_hnsw(corpus: Corpus) -> Any:
    """Chroma with a weak HNSW graph (what its own filtered search runs on)."""
    return lc_store("chroma_cosine", list(corpus.rows), ef_search=1, ef_construction=2,
                    max_neighbors=2)  # fmt: skip


# -- the raising source wrappers ---------------------------------------------------------


def _raise_for(refs: Sequence[str], raising: Sequence[str], texts: dict[str, str]) -> None:
    found = [r for r in refs if r in raising]
    for ref in sorted(found, key=lambda r: not r.startswith("x")):
        raise raising_error(ref, texts[ref])


def raising_core(source: Any, corpus: Corpus) -> Any:
    """``source`` whose results raise when they hold a raising record (core retrievers)."""
    texts = {r.ref: r.text for r in corpus.rows}

    def search(question: str, k: int) -> list[ScoredDocument]:
        docs = list(source(question, k))
        _raise_for([d.unit for d in docs], corpus.raising, texts)
        return docs

    return HonoursK(search)


def raising_lc(store: Any, corpus: Corpus, **options: Any) -> Any:
    """A user's LangChain retriever over ``store`` that raises on a raising record
    (``options``: how to read the store, ``open_store``'s)."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from langchain_dprag.vectorstores import open_store

    texts = {r.ref: r.text for r in corpus.rows}
    search = open_store(store, **options).searcher()  # the store's exact ranking, cosines

    class RaisingRetriever(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
        ) -> list[Document]:
            pairs = search(query, k)
            _raise_for([d.metadata["ref"] for d, _ in pairs], corpus.raising, texts)
            return [Document(page_content=d.page_content, id=d.id,
                             metadata={**d.metadata, "score": s})
                    for d, s in pairs]  # fmt: skip

    return RaisingRetriever()


def raising_li(index: Any, corpus: Corpus) -> Any:
    """A user's LlamaIndex retriever over ``index`` (its whole ranking) raising on a record."""
    from llama_index.core.retrievers import BaseRetriever

    texts = {r.ref: r.text for r in corpus.rows}
    inner = index.as_retriever(similarity_top_k=len(corpus.rows))

    class RaisingRetriever(BaseRetriever):
        def _retrieve(self, query_bundle: Any) -> list[Any]:
            nodes = inner.retrieve(query_bundle)
            _raise_for([n.node.metadata["ref"] for n in nodes], corpus.raising, texts)
            return list(nodes)

    return RaisingRetriever()


# -- engines ------------------------------------------------------------------------------


def _logprobs(row: np.ndarray) -> np.ndarray:
    return np.array(row, dtype=np.float32, copy=True)


@contextmanager
def forwards_logged(module: Any, into: list[Any]) -> Iterator[None]:
    """Log every dimension of each forward of ``module`` (a torch model) while inside.

    A prefill's forwards (one [B, prompt_width + 1] forward on the eager engine, the
    static batch's [B, prompt_width]) and the decode steps ([B, 1] tokens over a mask
    as wide as the public width plus the tokens released) have public shapes; a
    prefill whose forwards follow the rows' token counts (``prefill="rows"``) shows
    here (``test_controls.py``).
    """
    if not hasattr(module, "register_forward_pre_hook"):
        yield
        return

    def shapes(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        named = [
            (k, tuple(v.shape))
            for k, v in [*((str(i), a) for i, a in enumerate(args)), *sorted(kwargs.items())]
            if hasattr(v, "shape")
        ]
        into.append(tuple(named))

    hook = module.register_forward_pre_hook(shapes, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()


@dataclass
class RowLog:
    """One session of a watched token model: its prompts and, per read, each row's outputs.

    ``reads``: (released prefix so far, per row its log-probabilities or its
    lookahead tokens) at every ``greedy()`` / ``lookahead()`` read; ``prefill`` and
    ``steps``: the shapes of every forward the session's prefill and its later
    steps ran in process (:func:`forwards_logged`), a function of public numbers
    alone (the rows, the public prompt width, the tokens released).
    """

    prompts: list[str]
    appended: list[int] = field(default_factory=list)
    reads: list[tuple[tuple[int, ...], list[Any]]] = field(default_factory=list)
    prefill: list[tuple[tuple[str, tuple[int, ...]], ...]] = field(default_factory=list)
    steps: list[tuple[tuple[str, tuple[int, ...]], ...]] = field(default_factory=list)


class WatchedSession:
    """A session that logs what each row shows (``RowLog``), passing everything through."""

    def __init__(self, inner: Any, log: RowLog, *, logits: bool, module: Any = None) -> None:
        self.inner, self.log, self.logits, self.module = inner, log, logits, module

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _forwards(self) -> Any:
        return forwards_logged(self.module, self.log.steps)

    def greedy(self) -> Any:
        out = self.inner.greedy()
        if self.logits:
            rows = [_logprobs(r) for r in np.asarray(self.inner.logprobs)]
        else:
            rows = [str(int(t)) for t in np.asarray(out)]
        self.log.reads.append((tuple(self.log.appended), rows))
        return out

    @property
    def logprobs(self) -> Any:
        out = self.inner.logprobs
        self.log.reads.append((tuple(self.log.appended), [_logprobs(r) for r in np.asarray(out)]))
        return out

    def lookahead(self, n: int, *, stop: Any = None) -> Any:
        """Each row's own continuation, cut where the stop rule cuts that row alone (the
        table's width follows every row; the word a row votes for is its own)."""
        with self._forwards():
            out = self.inner.lookahead(n, stop=stop)
        rows = []
        for row in np.asarray(out):
            own = row[: stop_width(row[None, :], stop)] if stop is not None else row
            rows.append(" ".join(str(int(t)) for t in own))
        self.log.reads.append((tuple(self.log.appended), rows))
        return out

    def step(self, token: int) -> None:
        self.log.appended.append(int(token))
        with self._forwards():
            self.inner.step(token)

    def extend(self, tokens: Sequence[int]) -> None:
        self.log.appended.extend(int(t) for t in tokens)
        with self._forwards():
            self.inner.extend(tokens)


class Watched:
    """A token model whose sessions are logged (:class:`RowLog`), for the rows observable.

    ``logits=True`` logs each row's log-probabilities: in-process engines, whose
    rows must not depend on what the other rows hold (compared within
    ``observations.ROW_TOLERANCE``), and the shapes each prefill's forwards took
    (compared exactly); a server's rows log their greedy tokens.
    """

    def __init__(self, inner: Any, *, logits: bool) -> None:
        self.inner, self.logits = inner, logits
        self.sessions: list[RowLog] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def vocab_size(self) -> int:
        return int(self.inner.vocab_size)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset(self.inner.eos_token_ids)

    def encode(self, text: str) -> list[int]:
        return list(self.inner.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.inner.decode(ids))

    def check_lookahead(self) -> None:
        self.inner.check_lookahead()

    def _watch(self, start: Callable[[], Any], prompts: Sequence[str]) -> WatchedSession:
        log = RowLog(list(prompts))
        module = getattr(self.inner, "model", None) if self.logits else None
        with forwards_logged(module, log.prefill):
            session = start()
        self.sessions.append(log)
        return WatchedSession(session, log, logits=self.logits, module=module)

    def prefill(self, prompts: Sequence[str]) -> WatchedSession:
        return self._watch(lambda: self.inner.prefill(prompts), prompts)

    def prefill_logprobs(self, prompts: Sequence[str]) -> WatchedSession:
        return self._watch(lambda: self.inner.prefill_logprobs(prompts), prompts)


@dataclass
class Engine:
    """A world's models: a token model (watched), a text model, and what the server received."""

    token: Any = None
    text: Any = None
    server: Any = None  # a server double (its ``requests``), or None in process
    hosted: list[dict[str, int]] | None = None  # calls to a hosted text API
    fault: Fault = field(default_factory=Fault)  # how its endpoint fails on x (x's kind)
    endpoint: list[dict[str, Any]] | None = None  # requests to its model endpoint

    def row_logs(self) -> list[RowLog]:
        return list(self.token.sessions) if isinstance(self.token, Watched) else []


class Lab:
    """The session's shared, read-only parts: model weights and tokenizers."""

    def __init__(self, tiny: dict[str, Any], tokenizer: Any) -> None:
        self.tiny, self.tokenizer = tiny, tokenizer
        self._reader: tuple[Any, Any] | None = None
        self._capped: Any = None
        self.cache: dict[Any, Any] = {}

    def capped_tokenizer(self) -> Any:
        """The tiny tokenizer with ``model_max_length`` set (1 024), as most shipped ones are:
        transformers warns when it tokenizes a longer text."""
        if self._capped is None:
            import copy

            self._capped = copy.deepcopy(self.tokenizer)
            self._capped.model_max_length = 1024
        return self._capped

    def fresh_host_state(self) -> None:
        """What a fresh process would show: the once-per-tokenizer and once-per-process
        warnings of transformers armed again (each world starts from the same state)."""
        from transformers.utils import logging as hf_logging

        for tokenizer in (self.tokenizer, self._capped, self._reader and self._reader[1]):
            if tokenizer is not None and hasattr(tokenizer, "deprecation_warnings"):
                tokenizer.deprecation_warnings.clear()
        qdrant = sys.modules.get("qdrant_client.common.client_warnings")
        if qdrant is not None:  # qdrant's show_warning_once: once per process
            qdrant.SEEN_MESSAGES.clear()
        for once in ("warning_once", "info_once"):
            cached = getattr(hf_logging.logging.Logger, once, None)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()

    def reader(self) -> tuple[Any, Any]:
        """The shipped reader's weights and tokenizer, loaded once."""
        if self._reader is None:
            from dprag_core.eval.workbench import load_models

            token_model, _ = load_models()
            self._reader = (token_model.model, token_model.tokenizer)
        return self._reader

    def hf(self, weights: str, engine: str, *, capped: bool = False) -> Engine:
        """A fresh HFTokenModel (its own cache pool) over shared weights, and its text model
        (``capped``: with :meth:`capped_tokenizer`)."""
        from dprag_core.models.hf import HFTextModel, HFTokenModel

        model, tokenizer = (
            self.reader() if weights == "reader" else (self.tiny[weights], self.tokenizer)
        )
        if capped:
            tokenizer = self.capped_tokenizer()
        token = HFTokenModel(model, tokenizer, engine=engine)  # type: ignore[arg-type]
        return Engine(token=Watched(token, logits=True), text=HFTextModel.on(token))

    def server(self, kind: str, *, lookahead_tokens: int) -> Engine:
        """An OpenAICompatModel on a server double with a context of :data:`CONTEXT` tokens."""
        eos = int(self.tokenizer.eos_token_id)
        double = (
            ModelServer(self.tiny["gpt2"], eos=eos)
            if kind == "model"
            else ScriptedServer(self.tokenizer, SCRIPTS, eos=eos)
        )
        fault, log = Fault(), []
        endpoint = ObservedServer(ContextLimited(double, n_ctx=CONTEXT), double, self.tokenizer,
                                  fault, log)  # fmt: skip
        model = served(endpoint, self.tokenizer, lookahead_tokens=lookahead_tokens)
        model.endpoint.backoff = 0.0  # a timed-out request is retried at once (no waiting)
        return Engine(token=Watched(model, logits=False), text=model, server=double,
                      fault=fault, endpoint=log)  # fmt: skip

    def hosted(self, framework: str) -> Engine:
        """A hosted text API (a fake: LangChain's or LlamaIndex's chat model), its calls logged;
        it refuses, or times out on, a prompt holding :data:`MARKER` when the fault says so."""
        fault, log = Fault(), []
        if framework == "llamaindex":
            from llamaindex_dprag import LlamaIndexTextModel

            model: Any = LlamaIndexTextModel(faulty_question_llm(fault, log), max_concurrency=1)
        else:
            from langchain_dprag import LangChainTextModel

            model = LangChainTextModel(faulty_echo(fault, log), max_concurrency=1)
        logged = LoggedText(model)
        return Engine(text=logged, hosted=logged.calls, fault=fault, endpoint=log)


class LoggedText:
    """A text model whose calls are logged: how many prompts, how long an answer."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, int]] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.calls.append({"prompts": len(prompts), "max_new_tokens": max_new_tokens})
        return list(self.inner.generate(prompts, max_new_tokens=max_new_tokens))


class ContentFilterError(ValueError):
    """What a hosted API raises on a prompt its content filter refuses (HTTP 400)."""


def _failure(kind: str) -> Exception:
    if kind == "timeout":
        return TimeoutError("Request timed out.")
    return ContentFilterError("Error code: 400 - {'error': {'code': 'content_filter'}}")


def faulty_echo(fault: Fault, log: list[dict[str, Any]]) -> Any:
    """lc_support's EchoChatModel whose provider refuses (or times out on) a prompt holding
    :data:`MARKER`; every call logged (one prompt, its outcome)."""
    from lc_support import EchoChatModel

    from langchain_dprag._compat import message_text

    class FaultyEcho(EchoChatModel):
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> Any:  # fmt: skip
            failure = fault.hit(message_text(messages[-1]), "refuse", "timeout")
            log.append({"prompts": 1, "outcomes": [failure or "ok"]})
            if failure:
                raise _failure(failure)
            return super()._generate(messages, stop, run_manager, **kwargs)

    return FaultyEcho()


def faulty_question_llm(fault: Fault, log: list[dict[str, Any]]) -> Any:
    """li_helpers' QuestionLLM whose provider refuses (or times out on) a prompt holding
    :data:`MARKER`; every call logged."""
    from li_helpers import QuestionLLM

    def check(prompt: str) -> None:
        failure = fault.hit(prompt, "refuse", "timeout")
        log.append({"prompts": 1, "outcomes": [failure or "ok"]})
        if failure:
            raise _failure(failure)

    class FaultyQuestion(QuestionLLM):
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            check(prompt)
            return super().complete(prompt, formatted, **kwargs)

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            check(prompt)
            return super().stream_complete(prompt, formatted, **kwargs)

    return FaultyQuestion()


class ObservedServer:
    """A server double's transport as a provider sees it: every completion request logged
    (its rows, each row's outcome, its status), and the fault applied: a request with a row
    holding :data:`MARKER` answers HTTP 400 ``content_filter`` or times out."""

    def __init__(self, inner: Any, double: Any, tokenizer: Any, fault: Fault,
                 log: list[dict[str, Any]]) -> None:  # fmt: skip
        self.inner, self.double, self.tokenizer = inner, double, tokenizer
        self.fault, self.log = fault, log

    def __call__(self, request: Any) -> Any:
        import httpx

        if request.url.path != "/completion":
            with serving():
                return self.inner(request)
        body = json.loads(request.content)
        texts = [self.tokenizer.decode(row) for row in body["prompt"]]
        failures = [self.fault.hit(t, "refuse", "timeout") for t in texts]
        entry: dict[str, Any] = {"rows": len(texts), "outcomes": [f or "ok" for f in failures]}
        self.log.append(entry)
        if "timeout" in failures:
            self.double.requests.append(body)
            entry["status"] = "timeout"
            raise httpx.ReadTimeout("timed out", request=request)
        if "refuse" in failures:
            self.double.requests.append(body)
            entry["status"] = 400
            return httpx.Response(400, json={"error": {"code": "content_filter", "type":
                                  "invalid_request_error", "message": "refused"}})  # fmt: skip
        with serving():  # the provider's own work
            response = self.inner(request)
        entry["status"] = response.status_code
        return response


@contextlib.contextmanager
def embedding_endpoint(fault: Fault, log: list[dict[str, Any]]) -> Iterator[None]:
    """The cell's embedding doubles (LangChain's ``TableEmbeddings``, LlamaIndex's embeddings)
    as an endpoint sees them during an ask: every call logged (texts, bytes, outcome), and
    an input holding :data:`MARKER` refused when the fault says ``embedding``."""
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from store_cases import TableEmbeddings

    patched: list[tuple[Any, str, Any]] = []

    def watch(owner: Any, name: str, many: bool, is_async: bool = False) -> None:
        original = owner.__dict__[name]

        def record(texts: list[str], call: str) -> None:
            failure = any(fault.hit(t, "embedding") for t in texts)
            log.append({"call": call, "texts": len(texts),
                        "bytes": sum(len(t.encode("utf-8", "surrogatepass")) for t in texts),
                        "outcome": "refused" if failure else "ok"})  # fmt: skip
            if failure:
                raise ValueError("the embedding endpoint refused the input")

        if is_async:

            async def awatched(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
                record(list(text) if many else [text], name)
                return await original(self, text, *args, **kwargs)

            setattr(owner, name, awatched)
        else:

            def watched(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
                record(list(text) if many else [text], name)
                return original(self, text, *args, **kwargs)

            setattr(owner, name, watched)
        patched.append((owner, name, original))

    watch(TableEmbeddings, "embed_query", many=False)
    watch(TableEmbeddings, "embed_documents", many=True)
    watch(BaseEmbedding, "get_query_embedding", many=False)
    watch(BaseEmbedding, "aget_query_embedding", many=False, is_async=True)
    watch(BaseEmbedding, "get_text_embedding", many=False)
    watch(BaseEmbedding, "get_text_embedding_batch", many=True)
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def requests_of(server: Any) -> list[dict[str, Any]]:
    """What a server double received, one entry per request: its shape, its prompt widths."""
    out = []
    for body in server.requests:
        widths = [len(p) for p in body["prompt"]]
        rest = {k: v for k, v in body.items() if k != "prompt"}
        out.append({
            "rows": len(widths),
            "over_context": sum(w >= CONTEXT for w in widths),
            "fields": json.dumps(rest, sort_keys=True),
        })  # fmt: skip
    return out


def rows_with(rows: Sequence[Row], x: Row, *, first: bool) -> list[Row]:
    """D + x in insertion order: x last, or x first and the rest reversed (another order)."""
    return [x, *reversed(rows)] if first else [*rows, x]


def lc_kind(kind: str) -> Callable[[Corpus, str | None], Any]:
    """A store of store_cases.LC_KINDS over the corpus."""
    return lambda corpus, pg: lc_store(kind, list(corpus.rows), pg)


def li_kind(kind: str) -> Callable[[Corpus, str | None], Any]:
    """A LlamaIndex index over a store of store_cases.LI_KINDS."""
    return lambda corpus, pg: li_index(kind, list(corpus.rows), pg)


def near(cosine: float, seed: int = 11) -> tuple[float, ...]:
    """A unit vector at ``cosine`` with the question (x's vectors)."""
    return at_cosine(query_vector(), cosine, np.random.default_rng(seed))
