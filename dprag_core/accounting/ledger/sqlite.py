"""The default persistent ledger: one SQLite file, safe across threads and processes.

Every charge is one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock is
taken before anything is read, so two processes can never both see the same
remaining budget and both spend it): read the remaining budget of every unit,
refuse if any lacks ``cost`` (counting the refusal), else insert the new
units and debit them with one upsert whose row count is checked, and append
the audit rows — all committed together or not at all. The commit is fsync'd
before the charge returns (:mod:`~dprag_core.accounting.stores.sqlite`), so a
committed charge survives a crash or power loss: a crash between the charge
and the release loses budget, never privacy. A claim made with
``durable=False`` skips its own fsync: the query's charge's fsync of the WAL
(or :meth:`Ledger.settle`'s) carries it (:meth:`Ledger.claim`). Writers wait up to
``busy_timeout`` seconds for the lock (in turn, see
:mod:`~dprag_core.accounting.stores.sqlite`). The file is created with mode
0600, only when asked (``create=True``); a file this process cannot write
opens read-only (``remaining``, ``audit_log`` and ``status`` work, a charge
raises ``LedgerUnavailable``). A query id buys at most one release (see
:meth:`Ledger.charge`).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
>>> with SQLiteLedger(path, budget_per_unit=1.0, create=True) as led:
...     led.charge("q1", ["a"], 0.25).granted
True
>>> SQLiteLedger(path).remaining(["a"])  # the recorded budget: no need to restate it
{'a': 0.75}
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from dprag_core.accounting.ledger.base import Ledger, require_distinct, same_charge
from dprag_core.accounting.status import HISTOGRAM_BINS, LedgerStatus
from dprag_core.accounting.stores.amounts import to_units
from dprag_core.accounting.stores.errors import LedgerUnavailable, reused_id
from dprag_core.accounting.stores.retention import check_watermark, digest
from dprag_core.accounting.stores.sqlite import SQLiteSpec, damaged, open_sqlite

__all__ = ["SQLiteLedger"]

_OBJECTS = (
    "meta",
    "units",
    "audit",
    "audit_query",
    "audit_no_update",
    "audit_no_delete",
    "queries",
    "queries_no_update",
    "queries_no_delete",
    "pruned",
    "pruned_no_update",
    "pruned_no_delete",
    "meta_watermark",
)
_WATERMARK = "(SELECT value FROM meta WHERE key = 'watermark') / 1000000.0"
_APPEND_ONLY = (  # a row goes only when older than the watermark (prune); nothing is updated
    "CREATE TRIGGER IF NOT EXISTS queries_no_update BEFORE UPDATE ON queries"
    " BEGIN SELECT RAISE(ABORT, 'claimed query ids are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS queries_no_delete BEFORE DELETE ON queries"
    f" WHEN old.at >= coalesce({_WATERMARK}, 0)"
    " BEGIN SELECT RAISE(ABORT, 'claimed query ids are append-only'); END",
    "CREATE TABLE IF NOT EXISTS pruned (digest INTEGER PRIMARY KEY)",
    "CREATE TRIGGER IF NOT EXISTS pruned_no_update BEFORE UPDATE ON pruned"
    " BEGIN SELECT RAISE(ABORT, 'pruned query ids are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS pruned_no_delete BEFORE DELETE ON pruned"
    " BEGIN SELECT RAISE(ABORT, 'pruned query ids are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS meta_watermark BEFORE UPDATE ON meta"
    " WHEN old.key IN ('budget', 'spent', 'queries', 'refusals', 'watermark')"
    " AND (new.key <> old.key OR new.value < old.value"
    " OR (old.key = 'budget' AND new.value <> old.value))"
    " BEGIN SELECT RAISE(ABORT, 'a budget, a total or the watermark never goes back'); END",
    "DROP TRIGGER IF EXISTS audit_no_delete",
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit"
    f" WHEN old.at >= coalesce({_WATERMARK}, 0)"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "INSERT OR IGNORE INTO meta(key, value) VALUES"
    " ('queries', (SELECT count(DISTINCT query_id) FROM audit)), ('watermark', 0)",
)
_DDL = (
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
    "CREATE TABLE IF NOT EXISTS queries (query_id TEXT PRIMARY KEY, at REAL NOT NULL)"
    " WITHOUT ROWID",
    "INSERT OR IGNORE INTO meta(key, value) VALUES ('budget', ?), ('spent', 0), ('refusals', 0)",
    *_APPEND_ONLY,
)
_MIGRATE = (  # stores written by an earlier version (no catalog, refusal count or claims)
    *_DDL[:7],
    "INSERT OR IGNORE INTO meta(key, value) VALUES ('refusals', 0)",
    *_APPEND_ONLY,
)
_VERSION = 4
"""Version 3: the ``queries`` table of claimed query ids (:meth:`Ledger.claim`); version 4:
kept query count, the watermark, the ``pruned`` digests and the append-only guards on
``queries`` (:mod:`~dprag_core.accounting.stores.retention`)."""


class SQLiteLedger(Ledger):
    """Per-unit budgets in one SQLite file (WAL, ``BEGIN IMMEDIATE``).

    ``path``: the database file (``":memory:"`` is refused: use
    :class:`~dprag_core.accounting.ledger.InMemoryLedger`); None (give
    ``name``): the ledger of that name in the per-user budget directory,
    found from any working directory (beside the corpus budget of the same
    name: :mod:`~dprag_core.accounting.stores.places`). ``create``: create
    the ledger (and the file, mode 0600) if it does not exist; without it a
    missing file or ledger is refused; creating refuses a relative path and,
    when ``name`` is given, a second per-unit ledger of that name on this
    host. ``budget_per_unit``: needed to create; when opening, None reads
    the recorded one and any other value than the recorded one raises
    ``ValueError``. ``name``: the ledger's
    identity, recorded at creation (default ``"ledger"``) and checked when
    given on opening. ``read_only``: open for reading only (also automatic
    for a file this process cannot write). The file may also hold
    :class:`~dprag_core.accounting.SQLiteCorpusAccountant` budgets.

    >>> import os, tempfile
    >>> led = SQLiteLedger(os.path.join(tempfile.mkdtemp(), "l.db"), budget_per_unit=2.0,
    ...                    create=True)
    >>> led.active(["u1"], 2.0)
    ['u1']
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        budget_per_unit: float | None = None,
        name: str | None = None,
        busy_timeout: float = 60.0,
        create: bool = False,
        read_only: bool = False,
    ) -> None:
        given = None
        if budget_per_unit is not None:
            given = to_units("budget_per_unit", budget_per_unit, positive=True)
        spec = SQLiteSpec(
            "ledger",
            "per-unit ledger",
            _OBJECTS,
            _DDL,
            ((),) * 7 + ((given,),) + ((),) * len(_APPEND_ONLY),
            _MIGRATE,
            version=_VERSION,
        )
        self._store, self.name = open_sqlite(
            path,
            spec,
            what="per-unit ledger",
            name=name,
            create=create,
            read_only=read_only,
            busy_timeout=busy_timeout,
            needs="budget_per_unit" if given is None else None,
        )
        self.label = self._store.label
        rows = self._store.read("SELECT value FROM meta WHERE key = 'budget'")
        if not rows:
            raise damaged(self._store.label, "it records no budget_per_unit")
        self._adopt_budget(given, int(rows[0][0]), self.label)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    def _charge(self, query_id: str, units: list[str], cost: int) -> tuple[str, list[str]]:
        payload = json.dumps(require_distinct(units))
        with self._store.write(charge=True) as conn:
            recorded = conn.execute(
                "SELECT unit, cost FROM audit WHERE query_id = ?", (query_id,)
            ).fetchall()
            if recorded:
                if same_charge(recorded, units, cost):
                    return "recorded", []
                raise reused_id()
            pruned = conn.execute("SELECT 1 FROM pruned WHERE digest = ?", (digest(query_id),))
            if pruned.fetchone():
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
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'refusals'")
                return "refused", lacking
            cur = conn.execute(  # no unit lacks it (checked above, under the write lock)
                "INSERT INTO units(unit, remaining) SELECT value, ? FROM json_each(?) WHERE 1"
                " ON CONFLICT(unit) DO UPDATE SET remaining = remaining - ?",
                (self._budget - cost, payload, cost),
            )
            if cur.rowcount != len(units):
                raise LedgerUnavailable(f"the {self._store.label} changed during a locked charge")
            conn.execute(
                "INSERT INTO audit(query_id, unit, cost, at) SELECT ?, value, ?, ?"
                " FROM json_each(?)",
                (query_id, cost, time.time(), payload),
            )
            conn.execute(
                "UPDATE meta SET value = value + CASE key WHEN 'spent' THEN ? ELSE 1 END"
                " WHERE key IN ('spent', 'queries')",
                (cost * len(units),),
            )
        return "charged", []

    def _claim(self, query_id: str, *, durable: bool) -> bool:
        with self._store.write(charge=True, durable=durable) as conn:
            if conn.execute(
                "SELECT 1 FROM queries WHERE query_id = ?"
                " UNION ALL SELECT 1 FROM audit WHERE query_id = ?"
                " UNION ALL SELECT 1 FROM pruned WHERE digest = ? LIMIT 1",
                (query_id, query_id, digest(query_id)),
            ).fetchone():
                return False
            conn.execute("INSERT INTO queries(query_id, at) VALUES (?, ?)", (query_id, time.time()))
        return True

    def _settle(self) -> None:
        self._store.sync()

    def _recorded(self, query_id: str) -> list[tuple[str, int]]:
        rows = self._store.read("SELECT unit, cost FROM audit WHERE query_id = ?", (query_id,))
        return [(unit, int(cost)) for unit, cost in rows]

    def _remaining(self, units: list[str]) -> dict[str, int]:
        rows = self._store.read(
            "SELECT j.value, coalesce(u.remaining, ?) FROM json_each(?) AS j"
            " LEFT JOIN units AS u ON u.unit = j.value",
            (self._budget, json.dumps(units)),
        )
        return {unit: int(left) for unit, left in rows}

    def _audit_rows(self, last: int | None = None) -> Iterator[tuple[str, str, int, float]]:
        if last is None:
            return iter(self._store.read("SELECT query_id, unit, cost, at FROM audit ORDER BY seq"))
        rows = self._store.read(  # the primary key, read backwards
            "SELECT query_id, unit, cost, at FROM audit ORDER BY seq DESC LIMIT ?", (last,)
        )
        return iter(rows[::-1])

    def _total_spent(self) -> int:
        return int(self._store.read("SELECT value FROM meta WHERE key = 'spent'")[0][0])

    def _status(self, min_cost: int) -> LedgerStatus:
        b = self._budget
        row, *_ = self._store.read(
            "SELECT (SELECT count(*) FROM units), (SELECT count(*) FROM units WHERE remaining < ?),"
            " CASE WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'queries')"  # kept (version 4)
            " THEN (SELECT value FROM meta WHERE key = 'queries')"
            " ELSE (SELECT count(DISTINCT query_id) FROM audit) END,"
            " (SELECT at FROM audit ORDER BY seq DESC LIMIT 1),"
            " (SELECT value FROM meta WHERE key = 'spent'),"
            " (SELECT value FROM meta WHERE key = 'refusals')",
            (min_cost,),
        )
        bins = [0] * HISTOGRAM_BINS
        for k, n in self._store.read(
            "SELECT min((? - remaining) * ? / ?, ?), count(*) FROM units GROUP BY 1",
            (b, HISTOGRAM_BINS, b, HISTOGRAM_BINS - 1),
        ):
            bins[int(k)] = int(n)
        return self._make_status(row, bins)

    def prune(self, *, before: float) -> int:
        """Delete the claims and audit rows stamped before ``before`` (UNIX seconds, the new
        public watermark), keeping their query ids' digests: a pruned id stays refused.
        Totals (spent, what each unit has left, queries, refusals) are unchanged. Returns
        the number of query ids pruned (:mod:`~dprag_core.accounting.stores.retention`).

        >>> import os, tempfile, time
        >>> led = SQLiteLedger(os.path.join(tempfile.mkdtemp(), "p.db"), budget_per_unit=1.0,
        ...                    create=True)
        >>> _ = led.charge("q1", ["a"], 0.5)
        >>> led.prune(before=time.time()), led.remaining(["a"]), list(led.audit_log())
        (1, {'a': 0.5}, [])
        >>> led.claim("q1")
        Traceback (most recent call last):
        ...
        dprag_core.accounting.stores.errors.QueryIdReused: query_id was already recorded ...
        """
        with self._store.write() as conn:
            (recorded,) = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
            watermark = check_watermark(before, recorded_us=int(recorded))
            cut = watermark / 1_000_000.0
            ids = {
                q
                for (q,) in conn.execute(
                    "SELECT query_id FROM queries WHERE at < ?"
                    " UNION SELECT query_id FROM audit WHERE at < ?",
                    (cut, cut),
                )
            }
            conn.executemany(
                "INSERT OR IGNORE INTO pruned(digest) VALUES (?)", ((digest(q),) for q in ids)
            )
            conn.execute("UPDATE meta SET value = ? WHERE key = 'watermark'", (watermark,))
            conn.execute("DELETE FROM queries WHERE at < ?", (cut,))
            conn.execute("DELETE FROM audit WHERE at < ?", (cut,))
        return len(ids)

    def close(self) -> None:
        """Close this thread's connection (other threads close their own on exit)."""
        self._store.close()

    def __repr__(self) -> str:
        return f"SQLiteLedger(path={str(self.path)!r}, budget_per_unit={self.budget_per_unit!r})"
