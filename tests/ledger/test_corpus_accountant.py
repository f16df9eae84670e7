"""The durable corpus budget: the same contract on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, needs_postgres

from dprag_core.accounting import (
    InMemoryCorpusAccountant,
    PostgresCorpusAccountant,
    SQLiteCorpusAccountant,
)
from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, SQLiteLedger
from dprag_core.budget import Budget, PrivacyBudgetExhausted

Factory = Callable[..., DurableCorpusAccountant]


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres])]
)
def make_corpus(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """``make_corpus(total=...)`` opens (or re-opens) this test's corpus budget."""
    table = f"c_{uuid.uuid4().hex[:16]}"
    opened: list[DurableCorpusAccountant] = []

    def factory(*, total: Budget) -> DurableCorpusAccountant:
        acc: DurableCorpusAccountant
        if request.param == "sqlite":
            acc = SQLiteCorpusAccountant(tmp_path / "budget.db", total=total, create=True)
        else:
            acc = PostgresCorpusAccountant(POSTGRES_DSN, total=total, table=table, create=True)
        opened.append(acc)
        return acc

    yield factory
    for acc in opened:
        acc.close()
    if request.param == "postgres":
        drop_postgres_tables(table)


def test_charges_add_up_exactly_and_refusals_record_nothing(make_corpus: Factory) -> None:
    acc = make_corpus(total=Budget(10.0, 1e-6))
    for i in range(100):
        acc.charge(Budget(0.1, 1e-8), query_id=f"q{i}")
    assert (acc.spent_epsilon, acc.queries) == (10.0, 100)
    assert acc.spent_delta == pytest.approx(1e-6, rel=1e-15)
    assert not acc.can_afford(Budget(1e-12))
    with pytest.raises(PrivacyBudgetExhausted, match=r"epsilon=0\.1"):
        acc.charge(Budget(0.1), query_id="over")
    assert acc.queries == 100
    assert repr(acc.remaining) == "Budget(epsilon=0.0, delta=0.0)"  # exhausted reads 0


def test_delta_is_exact_and_bounded_too(make_corpus: Factory) -> None:
    acc = make_corpus(total=Budget(100.0, 3e-7))
    for i in range(3):
        acc.charge(Budget(1.0, 1e-7), query_id=f"q{i}")
    with pytest.raises(PrivacyBudgetExhausted):
        acc.charge(Budget(1.0, 1e-18), query_id="one-more-atto-delta")
    acc.charge(Budget(1.0), query_id="pure")  # a pure-DP query still fits
    assert acc.queries == 4 and acc.remaining.delta == 0.0


def test_a_retry_with_the_same_query_id_is_recorded_once(make_corpus: Factory) -> None:
    acc = make_corpus(total=Budget(1.0))
    acc.charge(Budget(0.6), query_id="q-1")
    with pytest.raises(ValueError, match="query_id"):  # a query id buys at most one release
        acc.charge(Budget(0.6), query_id="q-1")  # (a retry needs an unknown outcome first)
    assert (acc.spent_epsilon, acc.queries) == (0.6, 1)
    with pytest.raises(ValueError, match="query_id"):
        acc.charge(Budget(0.1), query_id="q-1")  # the same id for another cost
    assert acc.spent_epsilon == 0.6


def test_without_an_id_every_charge_is_a_new_query(make_corpus: Factory) -> None:
    acc = make_corpus(total=Budget(1.0))
    acc.charge(Budget(0.25))
    acc.charge(Budget(0.25))
    assert acc.queries == 2


def test_the_budget_survives_reopening_and_is_shared(make_corpus: Factory) -> None:
    first = make_corpus(total=Budget(4.0, 1e-6))
    second = make_corpus(total=Budget(4.0, 1e-6))  # another process, or after a restart
    first.charge(Budget(3.0))
    with pytest.raises(PrivacyBudgetExhausted):
        second.charge(Budget(3.0))
    first.close()
    again = make_corpus(total=Budget(4.0, 1e-6))
    assert (again.spent_epsilon, again.queries) == (3.0, 1)
    assert again.remaining == Budget(1.0, 1e-6)


def test_a_store_with_another_total_is_refused(make_corpus: Factory) -> None:
    make_corpus(total=Budget(4.0, 1e-6)).close()
    with pytest.raises(ValueError, match="total"):
        make_corpus(total=Budget(5.0, 1e-6))
    with pytest.raises(ValueError, match="total"):
        make_corpus(total=Budget(4.0))


@pytest.mark.parametrize(
    ("query_id", "kind", "word"),
    [
        ("", ValueError, "query_id"),
        ("a\x00b", ValueError, "NUL"),
        ("\ud800", ValueError, "UTF-8"),
        ("x" * 1025, ValueError, "1024"),
        (7, TypeError, "query_id"),
    ],
)
def test_bad_query_ids_spend_nothing(
    make_corpus: Factory, query_id: object, kind: type[Exception], word: str
) -> None:
    acc = make_corpus(total=Budget(1.0))
    with pytest.raises(kind, match=word):
        acc.charge(Budget(0.5), query_id=query_id)  # type: ignore[arg-type]
    assert acc.queries == 0 and acc.spent_epsilon == 0.0


