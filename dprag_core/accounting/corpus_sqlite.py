"""The default durable corpus budget: a SQLite file, shared by threads and processes.

The same kind of store as :class:`~dprag_core.accounting.ledger.SQLiteLedger`
(and it may share the file with one): tables ``{table}_budget`` (one row:
totals, spent, query and refusal counts) and ``{table}_charges`` (one
append-only row per query id), listed in the file's catalog with the budget's
identity (:mod:`~dprag_core.accounting.stores.sqlite`). A charge is one
``BEGIN IMMEDIATE`` transaction: look the query id up, then ``UPDATE ... SET
spent = spent + cost WHERE spent + cost <= total`` and insert the charge row,
committed together and fsync'd before the charge returns: a committed charge survives
kill -9 and power loss; a crash between the charge and the release loses
budget, never privacy).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "budget.db")
>>> acc = SQLiteCorpusAccountant(path, total=Budget(1.0, 1e-6), create=True)
>>> acc.charge(Budget(0.4, 1e-7), query_id="q1")
True
>>> again = SQLiteCorpusAccountant(path)  # another process: the recorded total
>>> again.spent_epsilon, again.queries, again.total
(0.4, 1, Budget(epsilon=1.0, delta=1e-06))
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.stores.amounts import budget_units, check_table
from dprag_core.accounting.stores.errors import reused_id
from dprag_core.accounting.stores.retention import check_watermark, digest
from dprag_core.accounting.stores.sqlite import SQLiteSpec, damaged, open_sqlite
from dprag_core.budget import Budget

__all__ = ["SQLiteCorpusAccountant"]


def _objects(table: str) -> tuple[str, ...]:
    """The store's tables and triggers (its entry in the file's catalog)."""
    b, c, p = f"{table}_budget", f"{table}_charges", f"{table}_pruned"
    return (b, c, f"{c}_no_update", f"{c}_no_delete", p, f"{p}_no_change", f"{p}_no_delete",
            f"{b}_forward")  # fmt: skip


def _spec(table: str, total: tuple[int, int] | None) -> SQLiteSpec:
    b, c, p = f"{table}_budget", f"{table}_charges", f"{table}_pruned"
    tail = (
        f"CREATE TRIGGER IF NOT EXISTS {c}_no_update BEFORE UPDATE ON {c}"
        " BEGIN SELECT RAISE(ABORT, 'the charge log is append-only'); END",
        f"CREATE TRIGGER IF NOT EXISTS {c}_no_delete BEFORE DELETE ON {c}"
        " BEGIN SELECT RAISE(ABORT, 'the charge log is append-only'); END",
    )
    # version 3: the watermark and the pruned ids' digests (stores.retention); a charge row
    # goes only when older than the watermark; totals and the watermark never go back
    retention = (
        f"CREATE TABLE IF NOT EXISTS {p} (digest INTEGER PRIMARY KEY)",
        f"CREATE TRIGGER IF NOT EXISTS {p}_no_change BEFORE UPDATE ON {p}"
        " BEGIN SELECT RAISE(ABORT, 'pruned query ids are append-only'); END",
        f"CREATE TRIGGER IF NOT EXISTS {p}_no_delete BEFORE DELETE ON {p}"
        " BEGIN SELECT RAISE(ABORT, 'pruned query ids are append-only'); END",
        f"CREATE TRIGGER IF NOT EXISTS {b}_forward BEFORE UPDATE ON {b}"
        " WHEN new.total_epsilon <> old.total_epsilon OR new.total_delta <> old.total_delta"
        " OR new.spent_epsilon < old.spent_epsilon OR new.spent_delta < old.spent_delta"
        " OR new.queries < old.queries OR new.refusals < old.refusals"
        " OR new.watermark < old.watermark"
        " BEGIN SELECT RAISE(ABORT, 'a total, what was spent or the watermark never goes back');"
        " END",
        f"DROP TRIGGER IF EXISTS {c}_no_delete",
        f"CREATE TRIGGER {c}_no_delete BEFORE DELETE ON {c}"
        f" WHEN old.at >= (SELECT watermark FROM {b}) / 1000000.0"
        " BEGIN SELECT RAISE(ABORT, 'the charge log is append-only'); END",
    )
    return SQLiteSpec(
        f"corpus:{table}",
        "corpus budget",
        _objects(table),
        (
            f"CREATE TABLE IF NOT EXISTS {b} (id INTEGER PRIMARY KEY CHECK (id = 1),"
            " total_epsilon INTEGER NOT NULL, total_delta INTEGER NOT NULL,"
            " spent_epsilon INTEGER NOT NULL, spent_delta INTEGER NOT NULL,"
            " queries INTEGER NOT NULL, refusals INTEGER NOT NULL DEFAULT 0,"
            " watermark INTEGER NOT NULL DEFAULT 0)",
            f"CREATE TABLE IF NOT EXISTS {c} (query_id TEXT PRIMARY KEY,"
            " epsilon INTEGER NOT NULL, delta INTEGER NOT NULL, at REAL NOT NULL)",
            *tail,
            f"INSERT OR IGNORE INTO {b} VALUES (1, ?, ?, 0, 0, 0, 0, 0)",
            *retention,
        ),
        ((), (), (), (), total or (0, 0), *((),) * len(retention)),
        (
            f"ALTER TABLE {b} ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0",
            f"ALTER TABLE {b} ADD COLUMN watermark INTEGER NOT NULL DEFAULT 0",
            *tail,
            *retention,
        ),
        version=3,
    )


class SQLiteCorpusAccountant(DurableCorpusAccountant):
    """A total corpus :class:`~dprag_core.budget.Budget` in a SQLite file.

    ``path``: the database file (it may be a
    :class:`~dprag_core.accounting.ledger.SQLiteLedger`'s file); None (give
    ``name``): the budget of that name in the per-user budget directory
    (``$DPRAG_BUDGET_DIR``, else ``~/.local/share/dprag``: found from any
    working directory, :mod:`~dprag_core.accounting.stores.places`).
    ``create``: create the budget (and the file, mode 0600) if it does not
    exist; without it a missing file or budget is refused, so a typo or a
    relative path opened from another directory never starts a fresh budget.
    Creating refuses a relative path, and, when ``name`` is given, a second
    corpus budget of that name on this host (a corpus has one budget). ``total``: the
    corpus budget, needed to create; when opening, None reads the recorded
    one and any other total raises ``ValueError`` (a budget is never reset or
    enlarged). ``table``: table-name prefix, to keep several budgets in one
    file. ``name``: the budget's identity, recorded at creation (default:
    ``table``) and checked when given on opening. ``busy_timeout``: seconds
    a charge waits for the write lock before ``LedgerUnavailable``.
    ``read_only``: open for reading (also automatic for a file this process
    cannot write, and it works on read-only media): reads work, charges raise
    ``LedgerUnavailable``.

    >>> acc = SQLiteCorpusAccountant(name="records", total=Budget(2.0), create=True)
    >>> acc.can_afford(Budget(2.0)), acc.remaining, acc.path.name
    (True, Budget(epsilon=2.0, delta=0.0), 'records.db')
    >>> SQLiteCorpusAccountant(name="records").total  # from any directory, any process
    Budget(epsilon=2.0, delta=0.0)
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        total: Budget | None = None,
        table: str = "corpus",
        name: str | None = None,
        busy_timeout: float = 60.0,
        create: bool = False,
        read_only: bool = False,
    ) -> None:
        if total is not None and not isinstance(total, Budget):
            raise TypeError(f"total must be a Budget, got {type(total).__name__}")
        given = None if total is None else budget_units("total", total)
        self._t = check_table(table)
        self._budget_t, self._charges_t = f"{table}_budget", f"{table}_charges"
        self._pruned_t = f"{table}_pruned"
        self._store, self.name = open_sqlite(
            path,
            _spec(table, given),
            what=f"corpus budget {table!r}",
            name=name,
            create=create,
            read_only=read_only,
            busy_timeout=busy_timeout,
            needs="total" if given is None else None,
        )
        rows = self._store.read(f"SELECT total_epsilon, total_delta FROM {self._budget_t}")
        if not rows:
            raise damaged(self._store.label, "it records no total")
        stored = (int(rows[0][0]), int(rows[0][1]))
        self.check_total(total, stored, self._store.label)
        command = f"dprag ledger status --sqlite {shlex.quote(str(self.path.absolute()))}"
        super().__init__(
            stored, label=self._store.label, status_command=f"{command} --table {table}"
        )

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    def _state(self) -> tuple[int, int, int]:
        (row,) = self._store.read(
            f"SELECT spent_epsilon, spent_delta, queries FROM {self._budget_t}"
        )
        return int(row[0]), int(row[1]), int(row[2])

    def _charge(self, query_id: str, epsilon: int, delta: int) -> str:
        with self._store.write(charge=True) as conn:
            prev = conn.execute(
                f"SELECT epsilon, delta FROM {self._charges_t} WHERE query_id = ?", (query_id,)
            ).fetchone()
            if prev is not None:
                if tuple(prev) == (epsilon, delta):
                    return "recorded"
                raise reused_id()
            if conn.execute(
                f"SELECT 1 FROM {self._pruned_t} WHERE digest = ?", (digest(query_id),)
            ).fetchone():
                raise reused_id()
            cur = conn.execute(
                f"UPDATE {self._budget_t} SET spent_epsilon = spent_epsilon + ?,"
                " spent_delta = spent_delta + ?, queries = queries + 1"
                " WHERE spent_epsilon + ? <= total_epsilon AND spent_delta + ? <= total_delta",
                (epsilon, delta, epsilon, delta),
            )
            if cur.rowcount != 1:
                conn.execute(f"UPDATE {self._budget_t} SET refusals = refusals + 1")
                return "exhausted"
            conn.execute(
                f"INSERT INTO {self._charges_t}(query_id, epsilon, delta, at) VALUES (?, ?, ?, ?)",
                (query_id, epsilon, delta, time.time()),
            )
        return "charged"

    def _status_row(self) -> tuple[int, int, int, int | None, float | None]:
        columns = {r[1] for r in self._store.read(f'PRAGMA table_info("{self._budget_t}")')}
        refusals = "refusals" if "refusals" in columns else "NULL"  # a read-only older file
        (row,) = self._store.read(
            f"SELECT spent_epsilon, spent_delta, queries, {refusals},"
            f" (SELECT at FROM {self._charges_t} ORDER BY rowid DESC LIMIT 1) FROM {self._budget_t}"
        )
        return (
            int(row[0]),
            int(row[1]),
            int(row[2]),
            None if row[3] is None else int(row[3]),
            None if row[4] is None else float(row[4]),
        )

    def _history_rows(self, last: int | None = None) -> list[tuple[str, int, int, float]]:
        # rowid order is commit order (one writer at a time); the last ones: read backwards
        sql = f"SELECT query_id, epsilon, delta, at FROM {self._charges_t}"
        if last is None:
            rows = self._store.read(f"{sql} ORDER BY rowid")
        else:
            rows = self._store.read(f"{sql} ORDER BY rowid DESC LIMIT ?", (last,))[::-1]
        return [(str(q), int(e), int(d), float(at)) for q, e, d, at in rows]

    def prune(self, *, before: float) -> int:
        """Delete the charge rows stamped before ``before`` (UNIX seconds, the new public
        watermark), keeping their query ids' digests: a pruned id stays refused. The
        totals (spent, queries, refusals) are unchanged. Returns the number of ids pruned
        (:mod:`~dprag_core.accounting.stores.retention`).

        >>> import os, tempfile, time
        >>> acc = SQLiteCorpusAccountant(os.path.join(tempfile.mkdtemp(), "p.db"),
        ...                              total=Budget(1.0), create=True)
        >>> acc.charge(Budget(0.5), query_id="q1")
        True
        >>> acc.prune(before=time.time()), acc.queries, len(list(acc.history()))
        (1, 1, 0)
        """
        with self._store.write() as conn:
            (recorded,) = conn.execute(f"SELECT watermark FROM {self._budget_t}").fetchone()
            watermark = check_watermark(before, recorded_us=int(recorded))
            cut = watermark / 1_000_000.0
            ids = [
                q
                for (q,) in conn.execute(
                    f"SELECT query_id FROM {self._charges_t} WHERE at < ?", (cut,)
                )
            ]
            conn.executemany(
                f"INSERT OR IGNORE INTO {self._pruned_t}(digest) VALUES (?)",
                ((digest(q),) for q in ids),
            )
            conn.execute(f"UPDATE {self._budget_t} SET watermark = ?", (watermark,))
            conn.execute(f"DELETE FROM {self._charges_t} WHERE at < ?", (cut,))
        return len(ids)

    def close(self) -> None:
        """Close this thread's connection (the budget stays in the file)."""
        self._store.close()

    def __repr__(self) -> str:
        return (
            f"SQLiteCorpusAccountant(path={str(self.path)!r}, table={self._t!r}, "
            f"total={self.total!r})"
        )
