"""Bad input through the public entry points: one table across the core, both adapters,
the ledgers, the corpus budgets and the datastore.

Every case asserts: the error type, that the message names the parameter, that no
budget was spent (the shared corpus budget and ledger are read before and after),
and that no private text (the canary below, placed in documents, questions and ids)
appears in the message or the repr of the error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dprag_core import Budget, PrivateRAG, ScoredDocument
from dprag_core.accounting import (
    InMemoryCorpusAccountant,
    PostgresCorpusAccountant,
    SQLiteCorpusAccountant,
)
from dprag_core.accounting.ledger import (
    InMemoryLedger,
    PostgresLedger,
    PostgresTimeouts,
    SQLiteLedger,
)
from dprag_core.algorithms.base import Mechanism
from dprag_core.datastore import DPSimHashDatastore
from dprag_core.mechanisms.rng import RngLike

SECRET = "qv9canary2291private"
NAN = math.nan


class Toy(Mechanism):
    """A fixed-cost stand-in mechanism (the adapters' own tests use the real ones)."""

    name = "Toy"

    def candidates_needed(self) -> int:
        return 2

    def query_cost(self) -> Budget:
        return Budget(0.5, 1e-7)

    def answer(self, question: str, docs: Any, *, rng: RngLike = None) -> Any:
        from dprag_core.answers import DPAnswer

        return DPAnswer("ok", self.query_cost(), self.name, {"stop_reason": "eos"})


def _retriever(question: str, k: int) -> list[ScoredDocument]:
    return [ScoredDocument(id=f"d{i}", text=SECRET, score=0.9 - i / 10) for i in range(k)]


@dataclass
class Ctx:
    """The shared budgets every case must leave untouched, and the objects cases call."""

    tmp: Path
    acc: SQLiteCorpusAccountant
    ledger: SQLiteLedger

    def rag(self) -> PrivateRAG:
        return PrivateRAG(Toy(), _retriever, accountant=self.acc)

    def release(self, **kw: Any) -> DPSimHashDatastore:
        keys = np.random.default_rng(0).normal(size=(20, 4))
        args: dict[str, Any] = {
            "num_classes": 2, "epsilon": 1.0, "tables": 2, "bits": 3, "rng": 0, **kw
        }  # fmt: skip
        return DPSimHashDatastore.release(keys, (keys[:, 0] > 0).astype(int), **args)

    def faiss_add(self, **kw: Any) -> None:
        pytest.importorskip("faiss")
        from dprag_core.retrieval.faiss_corpus import FaissCorpus

        args: dict[str, Any] = {"ids": ["a"], "texts": [SECRET], "embeddings": np.ones((1, 4))}
        FaissCorpus(dim=4).add(**{**args, **kw})

    def chain(self, **kw: Any) -> Any:
        pytest.importorskip("langchain_core")
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from langchain_core.vectorstores import InMemoryVectorStore

        from langchain_dprag import DPRAGChain

        store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        store.add_texts([SECRET, "public fact"])
        args: dict[str, Any] = {"mechanism": Toy(), "vectorstore": store, "accountant": self.acc}
        return DPRAGChain(**{**args, **kw})

    def dpretriever(self, **kw: Any) -> Any:
        pytest.importorskip("langchain_core")
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from langchain_core.vectorstores import InMemoryVectorStore

        from langchain_dprag import DPRetriever

        store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        store.add_texts([SECRET, "public fact"])
        args: dict[str, Any] = {
            "vectorstore": store, "epsilon": 1.0, "accountant": self.acc, "k": 1
        }  # fmt: skip
        return DPRetriever(**{**args, **kw})

    def engine(self, **kw: Any) -> Any:
        pytest.importorskip("llama_index.core")
        from llama_index.core import Document, VectorStoreIndex
        from llama_index.core.embeddings import MockEmbedding

        from llamaindex_dprag import DPQueryEngine

        index = VectorStoreIndex.from_documents(
            [Document(text=SECRET), Document(text="public fact")],
            embed_model=MockEmbedding(embed_dim=8),
        )
        args: dict[str, Any] = {"mechanism": Toy(), "budget": self.acc}
        return DPQueryEngine.from_index(index, **{**args, **kw})

    def postprocessor(self, **kw: Any) -> Any:
        pytest.importorskip("llama_index.core")
        from llamaindex_dprag.postprocessors import DPThresholdPostprocessor

        args: dict[str, Any] = {
            "epsilon": 1.0, "score_range": (0.0, 1.0), "k": 1, "budget": self.acc
        }  # fmt: skip
        return DPThresholdPostprocessor(**{**args, **kw})


Case = tuple[str, Callable[[Ctx], object], type[Exception], str]

CORE: list[Case] = [
    ("budget-eps-str", lambda c: Budget("1"), TypeError, "epsilon"),  # type: ignore[arg-type]
    ("budget-eps-neg", lambda c: Budget(-1.0), ValueError, "epsilon"),
    ("budget-eps-nan", lambda c: Budget(NAN), ValueError, "epsilon"),
    ("budget-delta-1", lambda c: Budget(1.0, 1.0), ValueError, "delta"),
    ("budget-delta-nan", lambda c: Budget(1.0, NAN), ValueError, "delta"),
    ("doc-text-none", lambda c: ScoredDocument(id="a", text=None, score=0.5), TypeError, "text"),  # type: ignore[arg-type]
    (
        "doc-score-str",
        lambda c: ScoredDocument(id="a", text=SECRET, score="high"),
        TypeError,
        "score",
    ),  # type: ignore[arg-type]
    (
        "doc-score-bool",
        lambda c: ScoredDocument(id="a", text=SECRET, score=True),
        TypeError,
        "score",
    ),
    ("doc-id-empty", lambda c: ScoredDocument(id="", text=SECRET, score=0.1), ValueError, "id"),
    ("doc-id-int", lambda c: ScoredDocument(id=7, text=SECRET, score=0.1), ValueError, "id"),  # type: ignore[arg-type]
    (
        "doc-unit-int",
        lambda c: ScoredDocument(id="a", text=SECRET, score=0.1, unit=3),
        TypeError,
        "unit",
    ),  # type: ignore[arg-type]
    ("rag-mechanism", lambda c: PrivateRAG("toy", _retriever), TypeError, "mechanism"),  # type: ignore[arg-type]
    ("rag-retriever", lambda c: PrivateRAG(Toy(), 5), TypeError, "retriever"),  # type: ignore[arg-type]
    ("rag-question-none", lambda c: c.rag().answer(None), ValueError, "question"),  # type: ignore[arg-type]
    ("rag-question-empty", lambda c: c.rag().answer(""), ValueError, "question"),
    ("rag-question-blank", lambda c: c.rag().answer(" \n"), ValueError, "question"),
    ("rag-question-bytes", lambda c: c.rag().answer(SECRET.encode()), ValueError, "question"),  # type: ignore[arg-type]
    ("rag-stream-question", lambda c: list(c.rag().stream("")), ValueError, "question"),
]

BUDGETS: list[Case] = [
    ("mem-total", lambda c: InMemoryCorpusAccountant(1.0), TypeError, "total"),  # type: ignore[arg-type]
    ("mem-cost", lambda c: InMemoryCorpusAccountant(Budget(1.0)).charge(0.5), TypeError, "cost"),  # type: ignore[arg-type]
    ("acc-cost-float", lambda c: c.acc.charge(0.5), TypeError, "cost"),  # type: ignore[arg-type]
    ("acc-cost-tiny", lambda c: c.acc.charge(Budget(1e-13)), ValueError, "cost.epsilon"),
    ("acc-cost-tiny-delta", lambda c: c.acc.charge(Budget(0.1, 1e-20)), ValueError, "cost.delta"),
    ("acc-cost-huge", lambda c: c.acc.charge(Budget(2e6)), ValueError, "cost.epsilon"),
    ("acc-can-afford", lambda c: c.acc.can_afford("0.1"), TypeError, "cost"),  # type: ignore[arg-type]
    ("acc-qid-empty", lambda c: c.acc.charge(Budget(0.1), query_id=""), ValueError, "query_id"),
    ("acc-qid-int", lambda c: c.acc.charge(Budget(0.1), query_id=5), TypeError, "query_id"),  # type: ignore[arg-type]
    (
        "acc-qid-nul",
        lambda c: c.acc.charge(Budget(0.1), query_id=SECRET + "\x00"),
        ValueError,
        "query_id",
    ),
    (
        "acc-qid-surrogate",
        lambda c: c.acc.charge(Budget(0.1), query_id="\udc80" + SECRET),
        ValueError,
        "query_id",
    ),
    (
        "acc-qid-long",
        lambda c: c.acc.charge(Budget(0.1), query_id=SECRET * 100),
        ValueError,
        "query_id",
    ),
    (
        "acc-qid-reused",
        lambda c: c.acc.charge(Budget(0.2), query_id="setup-q"),
        ValueError,
        "query_id",
    ),
    (
        "sqlite-acc-total",
        lambda c: SQLiteCorpusAccountant(c.tmp / "x.db", total=5),
        TypeError,
        "total",
    ),  # type: ignore[arg-type]
    (
        "sqlite-acc-total-big",
        lambda c: SQLiteCorpusAccountant(c.tmp / "x.db", total=Budget(2e6)),
        ValueError,
        "total.epsilon",
    ),
    (
        "sqlite-acc-other-total",
        lambda c: SQLiteCorpusAccountant(c.acc.path, total=Budget(9.0)),
        ValueError,
        "total",
    ),
    (
        "sqlite-acc-path",
        lambda c: SQLiteCorpusAccountant(":memory:", total=Budget(1.0)),
        ValueError,
        "path",
    ),
    (
        "sqlite-acc-table",
        lambda c: SQLiteCorpusAccountant(c.tmp / "x.db", total=Budget(1.0), table="Bad-Name"),
        ValueError,
        "table",
    ),
    (
        "sqlite-acc-timeout",
        lambda c: SQLiteCorpusAccountant(c.tmp / "x.db", total=Budget(1.0), busy_timeout=0),
        ValueError,
        "busy_timeout",
    ),
    ("pg-acc-dsn", lambda c: PostgresCorpusAccountant("", total=Budget(1.0)), ValueError, "dsn"),
    (
        "pg-acc-table",
        lambda c: PostgresCorpusAccountant("host=x", total=Budget(1.0), table="1x"),
        ValueError,
        "table",
    ),
    (
        "pg-acc-timeouts",
        lambda c: PostgresCorpusAccountant("host=x", total=Budget(1.0), timeouts=3),
        TypeError,
        "timeouts",
    ),  # type: ignore[arg-type]
    ("pg-timeouts-neg", lambda c: PostgresTimeouts(statement=-1), ValueError, "statement"),
    ("pg-timeouts-str", lambda c: PostgresTimeouts(lock="5"), TypeError, "lock"),  # type: ignore[arg-type]
    ("pg-timeouts-inf", lambda c: PostgresTimeouts(connect=math.inf), ValueError, "connect"),
]

LEDGERS: list[Case] = [
    (
        "ledger-budget-0",
        lambda c: SQLiteLedger(c.tmp / "y.db", budget_per_unit=0),
        ValueError,
        "budget_per_unit",
    ),
    (
        "ledger-budget-nan",
        lambda c: InMemoryLedger(budget_per_unit=NAN),
        ValueError,
        "budget_per_unit",
    ),
    (
        "ledger-budget-str",
        lambda c: InMemoryLedger(budget_per_unit="1"),
        TypeError,
        "budget_per_unit",
    ),  # type: ignore[arg-type]
    (
        "ledger-other-budget",
        lambda c: SQLiteLedger(c.ledger.path, budget_per_unit=3.0),
        ValueError,
        "budget_per_unit",
    ),
    (
        "ledger-timeout",
        lambda c: SQLiteLedger(c.tmp / "y.db", budget_per_unit=1, busy_timeout=-1),
        ValueError,
        "busy_timeout",
    ),
    ("ledger-path", lambda c: SQLiteLedger("", budget_per_unit=1.0), ValueError, "path"),
    ("pg-ledger-dsn", lambda c: PostgresLedger(" ", budget_per_unit=1.0), ValueError, "dsn"),
    (
        "pg-ledger-table",
        lambda c: PostgresLedger("host=x", budget_per_unit=1.0, table="A"),
        ValueError,
        "table",
    ),
    (
        "unit-surrogate",
        lambda c: c.ledger.charge("q", [SECRET + "\ud800"], 0.1),
        ValueError,
        "units",
    ),
    ("unit-nul", lambda c: c.ledger.charge("q", [SECRET + "\x00x"], 0.1), ValueError, "units"),
    ("unit-long", lambda c: c.ledger.charge("q", [SECRET * 60], 0.1), ValueError, "units"),
    ("unit-empty", lambda c: c.ledger.charge("q", ["ok", ""], 0.1), ValueError, "units"),
    ("units-str", lambda c: c.ledger.charge("q", SECRET, 0.1), TypeError, "units"),
    ("units-int", lambda c: c.ledger.charge("q", [3], 0.1), TypeError, "units"),
    ("units-none", lambda c: c.ledger.charge("q", None, 0.1), TypeError, "units"),  # type: ignore[arg-type]
    ("ledger-cost-neg", lambda c: c.ledger.charge("q", ["a"], -1.0), ValueError, "cost"),
    ("ledger-cost-str", lambda c: c.ledger.charge("q", ["a"], "0.1"), TypeError, "cost"),  # type: ignore[arg-type]
    ("ledger-cost-huge", lambda c: c.ledger.charge("q", ["a"], 2e6), ValueError, "cost"),
    ("ledger-cost-nan", lambda c: c.ledger.charge("q", ["a"], NAN), ValueError, "cost"),
    ("ledger-qid-none", lambda c: c.ledger.charge(None, ["a"], 0.1), TypeError, "query_id"),  # type: ignore[arg-type]
    (
        "ledger-qid-surrogate",
        lambda c: c.ledger.charge("\ud800", ["a"], 0.1),
        ValueError,
        "query_id",
    ),
    (
        "ledger-qid-reused",
        lambda c: c.ledger.charge("setup-q", ["other"], 0.1),
        ValueError,
        "query_id",
    ),
    ("remaining-str", lambda c: c.ledger.remaining(SECRET), TypeError, "units"),
    ("active-min-cost", lambda c: c.ledger.active(["a"], -1.0), ValueError, "min_cost"),
    ("active-str", lambda c: c.ledger.active(SECRET, 0.1), TypeError, "units"),
]

DATASTORE: list[Case] = [
    (
        "load-max-bytes",
        lambda c: DPSimHashDatastore.load(c.tmp / "z.npz", max_bytes=0),
        ValueError,
        "max_bytes",
    ),
    ("load-junk", lambda c: DPSimHashDatastore.load(c.tmp / "junk.npz"), ValueError, "path"),
    ("release-classes", lambda c: c.release(num_classes=1), ValueError, "num_classes"),
    ("release-epsilon", lambda c: c.release(epsilon=0.0), ValueError, "epsilon"),
    ("release-pure-delta", lambda c: c.release(delta=0.1), ValueError, "delta"),
    ("release-sparse-delta", lambda c: c.release(sparse=True, delta=0.0), ValueError, "delta"),
    ("release-tables", lambda c: c.release(tables=0), ValueError, "tables"),
    ("faiss-text-none", lambda c: c.faiss_add(texts=[None]), TypeError, "texts"),
    ("faiss-text-int", lambda c: c.faiss_add(texts=[5]), TypeError, "texts"),
    ("faiss-ids-empty", lambda c: c.faiss_add(ids=[""]), ValueError, "ids"),
    (
        "faiss-embeddings",
        lambda c: c.faiss_add(embeddings=np.ones((1, 3))),
        ValueError,
        "embeddings",
    ),
]

ADAPTERS: list[Case] = [
    ("chain-mechanism", lambda c: c.chain(mechanism="toy"), TypeError, "mechanism"),
    ("chain-two-sources", lambda c: c.chain(retriever=c.dpretriever()), ValueError, "vectorstore"),
    ("chain-question-empty", lambda c: c.chain().invoke({"question": ""}), ValueError, "question"),
    ("chain-question-int", lambda c: c.chain().invoke({"question": 5}), ValueError, "question"),
    ("retriever-k", lambda c: c.dpretriever(k=0), ValueError, "k"),
    ("retriever-epsilon", lambda c: c.dpretriever(epsilon=-1.0), ValueError, "epsilon"),
    ("engine-mechanism", lambda c: c.engine(mechanism="toy"), TypeError, "mechanism"),
    ("engine-top-k", lambda c: c.engine(similarity_top_k=0), ValueError, "similarity_top_k"),
    ("engine-direction", lambda c: c.engine(score_direction="up"), ValueError, "score_direction"),
    ("engine-question", lambda c: c.engine().query(""), ValueError, "question"),
    ("post-k", lambda c: c.postprocessor(k=0), ValueError, "k"),
    ("post-p", lambda c: c.postprocessor(utility="top_p", p=2.0), ValueError, "p"),
    ("post-epsilon", lambda c: c.postprocessor(epsilon=NAN), ValueError, "epsilon"),
]

CASES = CORE + BUDGETS + LEDGERS + DATASTORE + ADAPTERS


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.fixture
def ctx(tmp_path: Path) -> Ctx:
    acc = SQLiteCorpusAccountant(tmp_path / "budget.db", total=Budget(5.0, 1e-5), create=True)
    acc.charge(Budget(0.1), query_id="setup-q")  # so that a reused id has something to hit
    ledger = SQLiteLedger(tmp_path / "ledger.db", budget_per_unit=2.0, create=True)
    ledger.charge("setup-q", ["a"], 0.5)
    (tmp_path / "junk.npz").write_bytes(SECRET.encode() * 10)
    return Ctx(tmp_path, acc, ledger)


@pytest.mark.parametrize(("case", "call", "kind", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_clearly_before_any_spend(
    ctx: Ctx, case: str, call: Callable[[Ctx], object], kind: type[Exception], param: str
) -> None:
    before = (ctx.acc.queries, ctx.acc.spent_epsilon, ctx.ledger.total_spent())
    with pytest.raises(kind) as info:
        call(ctx)
    message = str(info.value)
    assert param in message, f"{case}: the message does not name {param!r}: {message!r}"
    assert SECRET not in message and SECRET not in repr(info.value)
    assert (ctx.acc.queries, ctx.acc.spent_epsilon, ctx.ledger.total_spent()) == before
