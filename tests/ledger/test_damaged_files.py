"""Damaged and foreign SQLite budget files: one line naming the file and the fix, never a
traceback, and never a charge.

A budget file holding a corpus budget and a per-unit ledger is damaged in 36 ways
(truncations, header fields, page bytes flipped by a seeded generator, wrong schemas,
catalog values no dprag version writes, another store's stale ``-wal`` next to a copy,
an empty file, a directory, non-SQLite files). For each one:

* ``dprag ledger check`` ends in one line naming the file;
* ``status``, ``history`` and ``export`` each end in one line naming the file and a fix,
  except where the damage lies only in pages a view never reads (an audit log's middle
  page, the free-page list): that view may show the intact totals, ``check`` refuses;
* opening the store to charge is refused (``LedgerUnavailable``) whenever the damage is
  in what an open reads: the header, a ``-wal``, the catalog and the state tables.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ledger_support import fails_in_one_line

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, SQLiteLedger
from dprag_core.budget import Budget
from dprag_core.cli import main

PAGE = 4096
FIXES = (
    "restore it from its latest backup",
    "restore it from a backup",
    "move '",
    "give the path of the .db file",
    "give the budget a file of its own",
    "dprag ledger init",
    "point to the budget's own .db file",
)


def _base(folder: Path) -> Path:
    """A checkpointed budget file: a corpus budget and a ledger, 120 charges each."""
    path = folder / "base.db"
    acc = SQLiteCorpusAccountant(path, total=Budget(100.0, 1e-3), create=True)
    led = SQLiteLedger(path, budget_per_unit=100.0, create=True)
    for i in range(120):
        acc.charge(Budget(0.1, 1e-6), query_id=f"query-{i:04d}-" + "x" * 40)
        assert led.charge(f"query-{i:04d}-" + "x" * 40, [f"u{i % 7}", f"v{i % 5}"], 0.1).granted
    acc.close()
    led.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for tail in ("-wal", "-shm", "-lock"):
        path.with_name(path.name + tail).unlink(missing_ok=True)
    return path


def _pages(path: Path) -> dict[str, int]:
    """The root page number of every table and index of the file."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")
        return {"sqlite_master": 1, **{name: int(page) for name, page in rows}}


