"""MuRAG, MuRAG-Ada and NaiveMulti on real ledgers (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import (
    InMemoryLedger,
    Ledger,
    LedgerUnavailable,
    PostgresLedger,
    PostgresTimeouts,
    SQLiteLedger,
)
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.murag import MuRAG, MuRAGAda, NaiveMulti
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.events import start_payload
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import PrivateRAG, charge_query
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.faiss_corpus import FaissCorpus
from dprag_core.retrieval.selection import ledger_filter, units_above

POSTGRES_DSN = os.environ.get("DPRAG_TEST_POSTGRES_DSN", "")
NON_RAG = "no-context"


class EchoInner(Mechanism):
    """A deterministic stand-in for a pure-DP single-query mechanism (test only).

    Answers with the ids of the non-padding documents it is given, or NON_RAG when
    it got only padding; records every call, and checks (through ``probe``) that the
    ledger was charged before it ran.
    """

    name = "EchoInner"

    def __init__(self, *, epsilon: float, k: int, delta: float = 0.0) -> None:
        self.cost = Budget(epsilon, delta)
        self.k = k
        self.calls: list[list[ScoredDocument]] = []
        self.probe = lambda: None

    def candidates_needed(self) -> int:
        return self.k

    def query_cost(self) -> Budget:
        return self.cost

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        self.probe()
        self.calls.append(list(docs))
        ids = [d.id for d in docs if not d.is_padding]
        return DPAnswer(",".join(ids) or NON_RAG, self.cost, self.name, {"stop_reason": "eos"})


def doc(i: int, score: float, unit: str | None = None) -> ScoredDocument:
    return ScoredDocument(id=f"d{i}", text=f"private record {i}", score=score, unit=unit or "")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_for(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``ledger_for(budget)``: a fresh ledger of each backend."""
    made: list[Ledger] = []

    def make(budget: float) -> Ledger:
        led: Ledger
        if request.param == "memory":
            led = InMemoryLedger(budget_per_unit=budget)
        elif request.param == "sqlite":
            led = SQLiteLedger(
                tmp_path / f"{uuid.uuid4().hex}.db", budget_per_unit=budget, create=True
            )
        else:
            if not POSTGRES_DSN:
                pytest.skip("DPRAG_TEST_POSTGRES_DSN is unset: run scripts/postgres_for_tests.sh")
            led = PostgresLedger(
                POSTGRES_DSN,
                budget_per_unit=budget,
                table=f"t_{uuid.uuid4().hex[:16]}",
                create=True,
            )
        made.append(led)
        return led

    yield make
    for led in made:
        if isinstance(led, PostgresLedger):
            led.drop()
        led.close()


def spend_by_unit(ledger: Ledger) -> dict[str, float]:
    spent: dict[str, float] = {}
    for e in ledger.audit_log():
        spent[e.unit] = spent.get(e.unit, 0.0) + e.cost
    return spent


# -- MuRAG ---------------------------------------------------------------------------


def test_every_relevant_active_unit_is_charged_before_inner_runs(ledger_for) -> None:  # type: ignore[no-untyped-def]
    ledger = ledger_for(4.0)
    inner = EchoInner(epsilon=2.0, k=2)
    murag = MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=2.0, score_bounds=(-1.0, 1.0))
    docs = [doc(1, 0.9), doc(2, 0.8), doc(3, 0.7), doc(4, 0.6, unit="d3"), doc(5, 0.4)]

    def probe() -> None:  # charge before release: the audit rows exist when inner runs
        assert {e.unit for e in ledger.audit_log()} == {"d1", "d2", "d3"}

    inner.probe = probe
    answer = murag.answer("q", docs, rng=0)
    assert answer.text == "d1,d2"  # top-2 only ...
    assert spend_by_unit(ledger) == {"d1": 2.0, "d2": 2.0, "d3": 2.0}  # ... all 3 units charged
    assert answer.guarantee == Budget(4.0)  # the whole transcript's individual guarantee
    assert answer.details["epsilon_query"] == 2.0 and answer.details["per_unit_budget"] == 4.0
    assert answer.details["max_retrievals_per_unit"] == 2.0
    assert answer.details["stop_reason"] == "eos" and answer.details["inner"] == "EchoInner"
    assert set(answer.details) >= {"query_id", "tau", "accounting"}
    assert "private record" not in repr(answer)


