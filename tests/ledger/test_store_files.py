"""No silent fresh budgets: which file or table is the budget, and what is never written to.

A missing store is created only when asked; an open from another directory,
with a typo or under another name is refused, naming the store; a file that
is not a dprag store is refused byte for byte untouched; read-only media can
be read; new files are owner-only whatever the umask.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import re
import shlex
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ledger_support import POSTGRES_DSN, dsn_with, needs_postgres, needs_roles

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger, SQLiteLedger
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.cli import main

NOBODY = 65534


def _open_sqlite(what: str, path: Path, **kw: Any) -> Any:
    if what == "corpus":
        return SQLiteCorpusAccountant(path, **({"total": Budget(2.0)} | kw))
    return SQLiteLedger(path, **({"budget_per_unit": 1.0} | kw))


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_missing_sqlite_store_is_refused_naming_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    home, elsewhere = tmp_path / "app", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(home)
    with pytest.raises(ValueError, match="relative"):  # never created at a relative path
        _open_sqlite(what, Path("budget.db"), create=True)
    assert not (home / "budget.db").exists()
    _open_sqlite(what, home / "budget.db", create=True).close()
    monkeypatch.chdir(elsewhere)  # the same relative path from another directory
    with pytest.raises(LedgerUnavailable, match="create=True") as info:
        _open_sqlite(what, Path("budget.db"))
    assert str(elsewhere / "budget.db") in str(info.value)
    assert not (elsewhere / "budget.db").exists()  # nothing was created
    with pytest.raises(LedgerUnavailable, match="create=True"):
        _open_sqlite(what, home / "budgte.db")  # a typo
    assert not (home / "budgte.db").exists()
    monkeypatch.chdir(home)
    assert _open_sqlite(what, Path("budget.db")).name == (
        "corpus" if what == "corpus" else "ledger"
    )


def test_another_table_prefix_or_name_is_another_store(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    SQLiteCorpusAccountant(path, total=Budget(2.0), create=True, name="records").close()
    with pytest.raises(LedgerUnavailable, match="create=True") as info:
        SQLiteCorpusAccountant(path, table="corpus2")
    assert "corpus2" in str(info.value)
    with pytest.raises(LedgerUnavailable, match="named 'records', not 'notes'"):
        SQLiteCorpusAccountant(path, name="notes")
    with pytest.raises(LedgerUnavailable, match="named 'records', not 'notes'"):
        SQLiteCorpusAccountant(path, total=Budget(2.0), create=True, name="notes")
    acc = SQLiteCorpusAccountant(path, name="records")
    assert (acc.name, acc.total) == ("records", Budget(2.0))  # the recorded total
    with pytest.raises(ValueError, match=r"total .* differs .*b\.db"):
        SQLiteCorpusAccountant(path, total=Budget(3.0))  # the error names the store
    with pytest.raises(ValueError, match="total is needed to create"):
        SQLiteCorpusAccountant(tmp_path / "new.db", create=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign_text(path: Path) -> None:
    path.write_text("id,name\n1,alice\n")


def _foreign_app(path: Path) -> None:
    with sqlite3.connect(path) as conn:  # another application's database (rollback journal)
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("CREATE TABLE audit (at REAL, what TEXT)")
        conn.execute("INSERT INTO audit VALUES (1.0, 'login')")


def _look_alike(path: Path) -> None:
    with sqlite3.connect(path) as conn:  # the ledger's table names, other columns
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE units (unit TEXT PRIMARY KEY, owner TEXT)")
        conn.execute("CREATE TABLE audit (seq INTEGER PRIMARY KEY, what TEXT)")


@pytest.mark.parametrize("make", [_foreign_text, _foreign_app, _look_alike])
@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_file_that_is_not_a_dprag_store_is_refused_untouched(
    tmp_path: Path, make: Callable[[Path], None], what: str
) -> None:
    path = tmp_path / "app.db"
    make(path)
    before = (_digest(path), sorted(p.name for p in tmp_path.iterdir()))
    for create in (False, True):
        with pytest.raises(LedgerUnavailable, match="nothing was written") as info:
            _open_sqlite(what, path, create=create)
        assert str(path) in str(info.value)
    assert (_digest(path), sorted(p.name for p in tmp_path.iterdir())) == before
    if make is not _foreign_text:
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # no WAL switch
            conn.execute("DELETE FROM audit")  # its own table is not made append-only


def test_a_store_written_before_the_catalog_is_recognised_and_listed(tmp_path: Path) -> None:
    """The layout of the previous version (same tables and triggers, no catalog)."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        for stmt in (
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
            "CREATE TABLE units (unit TEXT PRIMARY KEY, remaining INTEGER NOT NULL) WITHOUT ROWID",
            "CREATE TABLE audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, query_id TEXT NOT NULL,"
            " unit TEXT NOT NULL, cost INTEGER NOT NULL, at REAL NOT NULL)",
            "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit"
            " BEGIN SELECT RAISE(ABORT, 'x'); END",
            "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit"
            " BEGIN SELECT RAISE(ABORT, 'x'); END",
            "INSERT INTO meta VALUES ('budget', 1000000000000), ('spent', 250000000000)",
            "INSERT INTO units VALUES ('a', 750000000000)",
            "INSERT INTO audit(query_id, unit, cost, at) VALUES ('q0', 'a', 250000000000, 1.0)",
            "CREATE TABLE corpus_budget (id INTEGER PRIMARY KEY CHECK (id = 1),"
            " total_epsilon INTEGER NOT NULL, total_delta INTEGER NOT NULL,"
            " spent_epsilon INTEGER NOT NULL, spent_delta INTEGER NOT NULL,"
            " queries INTEGER NOT NULL)",
            "CREATE TABLE corpus_charges (query_id TEXT PRIMARY KEY, epsilon INTEGER NOT NULL,"
            " delta INTEGER NOT NULL, at REAL NOT NULL)",
            "CREATE TRIGGER corpus_charges_no_update BEFORE UPDATE ON corpus_charges"
            " BEGIN SELECT RAISE(ABORT, 'x'); END",
            "CREATE TRIGGER corpus_charges_no_delete BEFORE DELETE ON corpus_charges"
            " BEGIN SELECT RAISE(ABORT, 'x'); END",
            "INSERT INTO corpus_budget VALUES (1, 2000000000000, 0, 500000000000, 0, 1)",
            "INSERT INTO corpus_charges VALUES ('q0', 500000000000, 0, 1.0)",
        ):
            conn.execute(stmt)
    led = SQLiteLedger(path)
    assert led.remaining(["a"]) == {"a": 0.75} and led.status().refusals == 0
    assert not led.charge("q1", ["a"], 1.0).granted and led.status().refusals == 1
    acc = SQLiteCorpusAccountant(path)
    assert (acc.total, acc.spent_epsilon, acc.name) == (Budget(2.0), 0.5, "corpus")
    with pytest.raises(PrivacyBudgetExhausted):
        acc.charge(Budget(1.6))
    assert acc.status().refusals == 1
    with sqlite3.connect(path) as conn:
        listed = conn.execute("SELECT store, kind, name FROM dprag_stores ORDER BY 1").fetchall()
    assert listed == [
        ("corpus:corpus", "corpus budget", "corpus"),
        ("ledger", "per-unit ledger", "ledger"),
    ]


