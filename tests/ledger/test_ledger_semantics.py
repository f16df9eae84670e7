"""Ledger semantics, identical on the in-memory, SQLite and PostgreSQL backends."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ledger_support import POSTGRES_DSN, LedgerFactory, needs_postgres, replay

from dprag_core.accounting.ledger import (
    ChargeResult,
    InMemoryLedger,
    LedgerOutcomeUnknown,
    LedgerUnavailable,
    PostgresLedger,
    PostgresTimeouts,
    SQLiteLedger,
)
from dprag_core.accounting.stores.amounts import SCALE, to_units


def test_unknown_units_start_with_the_budget(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=2.5)
    assert led.budget_per_unit == 2.5
    assert led.remaining(["a", "b"]) == {"a": 2.5, "b": 2.5}
    assert led.total_spent() == 0.0
    assert list(led.audit_log()) == []


def test_charge_is_all_or_nothing(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    assert led.charge("q1", ["a", "b"], 0.7) == ChargeResult(True, ())
    result = led.charge("q2", ["c", "b", "a", "d"], 0.5)
    assert not result.granted
    assert result.lacking == ("a", "b")
    # nothing changed: c and d untouched, a and b unchanged, no audit rows for q2
    assert led.remaining(["a", "b", "c", "d"]) == pytest.approx(
        {"a": 0.3, "b": 0.3, "c": 1.0, "d": 1.0}
    )
    assert {e.query_id for e in led.audit_log()} == {"q1"}
    assert led.charge("q3", ["c", "d"], 0.5).granted


def test_exact_arithmetic_100_charges_of_a_tenth_fit_in_ten(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=10.0)
    assert all(led.charge(f"q{i}", ["doc"], 0.1).granted for i in range(100))
    assert led.remaining(["doc"]) == {"doc": 0.0}
    assert not led.charge("q100", ["doc"], 0.1).granted
    assert not led.charge("q101", ["doc"], 1e-12).granted
    assert led.charge("q102", ["doc"], 0.0).granted  # a zero cost always fits


def test_exact_arithmetic_three_thirds_fit_in_one(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=3 * (1 / 3))
    assert all(led.charge(f"t{i}", ["x"], 1 / 3).granted for i in range(3))
    assert led.remaining(["x"])["x"] <= 1e-12  # at most one pico-epsilon of rounding left


def test_audit_log_replays_to_the_remaining_budget(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    led.charge("q1", ["a", "b", "a"], 0.25)  # duplicates are charged once
    led.charge("q2", ["b", "c"], 0.5)
    led.charge("q3", ["b"], 0.5)  # refused: b has 0.25 left
    log = list(led.audit_log())
    assert [(e.query_id, e.unit, e.cost) for e in log] == [
        ("q1", "a", 0.25),
        ("q1", "b", 0.25),
        ("q2", "b", 0.5),
        ("q2", "c", 0.5),
    ]
    assert all(e.time > 1.6e9 for e in log)
    spent = replay(log)
    left = led.remaining(spent)
    assert all(spent[u] == SCALE - round(left[u] * SCALE) for u in spent)
    assert led.total_spent() == pytest.approx(1.5)


def test_active_filters_by_min_cost_in_input_order(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    led.charge("q1", ["b"], 0.6)
    assert led.active(["c", "b", "a", "c"], 0.5) == ["c", "a"]
    assert led.active(["b"], 0.4) == ["b"]
    assert led.active([], 0.4) == []


def test_empty_charge_is_granted_and_records_nothing(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    assert led.charge("q", [], 5.0).granted
    assert list(led.audit_log()) == []


def test_repeated_units_in_one_charge_are_refused_by_every_backend(
    make_ledger: LedgerFactory,
) -> None:
    """The backend itself, not only ``charge`` (which de-duplicates), refuses a repeated
    unit: one debit and one audit row per unit, so the audit log is the budget's record."""
    led = make_ledger(budget_per_unit=1.0)
    with pytest.raises(ValueError, match="distinct units"):
        led._charge("q", ["a"] * 100, to_units("cost", 0.6))
    assert list(led.audit_log()) == [] and led.remaining(["a"]) == {"a": 1.0}
    assert led.status().total_spent == 0.0 and led.total_spent() == 0.0
    assert led.charge("q", ["a"] * 100, 0.6).granted  # de-duplicated: one debit, one row
    assert [e.unit for e in led.audit_log()] == ["a"] and led.total_spent() == 0.6


@pytest.mark.parametrize("cost", [-0.1, float("nan"), float("inf")])
def test_bad_cost_is_refused_and_spends_nothing(make_ledger: LedgerFactory, cost: float) -> None:
    led = make_ledger(budget_per_unit=1.0)
    with pytest.raises(ValueError, match="cost"):
        led.charge("q", ["a"], cost)
    assert led.remaining(["a"]) == {"a": 1.0}
    assert list(led.audit_log()) == []


@pytest.mark.parametrize("budget", [0.0, -1.0, float("inf"), 1e7])
def test_bad_budget_per_unit(make_ledger: LedgerFactory, budget: float) -> None:
    with pytest.raises(ValueError, match="budget_per_unit"):
        make_ledger(budget_per_unit=budget)