def test_top_k_is_padded_to_exactly_k() -> None:
    inner = EchoInner(epsilon=1.0, k=4)
    murag = MuRAG(inner, ledger=InMemoryLedger(budget_per_unit=1.0), tau=0.0, epsilon_query=1.0)
    murag.answer("q", [doc(1, 0.3), doc(2, 0.9), doc(3, -0.5)])
    given = inner.calls[-1]
    assert len(given) == 4
    assert [d.id for d in given[:2]] == ["d2", "d1"]
    assert all(d.is_padding and d.text == "" for d in given[2:])


def test_top_k_holds_one_best_chunk_per_unit() -> None:
    # A unit with 3 chunks above tau must take one slot, not 3: otherwise adding it
    # displaces 3 other units' documents (3 voters of inner), beyond inner's epsilon_q.
    for make in (
        lambda inner, led: MuRAG(inner, ledger=led, tau=0.0, epsilon_query=1.0),
        lambda inner, led: MuRAGAda(
            inner, ledger=led, bins=[1.0, 0.0], epsilon_threshold=0.5, epsilon_rag=1.0
        ),
    ):
        inner = EchoInner(epsilon=1.0, k=3)
        make(inner, InMemoryLedger(budget_per_unit=2.0)).answer(
            "q", [doc(1, 0.9, "u"), doc(2, 0.8, "u"), doc(3, 0.7, "u"), doc(4, 0.6), doc(5, 0.5)],
            rng=0,
        )  # fmt: skip
        assert [d.id for d in inner.calls[-1]] == ["d1", "d4", "d5"]


def test_exhausted_units_are_excluded_and_answers_fall_back(ledger_for) -> None:  # type: ignore[no-untyped-def]
    # three questions sharing relevant documents; M = 2 retrievals per unit
    ledger = ledger_for(2.0)
    inner = EchoInner(epsilon=1.0, k=3)
    murag = MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=1.0)
    shared = [doc(1, 0.9), doc(2, 0.8)]
    answers = [murag.answer("q", [*shared, doc(10 + t, 0.7)]).text for t in range(3)]
    assert answers == ["d1,d2,d10", "d1,d2,d11", "d12"]  # d1, d2 exhausted after two queries
    assert murag.answer("q", shared).text == NON_RAG  # only exhausted units: non-RAG answer
    assert max(spend_by_unit(ledger).values()) <= 2.0


def test_100_queries_under_total_epsilon_10_verified_from_the_audit_log(tmp_path: Path) -> None:
    """The issue's headline: 100 queries, every unit's spend <= M*eps_q = 10 (SQLite)."""
    gen = np.random.default_rng(0)
    dim, n_docs, n_topics = 32, 400, 16
    topics = gen.normal(size=(n_topics, dim))
    doc_topic = gen.integers(n_topics, size=n_docs)
    emb = topics[doc_topic] + 0.35 * gen.normal(size=(n_docs, dim))
    corpus = FaissCorpus(dim=dim)
    corpus.add([f"r{i}" for i in range(n_docs)], [f"record {i}" for i in range(n_docs)], emb)
    questions = {f"question {t}": topics[t % n_topics] for t in range(100)}  # shared topics
    ledger = SQLiteLedger(tmp_path / "ledger.db", budget_per_unit=10.0, create=True)  # M=5, eps_q=2
    inner = EchoInner(epsilon=2.0, k=8)
    murag = MuRAG(inner, ledger=ledger, tau=0.6, epsilon_query=2.0, score_bounds=(-1.0, 1.0))
    rag = PrivateRAG(murag, corpus.as_retriever(lambda q: questions[q]))
    answers = [rag.answer(q, rng=i) for i, q in enumerate(questions)]
    assert all(a.epsilon == 10.0 and a.details["epsilon_query"] == 2.0 for a in answers)
    spent = spend_by_unit(ledger)
    assert max(spent.values()) <= 10.0 + 1e-9  # the total guarantee: epsilon <= 10
    assert sum(spent.values()) == pytest.approx(ledger.total_spent())
    # each topic is asked 6 or 7 times; its documents pay for 5 (M = 5), then fall back
    assert [a.text != NON_RAG for a in answers] == [t < 5 * n_topics for t in range(100)]
    # the naive baseline composes per-query costs and is capped at 5 queries under eps=10
    naive = NaiveMulti(
        EchoInner(epsilon=2.0, k=8), accountant=InMemoryCorpusAccountant(Budget(10.0))
    )
    naive_rag = PrivateRAG(naive, corpus.as_retriever(lambda q: questions[q]))
    for q in list(questions)[:5]:
        assert naive_rag.answer(q).details["cumulative_epsilon"] <= 10.0
    with pytest.raises(PrivacyBudgetExhausted):
        naive_rag.answer("question 5")


