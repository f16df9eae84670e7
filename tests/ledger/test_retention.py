"""Retention: ``prune`` before a public watermark keeps every total and still refuses every
pruned id; the append-only guards let a row go only below the watermark; the views read the
last rows by index and take ``--timeout``."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, fails_in_one_line, needs_postgres

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger, SQLiteLedger
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.budget import Budget
from dprag_core.cli import main


def _stores(path: Path) -> tuple[SQLiteCorpusAccountant, SQLiteLedger]:
    acc = SQLiteCorpusAccountant(path, total=Budget(10.0, 1e-5), create=True)
    led = SQLiteLedger(path, budget_per_unit=5.0, create=True)
    return acc, led


def test_pruned_ids_stay_refused_and_totals_stay_exact(tmp_path: Path) -> None:
    acc, led = _stores(tmp_path / "b.db")
    for i in range(6):
        acc.charge(Budget(0.5, 1e-6), query_id=f"old-{i}")
        assert led.claim(f"claimed-{i}")
        assert led.charge(f"old-{i}", ["a", "b"], 0.25).granted
    watermark = time.time()
    time.sleep(0.01)
    acc.charge(Budget(0.5, 1e-6), query_id="new")
    assert led.charge("new", ["a"], 0.25).granted
    before = (acc.status(), led.status(), led.remaining(["a", "b"]))
    assert acc.prune(before=watermark) == 6
    assert led.prune(before=watermark) == 12  # six claims, six charged ids
    status_acc, status_led = acc.status(), led.status()
    assert (status_acc.spent_epsilon, status_acc.queries) == (
        before[0].spent_epsilon,
        before[0].queries,
    )
    assert (status_led.queries, status_led.total_spent) == (
        before[1].queries,
        before[1].total_spent,
    )
    assert led.remaining(["a", "b"]) == before[2]
    assert [r.query_id for r in acc.history()] == ["new"]
    assert {r.query_id for r in led.audit_log()} == {"new"}
    again = SQLiteLedger(tmp_path / "b.db")  # another process, after a restart
    for i in range(6):
        with pytest.raises(QueryIdReused):
            again.claim(f"claimed-{i}")
        with pytest.raises(QueryIdReused):
            again.claim(f"old-{i}")
        with pytest.raises(QueryIdReused):
            again.charge(f"old-{i}", ["z"], 0.25)
        with pytest.raises(QueryIdReused):
            SQLiteCorpusAccountant(tmp_path / "b.db").charge(Budget(0.1), query_id=f"old-{i}")
    assert again.claim("fresh") and acc.charge(Budget(0.1), query_id="fresh")


def test_the_watermark_only_moves_forward_and_never_past_now(tmp_path: Path) -> None:
    acc, led = _stores(tmp_path / "b.db")
    now = time.time()
    for store in (acc, led):
        store.prune(before=now - 10)
        with pytest.raises(ValueError, match="later than the store's watermark"):
            store.prune(before=now - 20)
        with pytest.raises(ValueError, match="in the future"):
            store.prune(before=now + 3600)
        with pytest.raises(ValueError, match="finite UNIX time"):
            store.prune(before=float("nan"))


def test_the_append_only_guards_let_rows_go_only_below_the_watermark(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    acc, led = _stores(path)
    acc.charge(Budget(0.5), query_id="q1")
    assert led.claim("c1") and led.charge("q1", ["a"], 0.5).granted
    conn = sqlite3.connect(path, isolation_level=None)
    refused = [
        "DELETE FROM queries",
        "UPDATE queries SET at = 0",
        "DELETE FROM audit",
        "UPDATE audit SET cost = 0",
        "DELETE FROM corpus_charges",
        "UPDATE corpus_charges SET epsilon = 0",
        "UPDATE corpus_budget SET spent_epsilon = 0",
        "UPDATE corpus_budget SET total_epsilon = total_epsilon * 2",
        "UPDATE corpus_budget SET watermark = -1",
        "UPDATE meta SET value = 0 WHERE key = 'spent'",
        "UPDATE meta SET value = value * 2 WHERE key = 'budget'",
        "UPDATE meta SET value = -1 WHERE key = 'watermark'",
    ]
    for statement in refused:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(statement)
    led.prune(before=time.time())
    acc.prune(before=time.time())
    for table in ("pruned", "corpus_pruned"):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(f"DELETE FROM {table}")
    conn.close()
    assert acc.spent_epsilon == 0.5 and led.remaining(["a"]) == {"a": 4.5}


def test_prune_and_the_views_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "b.db"
    acc, led = _stores(path)
    for i in range(30):
        acc.charge(Budget(0.1), query_id=f"q{i:02d}")
        assert led.charge(f"q{i:02d}", ["a", "b"], 0.1).granted
    where = ["--sqlite", str(path), "--timeout", "2"]
    assert main(["ledger", "history", *where, "--table", "corpus", "--last", "3"]) == 0
    shown = capsys.readouterr().out
    assert "the last 3 rows" in shown and [line.split()[1] for line in shown.splitlines()[1:]] == [
        "q27",
        "q28",
        "q29",
    ]
    assert main(["ledger", "history", *where, "--ledger", "--last", "1"]) == 0
    assert "q29" in capsys.readouterr().out
    assert main(["ledger", "check", *where]) == 0
    assert "every page passed the integrity check" in capsys.readouterr().out
    fails_in_one_line(["ledger", "prune", *where, "--before", "2026-01-01T00:00:00"])
    assert main(["ledger", "prune", *where, "--before", "2000-01-01T00:00:00Z"]) == 0
    assert "pruned 0 query ids" in capsys.readouterr().out
    assert main(["ledger", "prune", *where, "--before", str(time.time())]) == 0
    out = capsys.readouterr().out
    assert out.count("pruned 30 query ids") == 2
    message = fails_in_one_line(["ledger", "prune", *where, "--before", "2001-01-01T00:00:00Z"])
    assert "later than the store's watermark" in message
    assert main(["ledger", "status", *where, "--json"]) == 0
    assert '"queries": 30' in capsys.readouterr().out
    with pytest.raises(QueryIdReused):
        led.claim("q05")


def test_the_timeout_bounds_a_view_behind_a_held_lock(tmp_path: Path) -> None:
    """``--timeout`` is the wait for the file's locks: a writer holding the queue makes
    ``prune`` give up after it, in one line, with nothing pruned."""
    path = tmp_path / "b.db"
    acc, _ = _stores(path)
    acc.charge(Budget(0.1), query_id="q1")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        message = fails_in_one_line(
            ["ledger", "prune", "--sqlite", str(path), "--timeout", "0.5", "--before", "1000"]
        )
        assert time.monotonic() - began < 30 and str(path) in message
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r.query_id for r in acc.history()] == ["q1"]


@pytest.mark.postgres
@needs_postgres
def test_a_postgres_ledger_keeps_its_query_count_exactly_across_a_migration() -> None:
    """``status().queries`` reads 64 counter rows, never the audit log: granted charges
    count once, refusals, retries and claims not; a version-4 store's owner migration
    counts its audit log."""
    import psycopg

    table = f"t_{uuid.uuid4().hex[:16]}"
    try:
        led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
        for i in range(40):
            assert led.charge(f"q{i}", [f"u{i % 3}", "w"], 0.02).granted
        assert led.charge("q0", ["u0", "w"], 0.02, retry=True).granted  # a retry: no count
        assert not led.charge("big", ["w"], 0.5).granted  # refused: no count
        assert led.claim("only-claimed")
        assert led.status().queries == 40
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # as version 4 left it
            conn.execute(f"DELETE FROM dprag.{table}_meta WHERE key LIKE 'queries:%'")
            conn.execute(f"UPDATE dprag.{table}_meta SET value = 4 WHERE key = 'schema'")
        with pytest.raises(LedgerUnavailable, match="outdated"):
            PostgresLedger(POSTGRES_DSN, table=table)
        migrated = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
        assert migrated.status().queries == 40
        assert migrated.charge("q40", ["u9"], 0.02).granted
        assert migrated.status().queries == 41
    finally:
        drop_postgres_tables(table)


@pytest.mark.postgres
@needs_postgres
def test_postgres_prune_keeps_totals_refuses_pruned_ids_and_guards_newer_rows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SQLite semantics on PostgreSQL: the same watermark, the same refusals, the same
    totals; the triggers let a log row go only below the watermark, never a digest."""
    import psycopg

    table = f"t_{uuid.uuid4().hex[:16]}"
    try:
        acc = PostgresCorpusAccountant(
            POSTGRES_DSN, total=Budget(10.0, 1e-5), table=f"{table}_c", create=True
        )
        led = PostgresLedger(POSTGRES_DSN, budget_per_unit=5.0, table=table, create=True)
        for i in range(6):
            acc.charge(Budget(0.5, 1e-6), query_id=f"old-{i}")
            assert led.claim(f"claimed-{i}")
            assert led.charge(f"old-{i}", ["a", "b"], 0.25).granted
        watermark = time.time()
        time.sleep(0.01)
        acc.charge(Budget(0.5, 1e-6), query_id="new")
        assert led.claim("new-claim") and led.charge("new", ["a"], 0.25).granted
        before = (acc.status(), led.status(), led.remaining(["a", "b"]))
        assert acc.prune(before=watermark) == 6
        assert led.prune(before=watermark) == 12  # six claims, six charged ids
        assert (acc.status().spent_epsilon, acc.status().queries) == (
            before[0].spent_epsilon,
            before[0].queries,
        )
        assert (led.status().queries, led.status().total_spent) == (
            before[1].queries,
            before[1].total_spent,
        )
        assert led.remaining(["a", "b"]) == before[2]
        assert [r.query_id for r in acc.history()] == ["new"]
        assert {e.query_id for e in led.audit_log()} == {"new"}
        again = PostgresLedger(POSTGRES_DSN, table=table)  # another process
        for i in range(6):
            for qid in (f"claimed-{i}", f"old-{i}"):
                with pytest.raises(QueryIdReused):
                    again.claim(qid)
            with pytest.raises(QueryIdReused):
                again.charge(f"old-{i}", ["z"], 0.25)
            with pytest.raises(QueryIdReused):
                acc.charge(Budget(0.1), query_id=f"old-{i}")
        assert again.claim("fresh") and acc.charge(Budget(0.1), query_id="fresh")
        with pytest.raises(ValueError, match="later than the store's watermark"):
            led.prune(before=watermark - 10)
        with pytest.raises(ValueError, match="in the future"):
            acc.prune(before=time.time() + 3600)
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            for statement in (  # rows at or after the watermark, and every digest
                f"DELETE FROM dprag.{table}_queries",
                f"DELETE FROM dprag.{table}_audit",
                f"UPDATE dprag.{table}_audit SET cost = 0",
                f"DELETE FROM dprag.{table}_c_charges",
                f"DELETE FROM dprag.{table}_pruned",
                f"DELETE FROM dprag.{table}_c_pruned",
                f"UPDATE dprag.{table}_pruned SET digest = 0",
                f"TRUNCATE dprag.{table}_pruned",
            ):
                with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                    conn.execute(statement)
            assert conn.execute(f"SELECT count(*) FROM dprag.{table}_pruned").fetchone() == (12,)
        monkeypatch.setenv("DPRAG_LEDGER_DSN", POSTGRES_DSN)
        assert main(["ledger", "prune", "--table", table, "--before", str(time.time())]) == 0
        assert "pruned 3 query ids" in capsys.readouterr().out  # new, new-claim, fresh
        with pytest.raises(QueryIdReused):
            again.claim("new-claim")
    finally:
        drop_postgres_tables(table)
        drop_postgres_tables(f"{table}_c")


@pytest.mark.postgres
@needs_postgres
def test_a_version_5_postgres_store_is_outdated_until_its_owner_migrates_it() -> None:
    """A store made before retention: serving roles are refused until ``init``, which adds
    the digests and the watermark; what it held stays, and then it prunes."""
    import psycopg

    table = f"t_{uuid.uuid4().hex[:16]}"
    try:
        led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
        assert led.claim("c0") and led.charge("q0", ["a"], 0.25).granted
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # as version 5 left it
            conn.execute(f"DROP TABLE dprag.{table}_pruned")
            conn.execute(f"DELETE FROM dprag.{table}_meta WHERE key = 'watermark'")
            conn.execute(f"UPDATE dprag.{table}_meta SET value = 5 WHERE key = 'schema'")
        with pytest.raises(LedgerUnavailable, match="outdated"):
            PostgresLedger(POSTGRES_DSN, table=table)
        migrated = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
        assert migrated.remaining(["a"]) == {"a": 0.75} and migrated.status().queries == 1
        assert migrated.prune(before=time.time()) == 2
        for qid in ("c0", "q0"):
            with pytest.raises(QueryIdReused):
                migrated.claim(qid)
    finally:
        drop_postgres_tables(table)