@pytest.mark.parametrize("cost", [0.5, Budget(1e-13), Budget(0.1, 1e-20), Budget(2e6)])
def test_bad_costs_spend_nothing(make_corpus: Factory, cost: object) -> None:
    acc = make_corpus(total=Budget(1.0))
    with pytest.raises((TypeError, ValueError), match="cost"):
        acc.charge(cost)  # type: ignore[arg-type]
    assert acc.queries == 0


def test_sqlite_shares_a_file_with_the_ledger_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "dprag.db"
    ledger = SQLiteLedger(path, budget_per_unit=1.0, create=True)
    acc = SQLiteCorpusAccountant(path, total=Budget(2.0), create=True)
    ledger.charge("q1", ["a"], 0.5)
    acc.charge(Budget(0.5), query_id="q1")
    assert ledger.total_spent() == 0.5 and acc.spent_epsilon == 0.5
    for name in ("dprag.db", "dprag.db-wal", "dprag.db-shm"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name


def _read_only(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``path`` read-only for this process (root ignores modes: then pretend)."""
    path.chmod(0o400)
    if os.access(path, os.W_OK):  # running as root
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: mode != os.W_OK and real(p, mode))


def test_sqlite_read_only_files_open_for_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.db"
    with SQLiteCorpusAccountant(path, total=Budget(2.0), create=True) as acc:
        acc.charge(Budget(0.5), query_id="q1")
    with SQLiteLedger(path, budget_per_unit=1.0, create=True) as led:
        led.charge("q1", ["a"], 0.25)
    _read_only(path, monkeypatch)
    ro = SQLiteCorpusAccountant(path, total=Budget(2.0))
    assert (ro.spent_epsilon, ro.queries) == (0.5, 1)
    with pytest.raises(LedgerUnavailable, match="read-only"):
        ro.charge(Budget(0.5))
    ro_ledger = SQLiteLedger(path, budget_per_unit=1.0)
    assert ro_ledger.remaining(["a"]) == {"a": 0.75}
    assert [e.query_id for e in ro_ledger.audit_log()] == ["q1"]
    with pytest.raises(LedgerUnavailable, match="read-only"):
        ro_ledger.charge("q2", ["a"], 0.25)


def test_partly_missing_sqlite_schema_is_a_clear_error(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "b.db"
    SQLiteCorpusAccountant(path, total=Budget(2.0), create=True).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE corpus_budget")
    with pytest.raises(LedgerUnavailable, match=r"incomplete.*corpus_budget"):
        SQLiteCorpusAccountant(path, total=Budget(2.0), create=True)


def test_in_memory_backend_is_the_named_exception() -> None:
    acc = InMemoryCorpusAccountant(Budget(1.0))
    acc.charge(Budget(1.0))
    with pytest.raises(PrivacyBudgetExhausted):
        acc.charge(Budget(0.1))


def test_reprs_hold_no_dsn(tmp_path: Path) -> None:
    acc = SQLiteCorpusAccountant(tmp_path / "b.db", total=Budget(1.0), create=True)
    assert repr(acc).startswith("SQLiteCorpusAccountant(path=")


def test_a_writer_queue_held_too_long_is_a_bounded_refusal(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "b.db"
    acc = SQLiteCorpusAccountant(path, total=Budget(2.0), busy_timeout=0.3, create=True)
    with open(f"{path}-lock", "w") as holder:  # another writer holds the queue
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(LedgerUnavailable, match="busy_timeout"):
            acc.charge(Budget(0.5), query_id="q1")
    assert acc.queries == 0
    acc.charge(Budget(0.5), query_id="q1")  # the queue is free again
    assert stat.S_IMODE(os.stat(f"{path}-lock").st_mode) == 0o600


def test_private_rag_charges_the_durable_budget_before_retrieval(tmp_path: Path) -> None:
    from dprag_core import PrivateRAG, ScoredDocument
    from dprag_core.algorithms.base import Mechanism
    from dprag_core.answers import DPAnswer
    from dprag_core.retrieval.capabilities import HonoursK

    class Fixed(Mechanism):
        name = "Fixed"

        def candidates_needed(self) -> int:
            return 1

        def query_cost(self) -> Budget:
            return Budget(1.5, 1e-7)

        def answer(self, question: str, docs: object, *, rng: object = None) -> DPAnswer:
            return DPAnswer("ok", self.query_cost(), self.name, {"stop_reason": "eos"})

    retrieved: list[str] = []

    @HonoursK
    def retriever(question: str, k: int) -> list[ScoredDocument]:
        retrieved.append(question)
        return [ScoredDocument(id="d", text="private", score=0.5)]

    path = tmp_path / "budget.db"
    total = Budget(3.0, 1e-6)
    SQLiteCorpusAccountant(path, total=total, create=True).close()  # the operator's step
    worker_a = PrivateRAG(Fixed(), retriever, accountant=SQLiteCorpusAccountant(path, total=total))
    worker_b = PrivateRAG(Fixed(), retriever, accountant=SQLiteCorpusAccountant(path, total=total))
    worker_a.answer("q1")
    worker_b.answer("q2")  # another process (or after a restart) sees the same budget
    with pytest.raises(PrivacyBudgetExhausted):
        worker_a.answer("q3")
    assert retrieved == ["q1", "q2"]  # the refused query retrieved nothing
    assert SQLiteCorpusAccountant(path, total=total).queries == 2