def _in_child(work: Callable[[], object], *, user: int | None) -> object:
    """Run ``work`` in a forked child (as ``user`` when given); its result or its exception."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()

    def run() -> None:
        try:
            if user is not None:
                os.setgid(user)
                os.setuid(user)
            child.send(("ok", work()))
        except BaseException as exc:  # the test inspects what the child raised
            child.send(("raised", f"{type(exc).__name__}: {exc}"))

    proc = ctx.Process(target=run)
    proc.start()
    outcome = parent.recv()
    proc.join()
    return outcome


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can traverse (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="dprag-ro-"))
    path.chmod(0o755)
    yield path
    for p in (path, *path.iterdir()):
        p.chmod(0o700)
    shutil.rmtree(path)


@pytest.mark.parametrize("media", ["read-only directory", "read-only file"])
def test_a_read_only_store_can_be_read_and_nothing_is_written(shared_dir: Path, media: str) -> None:
    path = shared_dir / "budget.db"
    with SQLiteCorpusAccountant(path, total=Budget(2.0), create=True) as acc:
        acc.charge(Budget(0.5), query_id="q1")
    with SQLiteLedger(path, budget_per_unit=1.0, create=True) as led:
        led.charge("q1", ["a"], 1.0)
    path.chmod(0o444)
    if media == "read-only directory":
        shared_dir.chmod(0o555)  # as on read-only media: SQLite cannot create its -shm
    before = sorted(p.name for p in shared_dir.iterdir())
    user = NOBODY if os.geteuid() == 0 else None  # root ignores modes: read as nobody

    def read() -> object:
        acc, led = SQLiteCorpusAccountant(path), SQLiteLedger(path)
        status = acc.status()
        refused = []
        for charge in (lambda: acc.charge(Budget(0.1)), lambda: led.charge("q2", ["b"], 0.1)):
            try:
                charge()
            except LedgerUnavailable as exc:
                refused.append(str(exc))
        return (
            status.spent_epsilon,
            [r.query_id for r in acc.history()],
            led.status().exhausted,
            led.remaining(["a"]),
            refused,
        )

    kind, result = _in_child(read, user=user)  # type: ignore[misc]
    assert kind == "ok", result
    spent, history, exhausted, remaining, refused = result  # type: ignore[misc]
    assert (spent, history, exhausted, remaining) == (0.5, ["q1"], 1, {"a": 0.0})
    assert len(refused) == 2 and all("read-only" in r for r in refused)
    assert sorted(p.name for p in shared_dir.iterdir()) == before  # nothing was written


def test_read_only_refuses_charges_on_a_writable_file(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    SQLiteCorpusAccountant(path, total=Budget(2.0), create=True).close()
    replica = SQLiteCorpusAccountant(path, read_only=True)
    with pytest.raises(LedgerUnavailable, match="read-only"):
        replica.charge(Budget(0.5))
    with pytest.raises(LedgerUnavailable, match="missing"):
        SQLiteCorpusAccountant(tmp_path / "none.db", total=Budget(1.0), create=True, read_only=True)


def test_new_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    from dprag_core.datastore import DPSimHashDatastore

    old = os.umask(0)
    try:
        path = tmp_path / "b.db"
        SQLiteCorpusAccountant(path, total=Budget(2.0), create=True).charge(Budget(0.5))
        SQLiteLedger(path, budget_per_unit=1.0, create=True).charge("q", ["a"], 0.5)
        keys = np.random.default_rng(0).normal(size=(20, 4))
        released = DPSimHashDatastore.release(
            keys, (keys[:, 0] > 0).astype(int), num_classes=2, epsilon=1.0, rng=0
        )
        released.save(tmp_path / "store.npz")
    finally:
        os.umask(old)
    for name in ("b.db", "b.db-wal", "b.db-shm", "b.db-lock"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(tmp_path / "store.npz").st_mode) == 0o644


@pytest.mark.postgres
@needs_postgres
@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_missing_or_other_postgres_store_is_refused_naming_its_table(
    table: str, what: str
) -> None:
    def open_pg(**kw: Any) -> Any:
        if what == "corpus":
            return PostgresCorpusAccountant(POSTGRES_DSN, table=table, **kw)
        return PostgresLedger(POSTGRES_DSN, table=table, **kw)

    with pytest.raises(LedgerUnavailable, match=f"{table}.*absent.*create=True"):
        open_pg()
    settings = {"total": Budget(1.0)} if what == "corpus" else {"budget_per_unit": 1.0}
    open_pg(create=True, name="records", **settings).close()
    assert open_pg().name == "records"
    with pytest.raises(LedgerUnavailable, match="named 'records', not 'notes'"):
        open_pg(name="notes")
    other = PostgresLedger if what == "corpus" else PostgresCorpusAccountant
    with pytest.raises(LedgerUnavailable, match=r"is a (corpus budget|per-unit ledger), not a"):
        other(POSTGRES_DSN, table=table)  # the other kind of store under this prefix


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc/self/fd (Linux)")
def test_a_charge_returns_after_its_commit_is_fsynced_outside_the_writers_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: durable before the charge returns, without holding the queue for it."""
    import fcntl

    path = tmp_path / "b.db"
    acc = SQLiteCorpusAccountant(path, total=Budget(2.0), create=True)
    synced: list[tuple[str, bool]] = []
    from dprag_core.accounting.stores import sqlite as sqlite_store

    real_fsync = sqlite_store._datasync

    def fsync(fd: int) -> None:
        lock = os.open(f"{path}-lock", os.O_RDWR)
        try:  # is the writers' queue free while this fsync runs?
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = False
        finally:
            os.close(lock)
        synced.append((Path(os.readlink(f"/proc/self/fd/{fd}")).name, free))
        real_fsync(fd)

    monkeypatch.setattr(sqlite_store, "_datasync", fsync)
    acc.charge(Budget(0.5), query_id="q1")
    assert ("b.db-wal", True) in synced
    monkeypatch.setattr(sqlite_store, "_datasync", real_fsync)
    assert acc._store.conn().execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL


def test_rerunning_in_the_same_folder_says_the_budget_persists(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    budget_home: Path,
) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    for run, folder in enumerate(("a", "b")):  # the README quick start, run from two folders
        monkeypatch.chdir(tmp_path / folder)
        acc = SQLiteCorpusAccountant(name="quickstart", total=Budget(1.0), create=True)
        if run == 0:
            acc.charge(Budget(1.0))
    with pytest.raises(PrivacyBudgetExhausted, match="persists") as info:
        acc.charge(Budget(0.5))
    message = str(info.value)
    assert str(budget_home / "quickstart.db") in message and "new corpus" in message
    # the command it names shows this very budget, exhausted
    command = re.search(r"see it: (dprag ledger status [^;]*);", message)
    assert command, message
    monkeypatch.chdir(tmp_path.parent)  # from another folder too: the path is absolute
    capsys.readouterr()
    assert main(shlex.split(command.group(1))[1:]) == 0
    assert "(exhausted)" in capsys.readouterr().out


@pytest.mark.postgres
@needs_postgres
@needs_roles
def test_postgres_read_only_access_reads_and_never_charges(table: str, runtime_role: str) -> None:
    """A role holding SELECT only, and a read-only session (as on a hot standby)."""
    import psycopg

    PostgresCorpusAccountant(POSTGRES_DSN, total=Budget(2.0), table=table, create=True).charge(
        Budget(0.5), query_id="q1"
    )
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA dprag TO {runtime_role}")
        for suffix in ("meta", "store", "budget", "charges"):
            conn.execute(f"GRANT SELECT ON dprag.{table}_{suffix} TO {runtime_role}")
    for dsn, refusal in (
        (dsn_with(user=runtime_role), "lacks a right"),
        (dsn_with(options="-c default_transaction_read_only=on"), "read-only here"),
    ):
        replica = PostgresCorpusAccountant(dsn, table=table)
        assert (replica.status().spent_epsilon, [r.query_id for r in replica.history()]) == (
            0.5, ["q1"],
        )  # fmt: skip
        with pytest.raises(LedgerUnavailable, match=refusal):
            replica.charge(Budget(0.5))
        assert replica.queries == 1


