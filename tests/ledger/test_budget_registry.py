"""One SQLite budget per corpus name on a host, whatever HOME, user, copy or register: the
host-wide registry ($DPRAG_BUDGET_REGISTRY, a temporary directory here)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ledger_support import POSTGRES_DSN, dsn_with, fails_in_one_line, needs_postgres

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger, SQLiteLedger
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host: the registry every user shares, and ann's budget directory."""
    monkeypatch.setenv("DPRAG_BUDGET_REGISTRY", str(tmp_path / "registry"))
    monkeypatch.setenv("DPRAG_BUDGET_DIR", str(tmp_path / "ann"))
    return tmp_path


def _spend_all(acc: SQLiteCorpusAccountant, tag: str) -> float:
    """Charge 1 epsilon at a time until refused; the epsilon granted."""
    granted = 0.0
    for i in range(50):
        try:
            acc.charge(Budget(1.0), query_id=f"{tag}-{i}")
        except PrivacyBudgetExhausted:
            break
        granted += 1.0
    return granted


def test_another_home_or_data_dir_cannot_create_a_second_budget(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    assert _spend_all(first, "a") == 10.0
    for env in ({"DPRAG_BUDGET_DIR": str(host / "other")}, {"XDG_DATA_HOME": str(host / "x")}):
        monkeypatch.delenv("DPRAG_BUDGET_DIR", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(LedgerUnavailable, match="already exists on this host"):
            SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
        with pytest.raises(LedgerUnavailable, match="already exists on this host"):
            SQLiteCorpusAccountant(
                host / "elsewhere.db", name="records", total=Budget(10.0), create=True
            )
        assert not (host / "elsewhere.db").exists()


def test_a_copy_or_a_moved_file_is_refused_to_charge(host: Path) -> None:
    acc = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    led = SQLiteLedger(name="records", budget_per_unit=5.0, create=True)
    acc.charge(Budget(4.0), query_id="q1")
    copy = host / "copy.db"
    with sqlite3.connect(acc.path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with pytest.raises(LedgerUnavailable, match="copy or a moved file"):
        SQLiteCorpusAccountant(copy)
    with pytest.raises(LedgerUnavailable, match="copy or a moved file"):
        SQLiteLedger(copy)
    assert SQLiteCorpusAccountant(copy, read_only=True).spent_epsilon == 4.0  # inspect it
    moved = host / "moved.db"
    acc.close()
    led.close()
    with sqlite3.connect(acc.path) as conn:  # what an operator's mv of a quiet file moves
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.move(acc.path, moved)
    with pytest.raises(LedgerUnavailable, match="copy or a moved file"):
        SQLiteCorpusAccountant(moved)
    with pytest.raises(LedgerUnavailable, match="already exists on this host"):
        SQLiteCorpusAccountant(moved, name="records", total=Budget(10.0), create=True)


def test_a_budget_that_disappeared_is_never_made_again(host: Path) -> None:
    acc = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    acc.charge(Budget(4.0), query_id="q1")
    path = acc.path
    acc.close()
    for tail in ("", "-wal", "-shm", "-lock"):
        path.with_name(path.name + tail).unlink(missing_ok=True)
    shutil.rmtree(host / "ann" / "names")  # the per-user register too
    with pytest.raises(LedgerUnavailable, match="never re-initialised"):
        SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    message = fails_in_one_line(
        ["ledger", "init", "--name", "records", "--corpus-epsilon", "10", "--corpus-delta", "0"]
    )
    assert "never re-initialised" in message and not path.exists()


def test_a_deleted_register_reopens_the_one_budget(host: Path) -> None:
    acc = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    acc.charge(Budget(4.0), query_id="q1")
    shutil.rmtree(host / "ann" / "names")
    again = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    assert again.spent_epsilon == 4.0 and _spend_all(again, "b") == 6.0


def test_move_carries_the_budget_and_its_records(
    host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    acc.charge(Budget(4.0), query_id="q1")
    old = acc.path
    acc.close()
    new = host / "disk2" / "records.db"
    new.parent.mkdir()
    assert main(["ledger", "move", "--name", "records", "--to", str(new)]) == 0
    assert "moved" in capsys.readouterr().out and not old.exists()
    opened = SQLiteCorpusAccountant(name="records")
    assert opened.path == new and opened.spent_epsilon == 4.0
    assert _spend_all(opened, "c") == 6.0
    fails_in_one_line(["ledger", "move", "--sqlite", str(new), "--to", "relative.db"])


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_another_user_cannot_create_a_second_budget(host: Path) -> None:
    """uid 65534 (nobody), with a HOME of its own, shares only the registry."""
    SQLiteCorpusAccountant(name="records", total=Budget(10.0), create=True)
    home = host / "nobody"
    home.mkdir()
    os.chown(home, 65534, 65534)
    script = (
        "import os; os.setgid(65534); os.setuid(65534)\n"
        "from dprag_core.accounting import SQLiteCorpusAccountant\n"
        "from dprag_core.budget import Budget\n"
        "SQLiteCorpusAccountant(name='records', total=Budget(10.0), create=True)\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != "DPRAG_BUDGET_DIR"},
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    if "already exists" not in done.stderr and (
        "PermissionError" in done.stderr or "ModuleNotFoundError" in done.stderr
    ):
        pytest.skip("uid 65534 cannot read this checkout or its interpreter")
    assert done.returncode != 0 and "already exists on this host" in done.stderr
    assert not (home / ".local" / "share" / "dprag" / "records.db").exists()


@pytest.mark.postgres
@needs_postgres
def test_a_dropped_postgres_database_is_never_silently_re_initialised(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DROP DATABASE, CREATE DATABASE, `dprag ledger init`: refused (the registry recorded
    the store); a store made again there from another host is refused at open."""
    import psycopg

    db = f"reg_{uuid.uuid4().hex[:12]}"
    dsn = dsn_with(dbname=db)

    def recreate_database() -> None:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {db}")

    recreate_database()
    try:
        led = PostgresLedger(dsn, budget_per_unit=10.0, table="records", create=True)
        acc = PostgresCorpusAccountant(dsn, total=Budget(10.0), table="corpus", create=True)
        assert led.charge("q1", ["a"], 4.0).granted
        acc.charge(Budget(4.0), query_id="q1")
        led.close()
        acc.close()
        recreate_database()  # the owner dropped it while no session was connected
        with pytest.raises(LedgerUnavailable, match=r"existed .* never re-initialised"):
            PostgresLedger(dsn, budget_per_unit=10.0, table="records", create=True)
        with pytest.raises(LedgerUnavailable, match=r"existed .* never re-initialised"):
            PostgresCorpusAccountant(dsn, total=Budget(10.0), table="corpus", create=True)
        monkeypatch.setenv("DPRAG_LEDGER_DSN", dsn)
        said = fails_in_one_line(
            ["ledger", "init", "--table", "records", "--budget-per-unit", "10"]
        )
        assert "never re-initialised" in said and "pg_dump" in said
        with psycopg.connect(dsn) as conn:  # nothing was created
            assert conn.execute("SELECT to_regclass('dprag.records_units')").fetchone() == (None,)
        monkeypatch.setenv("DPRAG_BUDGET_REGISTRY", str(host / "another-host"))
        PostgresLedger(dsn, budget_per_unit=10.0, table="records", create=True).close()
        monkeypatch.setenv("DPRAG_BUDGET_REGISTRY", str(host / "registry"))
        with pytest.raises(LedgerUnavailable, match="made again"):
            PostgresLedger(dsn, table="records")  # this host recorded the one that spent 4
        other = PostgresLedger(dsn, budget_per_unit=10.0, table="other", create=True)
        assert other.charge("q1", ["a"], 4.0).granted  # another store there: its own record
        other.close()
        PostgresLedger(dsn, table="other").close()  # and opened again: the same one
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