def test_concurrent_spend_of_a_unit_is_retried_without_it() -> None:
    ledger = InMemoryLedger(budget_per_unit=1.0)
    murag = MuRAG(EchoInner(epsilon=1.0, k=2), ledger=ledger, tau=0.0, epsilon_query=1.0)
    ledger.charge("another-process", ["d2"], 1.0)  # spent elsewhere after retrieval
    assert murag.answer("q", [doc(1, 0.9), doc(2, 0.8)]).text == "d1"


def test_streaming_charges_first_and_ends_with_the_answer() -> None:
    ledger = InMemoryLedger(budget_per_unit=1.0)
    murag = MuRAG(EchoInner(epsilon=1.0, k=1), ledger=ledger, tau=0.0, epsilon_query=1.0)
    items = list(murag.stream("q", [doc(1, 0.9)]))
    assert items[0] == "d1" and isinstance(items[-1], DPAnswer)
    assert items[-1].mechanism == "MuRAG"


# -- MuRAG-Ada -----------------------------------------------------------------------


def test_ada_charges_visited_bins_only_then_the_rag_step(ledger_for) -> None:  # type: ignore[no-untyped-def]
    ledger = ledger_for(30.0)
    inner = EchoInner(epsilon=10.0, k=2)
    # eps_thr = 20: the walk is almost exact (noise is 0 with probability ~1 - 4e-9)
    ada = MuRAGAda(
        inner, ledger=ledger, bins=[1.0, 0.8, 0.6, 0.4], epsilon_threshold=20.0, epsilon_rag=10.0
    )
    docs = [doc(1, 0.95), doc(2, 0.9), doc(3, 0.85), doc(4, 0.7), doc(5, 0.5), doc(6, 0.3)]
    answer = ada.answer("q", docs, rng=1)
    # bin (0.8, 1] holds 3 units > K = 2: the walk halts there; bins below are untouched
    assert answer.details["bins_visited"] == 1 and answer.details["threshold"] == 0.8
    assert answer.text == "d1,d2"
    assert spend_by_unit(ledger) == {"d1": 30.0, "d2": 30.0, "d3": 30.0}
    assert answer.guarantee == Budget(30.0)
    # units now exhausted: the next walk finds nothing there and moves on to lower bins
    again = ada.answer("q", docs, rng=2)
    assert again.details["bins_visited"] == 3 and again.text == "d4,d5"
    assert "d6" not in spend_by_unit(ledger)  # below the lowest edge: never charged


def test_ada_falls_back_to_non_rag_when_the_rag_budget_is_gone() -> None:
    ledger = InMemoryLedger(budget_per_unit=30.0)
    ada = MuRAGAda(
        EchoInner(epsilon=10.0, k=2),
        ledger=ledger,
        bins=[1.0, 0.5],
        epsilon_threshold=20.0,
        epsilon_rag=10.0,
    )
    ledger.charge("elsewhere", ["d1"], 15.0)  # d1 can pay the walk (20)? no: 15 left
    assert ada.answer("q", [doc(1, 0.9)], rng=0).text == NON_RAG
    ledger.charge("elsewhere2", ["d2"], 5.0)  # 25 left: pays the walk, not the RAG step
    assert ada.answer("q", [doc(2, 0.9)], rng=0).text == NON_RAG
    assert spend_by_unit(ledger)["d2"] == 25.0