def test_bad_query_id_and_units(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    with pytest.raises(ValueError, match="query_id"):
        led.charge(" ", ["a"], 0.1)
    with pytest.raises(TypeError, match="units"):
        led.charge("q", "abc", 0.1)
    with pytest.raises(ValueError, match="units"):
        led.charge("q", ["a", ""], 0.1)


def test_lacking_units_never_reach_reprs(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    led.charge("q1", ["secret-patient-42"], 1.0)
    result = led.charge("q2", ["secret-patient-42"], 1.0)
    assert result.lacking == ("secret-patient-42",)
    assert "secret-patient-42" not in repr(result)
    assert "secret-patient-42" not in repr(led)
    assert "secret-patient-42" not in repr(next(led.audit_log()))


def test_threads_never_overspend(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    granted: list[int] = []

    def work(worker: int) -> None:
        mine = sum(led.charge(f"w{worker}q{i}", ["x", f"y{i % 3}"], 0.1).granted for i in range(20))
        granted.append(mine)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 10  # x holds exactly ten charges of 0.1
    assert max(replay(list(led.audit_log())).values()) <= SCALE


def test_persistent_backends_survive_reopening(make_ledger: LedgerFactory) -> None:
    if make_ledger.kind == "memory":  # type: ignore[attr-defined]
        pytest.skip("the in-memory ledger forgets by design")
    first = make_ledger(budget_per_unit=1.0)
    first.charge("q1", ["a"], 0.75)
    first.close()
    again = make_ledger(budget_per_unit=1.0)
    assert again.remaining(["a"]) == {"a": 0.25}
    assert [e.query_id for e in again.audit_log()] == ["q1"]
    with pytest.raises(ValueError, match="budget_per_unit"):
        make_ledger(budget_per_unit=2.0)


def test_sqlite_audit_log_is_append_only(tmp_path: Path) -> None:
    import sqlite3

    SQLiteLedger(tmp_path / "l.db", budget_per_unit=1.0, create=True).charge("q", ["a"], 0.5)
    conn = sqlite3.connect(tmp_path / "l.db")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE audit SET cost = 0")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM audit")


def test_sqlite_refuses_memory_and_unopenable_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path"):
        SQLiteLedger(":memory:", budget_per_unit=1.0, create=True)
    with pytest.raises(LedgerUnavailable) as info:
        SQLiteLedger(tmp_path / "missing-dir" / "l.db", budget_per_unit=1.0, create=True)
    assert "missing-dir" in str(info.value)  # the error names the store (issue 26.2)


def test_unreachable_postgres_is_a_clear_error_without_secrets() -> None:
    dsn = "postgresql://alice:hunter2@127.0.0.1:1/db"
    with pytest.raises(LedgerUnavailable, match="unreachable") as info:
        PostgresLedger(dsn, budget_per_unit=1.0, timeouts=PostgresTimeouts(connect=2))
    assert "hunter2" not in str(info.value) and "alice" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@needs_postgres
@pytest.mark.postgres
def test_postgres_server_lost_mid_session_is_unavailable() -> None:
    import psycopg

    led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table="t_lost_session", create=True)
    try:
        pid = led._store.conn().info.backend_pid
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(LedgerOutcomeUnknown, match="unknown"):
            led.charge("q", ["a"], 0.5)
        assert led.remaining(["a"]) == {"a": 1.0}  # reconnects; nothing was charged
        assert led.charge("q", ["a"], 0.5).granted  # the retry with the same id charges once
    finally:
        led.drop()


def test_in_memory_repr() -> None:
    assert repr(InMemoryLedger(budget_per_unit=1.0)) == "InMemoryLedger(budget_per_unit=1.0)"


BAD_IDS = [
    pytest.param("\ud800", "UTF-8", id="lone-surrogate"),
    pytest.param("doc\x00tail", "NUL", id="nul"),
    pytest.param("x" * 120_000, "1024", id="120kB"),
    pytest.param("é" * 513, "1024", id="1026-utf8-bytes"),
    pytest.param("   ", "non-empty", id="blank"),
]


@pytest.mark.parametrize(("bad", "word"), BAD_IDS)
def test_one_id_policy_for_units_and_query_ids(
    make_ledger: LedgerFactory, bad: str, word: str
) -> None:
    led = make_ledger(budget_per_unit=1.0)
    with pytest.raises(ValueError, match=word) as unit_error:
        led.charge("q1", ["fine", bad], 0.5)
    assert "units" in str(unit_error.value) and bad not in str(unit_error.value)
    with pytest.raises(ValueError, match="query_id"):
        led.charge(bad, ["fine"], 0.5)
    with pytest.raises(ValueError, match="units"):
        led.remaining([bad])
    assert list(led.audit_log()) == [] and led.remaining(["fine"]) == {"fine": 1.0}
    assert led.charge("q2", ["x" * 1024], 0.5).granted  # the documented maximum works


def test_a_retried_query_id_charges_once(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    assert led.charge("q1", ["b", "a"], 0.5).granted
    with pytest.raises(ValueError, match="query_id"):  # a query id buys at most one release
        led.charge("q1", ["a", "b", "a"], 0.5)  # (a retry needs an unknown outcome first)
    assert led.remaining(["a", "b"]) == {"a": 0.5, "b": 0.5}
    assert len(list(led.audit_log())) == 2
    for units, cost in ((["a"], 0.5), (["a", "b"], 0.25), (["a", "b", "c"], 0.5)):
        with pytest.raises(ValueError, match="query_id"):
            led.charge("q1", units, cost)
    assert led.remaining(["a", "b", "c"]) == {"a": 0.5, "b": 0.5, "c": 1.0}


def test_units_that_nul_would_have_merged_stay_apart(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    led.charge("q1", ["doc"], 1.0)
    with pytest.raises(ValueError, match="NUL"):
        led.charge("q2", ["doc\x00other"], 1.0)
    assert led.remaining(["doc"]) == {"doc": 0.0}


def test_a_partly_missing_sqlite_ledger_is_not_recreated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "l.db"
    SQLiteLedger(path, budget_per_unit=1.0, create=True).charge("q1", ["a"], 1.0)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE units")  # recreating it would give "a" a full budget again
    with pytest.raises(LedgerUnavailable, match="incomplete"):
        SQLiteLedger(path, budget_per_unit=1.0, create=True)
