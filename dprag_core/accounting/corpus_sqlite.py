"""The default durable corpus budget: a SQLite file, shared by threads and processes.

The same kind of store as :class:`~dprag_core.accounting.ledger.SQLiteLedger`
(and it may share the file with one): tables ``{table}_budget`` (one row:
totals, spent, query count) and ``{table}_charges`` (one append-only row per
query id). A charge is one ``BEGIN IMMEDIATE`` transaction: look the query id
up, then ``UPDATE ... SET spent = spent + cost WHERE spent + cost <= total``
and insert the charge row, committed together (WAL, ``synchronous=FULL``: a
committed charge survives kill -9 and power loss; a crash between the charge
and the release loses budget, never privacy).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "budget.db")
>>> acc = SQLiteCorpusAccountant(path, total=Budget(1.0, 1e-6), create=True)
>>> acc.charge(Budget(0.4, 1e-7), query_id="q1")
>>> acc.charge(Budget(0.4, 1e-7), query_id="q1")  # a retry: recorded once
>>> again = SQLiteCorpusAccountant(path, total=Budget(1.0, 1e-6))
>>> again.spent_epsilon, again.queries
(0.4, 1)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger.base import (
    LedgerUnavailable,
    check_table,
    incomplete,
    reused_id,
)
from dprag_core.accounting.ledger.sqlite_store import SQLiteStore
from dprag_core.budget import Budget
from dprag_core.validation import strict_bool

__all__ = ["SQLiteCorpusAccountant"]


class SQLiteCorpusAccountant(DurableCorpusAccountant):
    """A total corpus :class:`~dprag_core.budget.Budget` in a SQLite file.

    ``path``: the database file (it may be a
    :class:`~dprag_core.accounting.ledger.SQLiteLedger`'s file). ``total``:
    the corpus budget; opening a file whose recorded total differs raises
    ``ValueError``. ``create``: create the budget (and the file, mode 0600) if
    it does not exist; without it a missing file or budget is refused, so a
    typo or a relative path opened from another directory never starts a
    fresh budget. ``table``: table-name prefix, to keep several budgets in
    one file. ``busy_timeout``: seconds a charge waits for the write lock
    before ``LedgerUnavailable``. A file this process cannot write opens
    read-only (reads work, charges raise ``LedgerUnavailable``).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "b.db")
    >>> acc = SQLiteCorpusAccountant(path, total=Budget(2.0), create=True)
    >>> acc.can_afford(Budget(2.0)), acc.remaining
    (True, Budget(epsilon=2.0, delta=0.0))
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        total: Budget,
        table: str = "corpus",
        busy_timeout: float = 60.0,
        create: bool = False,
    ) -> None:
        super().__init__(total)
        self._t = check_table(table)
        create = strict_bool("create", create)
        self._store = SQLiteStore(path, busy_timeout=busy_timeout, create=create)
        self._budget_t, self._charges_t = f"{table}_budget", f"{table}_charges"
        self._init_schema(create)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    def _init_schema(self, create: bool) -> None:
        names = [self._budget_t, self._charges_t]
        absent = self._store.missing(names)
        if absent and len(absent) < len(names):
            raise LedgerUnavailable(incomplete(absent))
        if absent and not create:
            raise LedgerUnavailable(
                f"no corpus budget {self._t!r} in {str(self.path.absolute())!r}: pass "
                "create=True to create it"
            )
        if absent:
            if self._store.read_only:
                raise LedgerUnavailable("the read-only SQLite file holds no corpus budget")
            b, c = self._budget_t, self._charges_t
            with self._store.write() as conn:
                for stmt in (
                    f"CREATE TABLE IF NOT EXISTS {b} (id INTEGER PRIMARY KEY CHECK (id = 1),"
                    " total_epsilon INTEGER NOT NULL, total_delta INTEGER NOT NULL,"
                    " spent_epsilon INTEGER NOT NULL, spent_delta INTEGER NOT NULL,"
                    " queries INTEGER NOT NULL)",
                    f"CREATE TABLE IF NOT EXISTS {c} (query_id TEXT PRIMARY KEY,"
                    " epsilon INTEGER NOT NULL, delta INTEGER NOT NULL, at REAL NOT NULL)",
                    f"CREATE TRIGGER IF NOT EXISTS {c}_no_update BEFORE UPDATE ON {c}"
                    " BEGIN SELECT RAISE(ABORT, 'the charge log is append-only'); END",
                    f"CREATE TRIGGER IF NOT EXISTS {c}_no_delete BEFORE DELETE ON {c}"
                    " BEGIN SELECT RAISE(ABORT, 'the charge log is append-only'); END",
                ):
                    conn.execute(stmt)
                conn.execute(
                    f"INSERT OR IGNORE INTO {b} VALUES (1, ?, ?, 0, 0, 0)",
                    (self._total_eps, self._total_delta),
                )
        rows = self._store.read(f"SELECT total_epsilon, total_delta FROM {self._budget_t}")
        if not rows:
            raise LedgerUnavailable(incomplete([f"{self._budget_t} row"]))
        self.check_total((int(rows[0][0]), int(rows[0][1])))

    def _state(self) -> tuple[int, int, int]:
        (row,) = self._store.read(
            f"SELECT spent_epsilon, spent_delta, queries FROM {self._budget_t}"
        )
        return int(row[0]), int(row[1]), int(row[2])

    def _charge(self, query_id: str, epsilon: int, delta: int) -> bool:
        with self._store.write() as conn:
            prev = conn.execute(
                f"SELECT epsilon, delta FROM {self._charges_t} WHERE query_id = ?", (query_id,)
            ).fetchone()
            if prev is not None:
                if tuple(prev) == (epsilon, delta):
                    return True
                raise reused_id()
            cur = conn.execute(
                f"UPDATE {self._budget_t} SET spent_epsilon = spent_epsilon + ?,"
                " spent_delta = spent_delta + ?, queries = queries + 1"
                " WHERE spent_epsilon + ? <= total_epsilon AND spent_delta + ? <= total_delta",
                (epsilon, delta, epsilon, delta),
            )
            if cur.rowcount != 1:
                conn.execute("ROLLBACK")
                return False
            conn.execute(
                f"INSERT INTO {self._charges_t}(query_id, epsilon, delta, at) VALUES (?, ?, ?, ?)",
                (query_id, epsilon, delta, time.time()),
            )
        return True

    def close(self) -> None:
        """Close this thread's connection (the budget stays in the file)."""
        self._store.close()

    def __repr__(self) -> str:
        return (
            f"SQLiteCorpusAccountant(path={str(self.path)!r}, table={self._t!r}, "
            f"total={self.total!r})"
        )