def test_ada_assigns_a_unit_to_the_bin_of_its_best_chunk() -> None:
    ledger = InMemoryLedger(budget_per_unit=30.0)
    inner = EchoInner(epsilon=10.0, k=4)
    ada = MuRAGAda(
        inner, ledger=ledger, bins=[1.0, 0.8, 0.0], epsilon_threshold=20.0, epsilon_rag=10.0
    )
    ada.answer("q", [doc(1, 0.9, "u"), doc(2, 0.1, "u")], rng=0)
    # one unit, charged once per step although its chunks fall in two bins
    assert [(e.unit, e.cost) for e in ledger.audit_log()] == [("u", 20.0), ("u", 10.0)]


# -- NaiveMulti ----------------------------------------------------------------------


def _naive(total: Budget) -> tuple[EchoInner, NaiveMulti]:
    inner = EchoInner(epsilon=1.0, k=1, delta=1e-6)
    return inner, NaiveMulti(inner, accountant=InMemoryCorpusAccountant(total))


def test_naive_multi_is_charged_by_the_app_before_retrieval() -> None:
    inner, naive = _naive(Budget(2.0, 1e-5))
    assert naive.query_cost() == Budget(1.0, 1e-6)  # known up front, like any mechanism
    assert start_payload(naive) == {"mechanism": "NaiveMulti", "epsilon": 1.0, "delta": 1e-6}
    retrievals: list[str] = []

    def retriever(question: str, k: int) -> list[ScoredDocument]:
        retrievals.append(question)
        return [doc(1, 0.9)]

    rag = PrivateRAG(naive, HonoursK(retriever))
    assert rag.accountant is naive.accountant
    first = rag.answer("q")
    assert first.details["cumulative_epsilon"] == 1.0
    second = rag.answer("q")
    assert second.details["cumulative_epsilon"] == 2.0 and second.guarantee == Budget(1.0, 1e-6)
    with pytest.raises(PrivacyBudgetExhausted):
        rag.answer("q")
    assert len(retrievals) == len(inner.calls) == 2  # refused before retrieval
    assert naive.accountant.spent_epsilon == 2.0


def test_naive_multi_refuses_another_accountant_and_wrapping() -> None:
    inner, naive = _naive(Budget(2.0, 1e-5))
    other = InMemoryCorpusAccountant(Budget(2.0))
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        PrivateRAG(naive, HonoursK(lambda q, k: []), accountant=other)
    same = PrivateRAG(naive, HonoursK(lambda q, k: []), accountant=naive.accountant)
    assert same.accountant is naive.accountant
    with pytest.raises(ValueError, match="must not carry its own accountant"):
        NaiveMulti(naive, accountant=other)
    pure = NaiveMulti(EchoInner(epsilon=2.0, k=1), accountant=other)
    with pytest.raises(ValueError, match="must not carry its own accountant"):
        MuRAG(pure, ledger=InMemoryLedger(budget_per_unit=2.0), tau=0.5, epsilon_query=2.0)
    naive.answer("q", [doc(1, 0.9)])  # called directly it charges nothing, as every mechanism
    assert naive.accountant.spent_epsilon == 0.0 and len(inner.calls) == 1


def test_naive_multi_is_never_charged_to_another_accountant() -> None:
    inner, naive = _naive(Budget(1.0, 1e-5))
    other = InMemoryCorpusAccountant(Budget(100.0, 1e-3))
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        charge_query(naive, other)
    rag = PrivateRAG(naive, HonoursK(lambda q, k: [doc(1, 0.9)]))
    rag.accountant = other  # replaced after the app was built
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        rag.answer("q")
    assert other.spent_epsilon == 0.0 and naive.accountant.spent_epsilon == 0.0
    charge_query(naive, naive.accountant)
    with pytest.raises(PrivacyBudgetExhausted):  # NaiveMulti's own cap holds
        charge_query(naive, None)
    assert naive.accountant.spent_epsilon == 1.0 and not inner.calls


