"""The default persistent ledger: one SQLite file, safe across threads and processes.

Every charge is one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock is
taken before anything is read, so two processes can never both see the same
remaining budget and both spend it): read the remaining budget of every unit,
refuse if any lacks ``cost``, else insert the new units, debit them with a
conditional ``UPDATE ... WHERE remaining >= cost`` whose row count is checked,
and append the audit rows — all committed together or not at all. The file
uses WAL with ``synchronous=FULL``, so a committed charge survives a crash or
power loss: a crash between the charge and the release loses budget, never
privacy. Writers wait up to ``busy_timeout`` seconds for the lock.

Each thread (and each process, after a fork) opens its own connection.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
>>> with SQLiteLedger(path, budget_per_unit=1.0) as led:
...     led.charge("q1", ["a"], 0.25).granted
True
>>> SQLiteLedger(path, budget_per_unit=1.0).remaining(["a"])
{'a': 0.75}
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from dprag_core._validation import positive_finite
from dprag_core.accounting.ledger.base import Ledger, LedgerUnavailable

__all__ = ["SQLiteLedger"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS units ("
    " unit TEXT PRIMARY KEY, remaining INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS audit ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, query_id TEXT NOT NULL, unit TEXT NOT NULL,"
    " cost INTEGER NOT NULL, at REAL NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
)

# Connections inherited through fork() are never closed by the child (closing
# them could disturb the parent's locks); they are parked here instead.
_INHERITED: list[sqlite3.Connection] = []


def _unavailable(exc: sqlite3.Error) -> LedgerUnavailable:
    code = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return LedgerUnavailable(f"the SQLite ledger is unavailable ({code})")


class SQLiteLedger(Ledger):
    """Per-unit budgets in one SQLite file (WAL, ``BEGIN IMMEDIATE``).

    ``path``: the database file (created if missing; ``":memory:"`` is refused:
    use :class:`~dprag_core.accounting.ledger.InMemoryLedger`). Re-opening a file
    with a different ``budget_per_unit`` raises ``ValueError``.

    >>> import os, tempfile
    >>> led = SQLiteLedger(os.path.join(tempfile.mkdtemp(), "l.db"), budget_per_unit=2.0)
    >>> led.active(["u1"], 2.0)
    ['u1']
    """

    def __init__(
        self, path: str | os.PathLike[str], *, budget_per_unit: float, busy_timeout: float = 60.0
    ) -> None:
        super().__init__(budget_per_unit=budget_per_unit)
        self._timeout = positive_finite("busy_timeout", busy_timeout)
        if not isinstance(path, (str, os.PathLike)) or str(path) in ("", ":memory:"):
            raise ValueError("path must be a database file path (use InMemoryLedger in memory)")
        self._path = Path(path)
        self._local = threading.local()
        self._init_schema()

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            return conn
        if conn is not None:
            _INHERITED.append(conn)
        try:
            conn = sqlite3.connect(self._path, timeout=self._timeout, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None
        local.conn, local.pid = conn, os.getpid()
        return conn

    def _init_schema(self) -> None:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('budget', ?), ('spent', 0)",
                    (self._budget,),
                )
                (stored,) = conn.execute("SELECT value FROM meta WHERE key = 'budget'").fetchone()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None
        if stored != self._budget:
            raise ValueError(
                f"budget_per_unit {self.budget_per_unit!r} differs from the "
                f"{stored / 10**12!r} this ledger file was created with"
            )

    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        payload = json.dumps(units)
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                lacking = [
                    row[0]
                    for row in conn.execute(
                        "SELECT j.value FROM json_each(?) AS j"
                        " LEFT JOIN units AS u ON u.unit = j.value"
                        " WHERE coalesce(u.remaining, ?) < ? ORDER BY j.value",
                        (payload, self._budget, cost),
                    )
                ]
                if lacking:
                    conn.execute("ROLLBACK")
                    return lacking
                conn.execute(
                    "INSERT OR IGNORE INTO units(unit, remaining)"
                    " SELECT value, ? FROM json_each(?)",
                    (self._budget, payload),
                )
                cur = conn.execute(
                    "UPDATE units SET remaining = remaining - ?"
                    " WHERE unit IN (SELECT value FROM json_each(?)) AND remaining >= ?",
                    (cost, payload, cost),
                )
                if cur.rowcount != len(units):
                    raise LedgerUnavailable("the SQLite ledger changed during a locked charge")
                conn.execute(
                    "INSERT INTO audit(query_id, unit, cost, at) SELECT ?, value, ?, ?"
                    " FROM json_each(?)",
                    (query_id, cost, time.time(), payload),
                )
                conn.execute(
                    "UPDATE meta SET value = value + ? WHERE key = 'spent'", (cost * len(units),)
                )
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None
        return []

    def _remaining(self, units: list[str]) -> dict[str, int]:
        try:
            rows = self._conn().execute(
                "SELECT j.value, coalesce(u.remaining, ?) FROM json_each(?) AS j"
                " LEFT JOIN units AS u ON u.unit = j.value",
                (self._budget, json.dumps(units)),
            )
            return {unit: int(left) for unit, left in rows}
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None

    def _audit_rows(self) -> Iterator[tuple[str, str, int, float]]:
        try:
            cur = self._conn().execute("SELECT query_id, unit, cost, at FROM audit ORDER BY seq")
            while batch := cur.fetchmany(4096):
                yield from batch
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None

    def _total_spent(self) -> int:
        try:
            row = self._conn().execute("SELECT value FROM meta WHERE key = 'spent'").fetchone()
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None
        return int(row[0])

    def close(self) -> None:
        """Close this thread's connection (other threads close their own on exit)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    def __repr__(self) -> str:
        return f"SQLiteLedger(path={str(self._path)!r}, budget_per_unit={self.budget_per_unit!r})"