def test_a_backup_taken_while_serving_opens_with_the_same_status(tmp_path: Path) -> None:
    path, copy = tmp_path / "b.db", tmp_path / "backup.db"
    acc = SQLiteCorpusAccountant(path, total=Budget(2.0), create=True, name="records")
    led = SQLiteLedger(path, budget_per_unit=1.0, create=True)
    acc.charge(Budget(0.5), query_id="q1")
    led.charge("q1", ["a"], 0.25)
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)  # SQLite's online backup: consistent while others charge
    acc.charge(Budget(0.5), query_id="q2")  # after the backup
    restored = SQLiteCorpusAccountant(copy, read_only=True, name="records")
    assert (restored.spent_epsilon, [r.query_id for r in restored.history()]) == (0.5, ["q1"])
    assert SQLiteLedger(copy, read_only=True).remaining(["a"]) == {"a": 0.75}
    assert acc.spent_epsilon == 1.0  # a restored backup has forgotten q2: it would refund it


def test_the_wal_is_checkpointed_in_the_background(tmp_path: Path) -> None:
    """Autocheckpoints are off (they would run inside a commit); a thread does them."""
    import time

    from dprag_core.accounting.stores.sqlite import CHECKPOINT_EVERY

    path = tmp_path / "l.db"
    led = SQLiteLedger(path, budget_per_unit=1e3, create=True)
    before = path.stat().st_size
    for i in range(2 * CHECKPOINT_EVERY):
        led.charge(f"q{i}", [f"u{i}-{j}" for j in range(20)], 0.5)
    deadline = time.monotonic() + 20
    while path.stat().st_size <= before and time.monotonic() < deadline:
        time.sleep(0.05)  # the pages reach the database file only through a checkpoint
    assert path.stat().st_size > before
    assert led._store.conn().execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