# -- end to end with the real DPSparseVote (exponential selection) -------------------


def test_end_to_end_with_dpsparsevote_falls_back_to_the_public_answer() -> None:
    pytest.importorskip("dprag_core.algorithms.dpvote")
    from fake_token_model import FakeTokenModel

    from dprag_core.algorithms.dpvote import DPSparseVote

    model = FakeTokenModel([("zebra", "zebra"), ("", "horse")])
    inner = DPSparseVote(
        model,
        m=4,
        k=1,
        epsilon=300.0,  # large test values: the vote is then (almost surely) exact
        delta=0.0,
        epsilon_token=30.0,
        selection="exponential",
        max_new_tokens=8,
    )
    ledger = InMemoryLedger(budget_per_unit=300.0)  # M = 1
    murag = MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=300.0)
    docs = [ScoredDocument(id=f"z{i}", text="the zebra", score=0.9) for i in range(4)]
    first = murag.answer("Which animal?", docs, rng=0)
    assert first.text.strip() == "zebra"
    second = murag.answer("Which animal?", docs, rng=1)  # every unit spent: public answer
    assert second.text.strip() == "horse"
    assert first.details["selection"] == "exponential" and first.guarantee == Budget(300.0)


# -- bad input -----------------------------------------------------------------------


def test_bad_input_is_refused_at_construction_and_spends_nothing() -> None:
    ledger = InMemoryLedger(budget_per_unit=2.0)
    inner = EchoInner(epsilon=1.0, k=2)
    with pytest.raises(ValueError, match="tau"):
        MuRAG(inner, ledger=ledger, tau=1.5, epsilon_query=1.0, score_bounds=(-1.0, 1.0))
    with pytest.raises(ValueError, match="tau"):
        MuRAG(inner, ledger=ledger, tau=-0.1, epsilon_query=1.0, score_bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="score_bounds"):
        MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=1.0, score_bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="M = "):
        MuRAG(EchoInner(epsilon=3.0, k=2), ledger=ledger, tau=0.5, epsilon_query=3.0)
    with pytest.raises(ValueError, match="epsilon_query"):
        MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=0.5)  # inner costs 1.0
    with pytest.raises(ValueError, match="epsilon_query"):
        MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=-1.0)
    with pytest.raises(ValueError, match="pure"):
        MuRAG(EchoInner(epsilon=1.0, k=2, delta=1e-6), ledger=ledger, tau=0.5, epsilon_query=1.0)
    with pytest.raises(ValueError, match="k must equal"):
        MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=1.0, k=3)
    with pytest.raises(TypeError, match="ledger"):
        MuRAG(inner, ledger={}, tau=0.5, epsilon_query=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="M = "):
        MuRAGAda(inner, ledger=ledger, bins=[1, 0], epsilon_threshold=1.5, epsilon_rag=1.0)
    with pytest.raises(ValueError, match="bins"):
        MuRAGAda(inner, ledger=ledger, bins=[1.0], epsilon_threshold=0.5, epsilon_rag=1.0)
    with pytest.raises(ValueError, match="epsilon_rag"):
        MuRAGAda(inner, ledger=ledger, bins=[1, 0], epsilon_threshold=0.5, epsilon_rag=0.5)
    with pytest.raises(ValueError, match="question"):
        MuRAG(inner, ledger=ledger, tau=0.5, epsilon_query=1.0).answer("", [doc(1, 0.9)])
    assert ledger.total_spent() == 0.0 and inner.calls == []


class BrokenStorage(InMemoryLedger):
    """Failure injection: the storage is lost at charge time."""

    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        raise LedgerUnavailable("the SQLite ledger is unavailable (SQLITE_IOERR)")


