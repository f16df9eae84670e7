"""The default persistent ledger: one SQLite file, safe across threads and processes.

Every charge is one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock is
taken before anything is read, so two processes can never both see the same
remaining budget and both spend it): read the remaining budget of every unit,
refuse if any lacks ``cost``, else insert the new units, debit them with a
conditional ``UPDATE ... WHERE remaining >= cost`` whose row count is checked,
and append the audit rows — all committed together or not at all. The file
uses WAL with ``synchronous=FULL``, so a committed charge survives a crash or
power loss: a crash between the charge and the release loses budget, never
privacy. Writers wait up to ``busy_timeout`` seconds for the lock (in turn,
see :mod:`~dprag_core.accounting.ledger.sqlite_store`). The file is created
with mode 0600; a file this process cannot write opens read-only (``remaining``
and ``audit_log`` work, a charge raises ``LedgerUnavailable``). A query id
already recorded is not charged twice (see :meth:`Ledger.charge`).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
>>> with SQLiteLedger(path, budget_per_unit=1.0, create=True) as led:
...     led.charge("q1", ["a"], 0.25).granted
True
>>> SQLiteLedger(path, budget_per_unit=1.0).remaining(["a"])
{'a': 0.75}
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from dprag_core.accounting.ledger.base import (
    Ledger,
    LedgerUnavailable,
    incomplete,
    reused_id,
    same_charge,
)
from dprag_core.accounting.ledger.sqlite_store import SQLiteStore
from dprag_core.validation import strict_bool

__all__ = ["SQLiteLedger"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS units ("
    " unit TEXT PRIMARY KEY, remaining INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS audit ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, query_id TEXT NOT NULL, unit TEXT NOT NULL,"
    " cost INTEGER NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_query ON audit(query_id)",
    "CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
)
_TABLES = ("meta", "units", "audit")
_NAMES = (*_TABLES, "audit_query", "audit_no_update", "audit_no_delete")


class SQLiteLedger(Ledger):
    """Per-unit budgets in one SQLite file (WAL, ``BEGIN IMMEDIATE``).

    ``path``: the database file (``":memory:"`` is refused: use
    :class:`~dprag_core.accounting.ledger.InMemoryLedger`). ``create``:
    create the ledger (and the file, mode 0600) if it does not exist; without
    it a missing file or ledger is refused. Re-opening a file with a different
    ``budget_per_unit`` raises ``ValueError``. The file may
    also hold a :class:`~dprag_core.accounting.SQLiteCorpusAccountant`.

    >>> import os, tempfile
    >>> led = SQLiteLedger(os.path.join(tempfile.mkdtemp(), "l.db"), budget_per_unit=2.0,
    ...                    create=True)
    >>> led.active(["u1"], 2.0)
    ['u1']
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        budget_per_unit: float,
        busy_timeout: float = 60.0,
        create: bool = False,
    ) -> None:
        super().__init__(budget_per_unit=budget_per_unit)
        create = strict_bool("create", create)
        self._store = SQLiteStore(path, busy_timeout=busy_timeout, create=create)
        self._init_schema(create)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    def _init_schema(self, create: bool) -> None:
        absent = self._store.missing(_TABLES)
        if absent and len(absent) < len(_TABLES):
            raise LedgerUnavailable(incomplete(absent))
        if absent and not create:
            raise LedgerUnavailable(
                f"no per-unit ledger in {str(self.path.absolute())!r}: pass create=True to "
                "create it"
            )
        if self._store.read_only and absent:
            raise LedgerUnavailable("the read-only SQLite file holds no ledger")
        if not self._store.read_only and self._store.missing(_NAMES):  # new, or an older file
            with self._store.write() as conn:
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('budget', ?), ('spent', 0)",
                    (self._budget,),
                )
        rows = self._store.read("SELECT value FROM meta WHERE key = 'budget'")
        stored = int(rows[0][0]) if rows else -1
        if stored != self._budget:
            raise ValueError(
                f"budget_per_unit {self.budget_per_unit!r} differs from the "
                f"{stored / 10**12!r} this ledger file was created with"
            )

    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        payload = json.dumps(units)
        with self._store.write() as conn:
            recorded = conn.execute(
                "SELECT unit, cost FROM audit WHERE query_id = ?", (query_id,)
            ).fetchall()
            if recorded:
                if same_charge(recorded, units, cost):
                    return []
                raise reused_id()
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
                "INSERT OR IGNORE INTO units(unit, remaining) SELECT value, ? FROM json_each(?)",
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
        return []

    def _remaining(self, units: list[str]) -> dict[str, int]:
        rows = self._store.read(
            "SELECT j.value, coalesce(u.remaining, ?) FROM json_each(?) AS j"
            " LEFT JOIN units AS u ON u.unit = j.value",
            (self._budget, json.dumps(units)),
        )
        return {unit: int(left) for unit, left in rows}

    def _audit_rows(self) -> Iterator[tuple[str, str, int, float]]:
        return iter(self._store.read("SELECT query_id, unit, cost, at FROM audit ORDER BY seq"))

    def _total_spent(self) -> int:
        return int(self._store.read("SELECT value FROM meta WHERE key = 'spent'")[0][0])

    def close(self) -> None:
        """Close this thread's connection (other threads close their own on exit)."""
        self._store.close()

    def __repr__(self) -> str:
        return f"SQLiteLedger(path={str(self.path)!r}, budget_per_unit={self.budget_per_unit!r})"