def _write(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def _truncate(size: Callable[[int], int]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "r+b") as file:
            file.truncate(size(path.stat().st_size))

    return damage


def _header(offset: int, data: bytes) -> Callable[[Path], None]:
    return lambda path: _write(path, offset, data)


def _page_type(table: str) -> Callable[[Path], None]:
    """Overwrite the b-tree page type byte of ``table``'s root page."""

    def damage(path: Path) -> None:
        page = _pages(path)[table]
        _write(path, (page - 1) * PAGE + (100 if page == 1 else 0), b"\x07")

    return damage


def _sql(*statements: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA writable_schema = ON")
        for statement in statements:
            conn.execute(statement)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    return damage


def _replace_with(kind: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.unlink()
        if kind == "directory":
            path.mkdir()
        elif kind == "empty":
            path.touch()
        elif kind == "text":
            path.write_text("budget: 10 epsilon\n" * 300)
        elif kind == "random":
            path.write_bytes(np.random.default_rng(7).bytes(3 * PAGE))
        else:  # another application's SQLite database
            with sqlite3.connect(path) as conn:
                conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")

    return damage


def _stale_wal_of_another_store(path: Path) -> None:
    """The uncheckpointed -wal of another budget of the same layout (made the same way, so
    its pages fit this file) placed next to the copied file: SQLite would replay it."""
    folder = path.parent / "other"
    folder.mkdir()
    other = _base(folder)
    snapshot = sqlite3.connect(other)  # holds the WAL open while it is copied
    snapshot.execute("PRAGMA wal_autocheckpoint = 0")
    acc = SQLiteCorpusAccountant(other)
    acc.charge(Budget(50.0), query_id="other-store")
    shutil.copyfile(other.with_name("other.db-wal".replace("other", other.stem)),
                    path.with_name(path.name + "-wal"))  # fmt: skip
    snapshot.close()
    acc.close()


def _garbage_wal(path: Path) -> None:
    path.with_name(path.name + "-wal").write_bytes(b"\x00not a wal" * 100)


def _flip_pages(seed: int, tables: tuple[str, ...]) -> Callable[[Path], None]:
    """Flip 16 random bytes of the b-tree page headers (first 12 bytes) of ``tables``."""

    def damage(path: Path) -> None:
        rng = np.random.default_rng(seed)
        pages = _pages(path)
        for _ in range(16):
            page = pages[tables[int(rng.integers(len(tables)))]]
            start = (page - 1) * PAGE + (100 if page == 1 else 0)
            at = start + int(rng.integers(12))
            with open(path, "r+b") as file:
                file.seek(at)
                byte = file.read(1)[0]
                file.seek(at)
                file.write(bytes([byte ^ int(rng.integers(1, 256))]))

    return damage


def _zero_middle_audit_page(path: Path) -> None:
    """Zero a leaf page of the audit log that no view's first rows touch."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        pages = [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'audit'")]
    page = sorted(pages)[len(pages) // 2]
    _write(path, (page - 1) * PAGE, bytes(PAGE))


def _free_list_trunk(path: Path) -> None:
    """A free-page list pointing past the end of the file."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE scratch (x BLOB)")
    conn.execute("INSERT INTO scratch VALUES (zeroblob(20000))")
    conn.execute("DROP TABLE scratch")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    _write(path, 32, (10**6).to_bytes(4, "big"))


# name -> (damage, views may still read the intact totals, the stores refused when opened to
# charge: "both", "corpus", "ledger" or "" (the damage lies where no open reads))
DAMAGES: dict[str, tuple[Callable[[Path], None], bool, str]] = {
    "empty file": (_replace_with("empty"), False, "both"),
    "a directory": (_replace_with("directory"), False, "both"),
    "a text file": (_replace_with("text"), False, "both"),
    "random bytes": (_replace_with("random"), False, "both"),
    "another application's database": (_replace_with("foreign"), False, "both"),
    "truncated to 10 bytes": (_truncate(lambda n: 10), False, "both"),
    "truncated to 99 bytes": (_truncate(lambda n: 99), False, "both"),
    "truncated to one page": (_truncate(lambda n: PAGE), False, "both"),
    "truncated to half": (_truncate(lambda n: n // 2 // PAGE * PAGE), False, "both"),
    "truncated by one page": (_truncate(lambda n: n - PAGE), False, "both"),
    "truncated by one byte": (_truncate(lambda n: n - 1), False, "both"),
    "magic flipped": (_header(0, b"Sqlite"), False, "both"),
    "page size 784": (_header(16, b"\x03\x10"), False, "both"),
    "write version 9": (_header(18, b"\x09"), False, "both"),
    "read version 9": (_header(19, b"\x09"), False, "both"),
    "payload fractions": (_header(21, b"\x00"), False, "both"),
    "schema format 9": (_header(44, b"\x00\x00\x00\x09"), False, "both"),
    "text encoding 7": (_header(56, b"\x00\x00\x00\x07"), False, "both"),
    "in-header size huge": (_header(28, b"\x00\x10\x00\x00"), False, "both"),
    "schema page type": (_page_type("sqlite_master"), False, "both"),
    "catalog page type": (_page_type("dprag_stores"), False, "both"),
    "corpus budget page type": (_page_type("corpus_budget"), False, "both"),
    "ledger meta page type": (_page_type("meta"), False, "both"),
    "ledger units page type": (_page_type("units"), False, "both"),
    "audit root page type": (_page_type("audit"), False, "both"),
    "charges root page type": (_page_type("corpus_charges"), False, "both"),
    "seeded flips in the state tables": (
        _flip_pages(11, ("corpus_budget", "meta", "units", "dprag_stores")),
        False,
        "both",
    ),
    "seeded flips in the schema page": (_flip_pages(12, ("sqlite_master",)), False, "both"),
    "catalog holds a number for objects": (
        _sql("UPDATE dprag_stores SET objects = 42 WHERE store = 'ledger'"),
        False,
        "both",
    ),
    "catalog version not a number": (
        _sql("UPDATE dprag_stores SET version = 'two' WHERE store = 'ledger'"),
        False,
        "both",
    ),
    "catalog with other columns": (
        _sql("DROP TABLE dprag_stores", "CREATE TABLE dprag_stores (x TEXT)"),
        False,
        "both",
    ),
    "budget table of another schema": (
        _sql(
            "DROP TRIGGER corpus_budget_forward",
            "DROP TABLE corpus_budget",
            "CREATE TABLE corpus_budget (id INTEGER, total REAL)",
        ),
        False,
        "corpus",
    ),
    "ledger without its budget row": (
        _sql("DELETE FROM meta WHERE key = 'budget'"),
        False,
        "ledger",
    ),
    "malformed schema text": (
        _sql("UPDATE sqlite_master SET sql = 'CREATE TABLE units (' WHERE name = 'units'"),
        False,
        "both",
    ),
    "another store's stale -wal next to a copy": (_stale_wal_of_another_store, False, "both"),
    "a -wal that is not a WAL": (_garbage_wal, False, "both"),
    "a zeroed audit page": (_zero_middle_audit_page, True, ""),
    "a free-page list past the end": (_free_list_trunk, True, ""),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _base(tmp_path_factory.mktemp("base"))


def _one_line_naming(argv: list[str], path: Path) -> str:
    message = fails_in_one_line(argv)
    assert str(path) in message, message
    return message


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_file_is_one_line_naming_it_and_the_fix(
    damage: str, base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DPRAG_BUDGET_DIR", str(tmp_path / "budgets"))
    path = tmp_path / "records.db"
    shutil.copyfile(base, path)
    make, views_may_read, refused = DAMAGES[damage]
    make(path)
    where = ["--sqlite", str(path)]
    message = _one_line_naming(["ledger", "check", *where], path)
    for argv in (
        ["ledger", "status", *where],
        ["ledger", "history", *where, "--ledger", "--last", "5"],
        ["ledger", "export", *where, "--table", "corpus", "--format", "json"],
    ):
        if views_may_read:
            try:
                assert main(argv) == 0
            except SystemExit as exc:
                message = str(exc.code)
                assert "\n" not in message and str(path) in message
        else:
            message = _one_line_naming(argv, path)
            assert any(fix in message for fix in FIXES), message
    if refused in ("both", "corpus"):
        with pytest.raises(LedgerUnavailable, match=r"records\.db"):
            SQLiteCorpusAccountant(path, busy_timeout=2.0).charge(Budget(0.1), query_id="new")
    if refused in ("both", "ledger"):
        with pytest.raises(LedgerUnavailable, match=r"records\.db"):
            SQLiteLedger(path, busy_timeout=2.0).charge("new", ["u0"], 0.1)


def test_the_seeded_damages_are_at_least_thirty() -> None:
    assert len(DAMAGES) >= 30


def test_the_check_at_open_reads_the_state_tables_not_the_logs(base: Path, tmp_path: Path) -> None:
    """Opening reads the header and checks the catalog and the state tables: an intact file
    opens and charges; damaging only the audit log's middle leaves that open intact, and
    the full check (``dprag ledger check``) finds it."""
    path = tmp_path / "records.db"
    shutil.copyfile(base, path)
    assert main(["ledger", "check", "--sqlite", str(path)]) == 0
    _zero_middle_audit_page(path)
    acc = SQLiteCorpusAccountant(path)
    assert acc.charge(Budget(0.1), query_id=f"fresh-{time.time()}")
    _one_line_naming(["ledger", "check", "--sqlite", str(path)], path)