def test_unavailable_ledger_means_no_answer() -> None:
    inner = EchoInner(epsilon=1.0, k=1)
    murag = MuRAG(inner, ledger=BrokenStorage(budget_per_unit=1.0), tau=0.0, epsilon_query=1.0)
    with pytest.raises(LedgerUnavailable):
        murag.answer("q", [doc(1, 0.9)])
    assert inner.calls == []
    with pytest.raises(LedgerUnavailable, match="unreachable"):
        PostgresLedger(
            "postgresql://u:pw@127.0.0.1:1/x",
            budget_per_unit=1.0,
            timeouts=PostgresTimeouts(connect=1),
        )


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_DSN, reason="DPRAG_TEST_POSTGRES_DSN is unset")
def test_postgres_lost_mid_query_means_no_answer() -> None:
    import psycopg

    ledger = PostgresLedger(
        POSTGRES_DSN, budget_per_unit=1.0, table=f"t_{uuid.uuid4().hex[:16]}", create=True
    )
    try:
        inner = EchoInner(epsilon=1.0, k=1)
        murag = MuRAG(inner, ledger=ledger, tau=0.0, epsilon_query=1.0)
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(%s)", (ledger._store.conn().info.backend_pid,)
            )
        with pytest.raises(LedgerUnavailable):
            murag.answer("q", [doc(1, 0.9)])
        assert inner.calls == [] and ledger.total_spent() == 0.0
    finally:
        ledger.drop()


def test_score_bounds_take_a_score_scale() -> None:
    from dprag_core.retrieval.scores import ScoreScale

    scale = ScoreScale("unit", low=0.0, high=1.0)
    ledger = InMemoryLedger(budget_per_unit=2.0)
    murag = MuRAG(EchoInner(epsilon=1.0, k=2), ledger=ledger, tau=0.5, epsilon_query=1.0,
                  score_bounds=scale)  # fmt: skip
    assert murag.score_bounds == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"tau must be in \[0.0, 1.0\) \(score range 'unit'"):
        MuRAG(EchoInner(epsilon=1.0, k=2), ledger=ledger, tau=1.5, epsilon_query=1.0,
              score_bounds=scale)  # fmt: skip


@pytest.mark.parametrize(
    ("bins", "bounds", "match"),
    [
        ([1.0, float("nan")], (-1.0, 1.0), "bins must be a finite number"),
        ([1.5, 0.5], (-1.0, 1.0), r"max\(bins\) must be <= 1.0"),
        ([0.5, -2.0], (-1.0, 1.0), r"min\(bins\) must be in \[-1.0, 1.0\)"),
        ([1.0, 0.5, -0.1], (0.0, 1.0), r"min\(bins\) must be in \[0.0, 1.0\)"),
        ([0.5, 0.5], (-1.0, 1.0), "at least 2 distinct"),
    ],
)
def test_murag_ada_bins_lie_in_the_score_range(
    bins: list[float], bounds: tuple[float, float], match: str
) -> None:
    ledger = InMemoryLedger(budget_per_unit=10.0)
    with pytest.raises(ValueError, match=match):
        MuRAGAda(EchoInner(epsilon=2.0, k=2), ledger=ledger, bins=bins, epsilon_threshold=1.0,
                 epsilon_rag=2.0, score_bounds=bounds)  # fmt: skip
    ada = MuRAGAda(EchoInner(epsilon=2.0, k=2), ledger=ledger, bins=[0.0, 1.0, 0.5],
                   epsilon_threshold=1.0, epsilon_rag=2.0, score_bounds=bounds)  # fmt: skip
    assert ada.edges == (1.0, 0.5, 0.0) and ada.min_score() == 0.0


def test_selection_steps_refuse_a_non_finite_tau() -> None:
    ledger = InMemoryLedger(budget_per_unit=10.0)
    for tau in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tau must be a finite number"):
            ledger_filter([doc(1, 0.9)], ledger=ledger, tau=tau, cost=1.0, k=1, query_id="q")
        with pytest.raises(ValueError, match="tau must be a finite number"):
            units_above([doc(1, 0.9)], tau, (-1.0, 1.0))
    assert ledger.total_spent() == 0.0
