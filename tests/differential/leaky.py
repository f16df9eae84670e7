"""Deliberately leaky parts: the positive controls of the differential harness.

Each leaks what the corpus holds into one observable, the way a real bug
would; tests/differential/test_controls.py asserts that the harness reports a
difference there (and none without the leak). The base is :class:`Quiet`, a
well-behaved stand-in mechanism whose release never depends on its documents.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.ledger import SQLiteLedger
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import EOS

__all__ = [
    "DocCharging",
    "DocEmbedding",
    "DocTokenizing",
    "IdsInDetails",
    "LeakyDetails",
    "PerDocGeneration",
    "PerDocSession",
    "Quiet",
    "RaisingWithDocuments",
    "ReuseLeak",
    "UnitCountLedger",
    "emitting_end_payload",
    "leaky_end_payload",
    "uncut_prompts",
]


def real(docs: Sequence[ScoredDocument]) -> list[ScoredDocument]:
    """The documents that are not placeholders."""
    return [d for d in docs if not d.is_padding]


class Quiet(ToyMechanism):
    """A stand-in that releases ``"ok"`` whatever it reads (cost (1, 1e-6), ``k`` candidates)."""

    name = "Quiet"

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        details = {"stop_reason": EOS, **self.details(real(docs), as_query(query, rng=rng))}
        return DPAnswer("ok", self.query_cost(), self.name, details)

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        """The answer's details besides its stop reason (none); ``query``: the one it answers."""
        return {}


class LeakyDetails(Quiet):
    """Puts a count of its documents and the first one's id in public-kind details keys."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        return {"k": len(docs), "inner": docs[0].id if docs else ""}


class IdsInDetails(Quiet):
    """Breaks the release half of the mechanism contract: its details carry document ids
    under a key outside the public vocabulary (issue 36 case 6)."""

    name = "IdsInDetails"

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        return {"doc_ids": [d.id for d in docs]}


class ReuseLeak(Quiet):
    """Refuses a reused query id, but remembers ids only of queries that read 5 documents.

    It charges no corpus budget (as MuRAG, whose ledger decides reuse), so the
    second ask reaches it.
    """

    def __init__(self, *, k: int = 8) -> None:
        super().__init__(k=k)
        self.seen: set[str] = set()

    def query_cost(self) -> None:  # type: ignore[override]
        return None

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        qid = query.id
        if qid in self.seen:
            raise QueryIdReused("query_id was already charged")
        if len(docs) >= 5:
            self.seen.add(qid)
        return {}


class Using(Quiet):
    """A :class:`Quiet` holding something to misuse (a budget, a model)."""

    def __init__(self, used: Any, *, k: int = 8) -> None:
        super().__init__(k=k)
        self.used = used


class DocCharging(Using):
    """Charges the corpus budget (``used``) a little more for each document it read."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        for i, _ in enumerate(docs):
            self.used.charge(Budget(1e-3), query_id=f"{query.id}/doc{i}")
        return {}


class PerDocSession(Using):
    """Opens one session of its token model (``used``) with a row per document it read."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        if docs:
            self.used.prefill([d.text for d in docs]).greedy()
        return {}


class PerDocGeneration(Using):
    """Asks its text model (``used``) once per document it read."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        for doc in docs:
            self.used.generate([doc.text], max_new_tokens=2)
        return {}


class DocEmbedding(Using):
    """Embeds each document it read with the store's embedding model (``used``): one request
    to the embedding endpoint per document."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        for doc in docs:
            self.used.embed_query(doc.text)
        return {}


class DocTokenizing(Using):
    """Tokenizes each document it read, whole, with its token model (``used``): work that
    grows with a document's length."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        for doc in docs:
            self.used.encode(doc.text)
        return {}


class RaisingWithDocuments(Quiet):
    """Fails with one fixed message from a frame whose local ``docs`` holds what it read:
    sealed, the same failure in both worlds; let out (the data owner's debug switch), the
    message is still the same, the frames are not."""

    def details(self, docs: list[ScoredDocument], query: Query) -> dict[str, Any]:
        raise ValueError("this mechanism always fails")


def emitting_end_payload(emit: Any, count: Any) -> Any:
    """An end-of-query payload (the original one) whose adapter also emits ``count()``, how
    many documents were retrieved, through ``emit`` (stdout, stderr, a log, a warning)."""
    from dprag_core.events import end_payload

    def payload(answer: DPAnswer) -> dict[str, Any]:  # bound now: the original, unpatched
        emit(f"read {count()} documents")
        return end_payload(answer)

    return payload


def uncut_prompts(model: Any) -> None:
    """Make a served model (``OpenAICompatModel``) send every prompt whole, as it did before
    the public envelope: each prompt tokenized whole (no byte cut, no filler) and its width
    set beyond any prompt, so a long document makes a prompt over the server's context
    (issue 36 case 2)."""
    codec_ids = type(model).prompt_ids

    def whole(prompt: str) -> list[int]:
        width, model.prompt_width = model.prompt_width, None
        try:
            return list(codec_ids(model, prompt))
        finally:
            model.prompt_width = width

    model.prompt_ids = whole
    model.prompt_width = 10**9


class UnitCountLedger(SQLiteLedger):
    """Charges each unit of a charge the cost times the number of units charged with it."""

    def charge(self, query_id: str, units: Any, cost: float, **options: Any) -> Any:
        units = list(units)
        return super().charge(query_id, units, cost * max(1, len(units)), **options)


def leaky_end_payload(count: Any) -> Any:
    """An end-of-query payload that also says how many documents were retrieved
    (``count()``), in a public field."""
    from dprag_core.events import end_payload

    def payload(answer: DPAnswer) -> dict[str, Any]:  # bound now: the original, unpatched
        return {**end_payload(answer), "private_tokens": count()}

    return payload


@contextlib.contextmanager
def patched_end_payload(monkeypatch: Any, count: Any, emit: Any = None) -> Iterator[None]:
    """Every module of dprag that uses ``end_payload`` uses the leaky one (``emit``: the one
    that emits the count, :func:`emitting_end_payload`; else the count in a field)."""
    from dprag_core import events

    original = events.end_payload
    leaky = leaky_end_payload(count) if emit is None else emitting_end_payload(emit, count)
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if top in ("dprag_core", "langchain_dprag", "llamaindex_dprag") and (
            getattr(module, "end_payload", None) is original
        ):
            monkeypatch.setattr(module, "end_payload", leaky)
    yield


def hnsw_retriever(rows: Sequence[Any]) -> Any:
    """A core retriever over a FAISS HNSW index (efSearch 1) declared k-honouring: a broken
    promise (one added record moves others through the graph)."""
    import faiss
    from store_cases import DIM, query_vector

    from dprag_core.retrieval.capabilities import HonoursK

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # HNSW insertion is deterministic on one thread
    try:
        index = faiss.IndexHNSWFlat(DIM, 2, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction, index.hnsw.efSearch = 2, 1
        index.add(np.array([r.vector for r in rows], dtype=np.float32))
    finally:
        faiss.omp_set_num_threads(threads)
    q = np.array([query_vector()], dtype=np.float32)

    def search(question: str, k: int) -> list[ScoredDocument]:
        scores, found = index.search(q, k)
        return [ScoredDocument(rows[i].ref, rows[i].text, float(s), rows[i].ref)
                for s, i in zip(scores[0], found[0], strict=True) if i >= 0]  # fmt: skip

    return HonoursK(search)
