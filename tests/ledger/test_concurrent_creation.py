"""N processes creating (or migrating) the same store at once: all succeed, one creates.

Before: 8 processes opening a new PostgreSQL store with create=True failed 58
times in 80, with raw psycopg errors (DuplicateTable) or a wrong "incomplete:
restore it from a backup" (one statement per table saw another session's
commit half-way).
"""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, needs_postgres

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger, SQLiteLedger
from dprag_core.accounting.stores.sqlite import busy
from dprag_core.budget import Budget

PROCS = 8

pytestmark = pytest.mark.skipif(
    "fork" not in mp.get_all_start_methods(), reason="needs the fork start method (POSIX)"
)


def _open(kind: str, what: str, target: str) -> Any:
    if kind == "sqlite":
        if what == "corpus":
            return SQLiteCorpusAccountant(target, total=Budget(1.0), create=True)
        return SQLiteLedger(target, budget_per_unit=1.0, create=True)
    if what == "corpus":
        return PostgresCorpusAccountant(POSTGRES_DSN, total=Budget(1.0), table=target, create=True)
    return PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=target, create=True)


def _all_at_once(kind: str, what: str, target: str) -> list[str]:
    """Open with create=True in PROCS processes released together; each one's outcome."""
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(PROCS), ctx.Queue()

    def work(i: int) -> None:
        barrier.wait()
        try:
            store = _open(kind, what, target)
            store.charge(Budget(0.1), query_id=f"q{i}") if what == "corpus" else store.charge(
                f"q{i}", [f"u{i}"], 0.1
            )
            results.put("ok")
        except Exception as exc:  # reported, not raised: the parent counts them
            results.put(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")

    procs = [ctx.Process(target=work, args=(i,)) for i in range(PROCS)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    return outcomes


@pytest.mark.parametrize(
    "kind", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres])]
)
@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_eight_processes_creating_one_store_all_succeed(
    kind: str, what: str, tmp_path: Path
) -> None:
    target = str(tmp_path / "b.db") if kind == "sqlite" else f"t_{uuid.uuid4().hex[:16]}"
    try:
        assert _all_at_once(kind, what, target) == ["ok"] * PROCS
        store = _open(kind, what, target)
        spent = store.spent_epsilon if what == "corpus" else store.total_spent()
        assert spent == pytest.approx(0.1 * PROCS)  # one store, every charge in it
    finally:
        if kind == "postgres":
            drop_postgres_tables(target)


@pytest.mark.postgres
@needs_postgres
def test_eight_processes_migrating_one_schema_all_succeed(table: str) -> None:
    import psycopg

    _open("postgres", "ledger", table).close()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # an older schema version
        conn.execute(f"UPDATE {table}_meta SET value = 2 WHERE key = 'schema'")
        conn.execute(f"DROP TABLE {table}_store")
    assert _all_at_once("postgres", "ledger", table) == ["ok"] * PROCS
    with psycopg.connect(POSTGRES_DSN) as conn:
        row = conn.execute(f"SELECT value FROM {table}_meta WHERE key = 'schema'").fetchone()
        assert row is not None and row[0] >= 3


def _locked_file(tmp_path: Path) -> Path:
    """A ledger file switched to a rollback journal, so that a writer's EXCLUSIVE lock keeps
    every reader out (in WAL mode readers never wait)."""
    path = tmp_path / "l.db"
    SQLiteLedger(path, budget_per_unit=1.0, create=True).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    return path


def test_busy_is_read_from_sqlites_error_code_not_its_message(tmp_path: Path) -> None:
    path = _locked_file(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    reader = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as locked:
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
    holder.execute("ROLLBACK")
    with pytest.raises(sqlite3.OperationalError) as missing:
        reader.execute("SELECT * FROM no_such_table")
    assert busy(locked.value) and not busy(missing.value)
    locked.value.args = ("a message in another language",)  # the code decides, not the text
    assert busy(locked.value)


def test_an_open_waits_for_a_busy_file_and_then_names_sqlite_busy(tmp_path: Path) -> None:
    path = _locked_file(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.5, holder.execute, ("ROLLBACK",)).start()
    SQLiteLedger(path, busy_timeout=10.0).close()  # waited for the holder, then opened
    holder.execute("PRAGMA journal_mode = DELETE")  # the open switched it back to WAL
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LedgerUnavailable, match="SQLITE_BUSY") as refused:
            SQLiteLedger(path, busy_timeout=0.3)
    finally:
        holder.execute("ROLLBACK")
    assert "\n" not in str(refused.value)
