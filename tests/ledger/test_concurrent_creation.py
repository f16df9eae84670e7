"""N processes creating (or migrating) the same store at once: all succeed, one creates.

Before: 8 processes opening a new PostgreSQL store with create=True failed 58
times in 80, with raw psycopg errors (DuplicateTable) or a wrong "incomplete:
restore it from a backup" (one statement per table saw another session's
commit half-way).
"""

from __future__ import annotations

import multiprocessing as mp
import uuid
from pathlib import Path
from typing import Any

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, needs_postgres

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import PostgresLedger, SQLiteLedger
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
