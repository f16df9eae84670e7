"""One SQLite file of budget stores, shared by threads and processes.

A file holds any number of dprag stores (one per-unit ledger, corpus budgets
under table prefixes), each listed in the file's ``dprag_stores`` table with
its kind, its identity (``name``), its objects and its schema version.

* **Nothing is written to a file before it is known to be dprag's.** Opening
  reads the file's catalog over a read-only connection first. A file that is
  not a SQLite database, or that holds a table, index, view or trigger that no
  listed store owns (another application's database), is refused untouched:
  no WAL switch, no tables, no triggers. Files written before stores were
  listed are recognised by their exact tables, columns and triggers and
  listed on their first writable open.
* **No silent fresh stores.** A missing file or store is created only when
  asked (``create=True``); otherwise the error names the absolute path.
* New files are created with mode 0600 (owner only: they hold unit ids, query
  ids and times), whatever the umask; SQLite gives its ``-wal`` and ``-shm``
  files the database file's mode. An existing file keeps its mode.
* **Read-only.** A file this process cannot write (or ``read_only=True``)
  opens read-only (``mode=ro``): reads work, a charge raises
  :class:`~dprag_core.accounting.stores.errors.LedgerUnavailable`. On
  read-only media, where SQLite cannot create its ``-shm`` file, it falls back
  to ``immutable=1`` (the file must then not change while it is open: a
  backup or a replica's copy).
* A write is one ``BEGIN IMMEDIATE`` transaction. Writers of this file first
  queue on an exclusive ``flock`` of a sidecar ``-lock`` file (0600), which
  the kernel hands to a blocked waiter as soon as it is released: SQLite's own
  busy handler sleeps in growing steps and lets a waiting writer starve under
  contention. Both waits are bounded by ``busy_timeout``.
* **Durable, with group commit.** WAL with ``synchronous=NORMAL`` (SQLite
  syncs around checkpoints) and an ``fsync`` of the WAL file after every
  commit, before :meth:`SQLiteStore.write` returns: a committed write survives
  a crash or power loss. The fsync runs after the writers' queue is released,
  so the fsyncs of several processes overlap (one device flush serves them
  all) instead of each writer holding the queue through its own. Checkpoints
  run passively in a background thread every :data:`CHECKPOINT_EVERY` commits
  of a process, never inside a commit or a charge. A
  charge whose ``COMMIT`` or fsync fails has an unknown outcome
  (:class:`~dprag_core.accounting.stores.errors.LedgerOutcomeUnknown`).

Each thread (and each process, after a fork) opens its own connection.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "s.db")
>>> store = SQLiteStore(path, busy_timeout=5.0, create=True, label="test store")
>>> spec = SQLiteSpec("t", "test", ("t",), ("CREATE TABLE IF NOT EXISTS t (x INTEGER)",))
>>> store.open(spec, create=True, name="demo")
'demo'
>>> oct(os.stat(store.path).st_mode & 0o777), store.read("SELECT count(*) FROM t")
('0o600', [(0,)])
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dprag_core.accounting.stores import places, registry
from dprag_core.accounting.stores.amounts import open_options
from dprag_core.accounting.stores.errors import (
    LedgerOutcomeUnknown,
    LedgerUnavailable,
    incomplete,
)
from dprag_core.validation import positive_finite

try:  # POSIX only; elsewhere SQLite's busy handler alone queues writers
    import fcntl
except ImportError:  # pragma: no cover - depends on the platform
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CATALOG",
    "CHECKPOINT_EVERY",
    "FILE_MODE",
    "RESTORE",
    "SQLiteSpec",
    "SQLiteStore",
    "busy",
    "damaged",
    "move_file",
    "open_sqlite",
]

FILE_MODE = 0o600
"""Mode of a newly created store file (and, through SQLite, of its -wal and -shm)."""

CHECKPOINT_EVERY = 64
"""Commits of one process between two passive checkpoints (run by a background thread)."""

CATALOG = "dprag_stores"
"""The table that lists a file's stores: key, kind, name, objects, version, created."""

_CATALOG_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CATALOG} (store TEXT PRIMARY KEY, kind TEXT NOT NULL,"
    " name TEXT NOT NULL, objects TEXT NOT NULL, version INTEGER NOT NULL, created REAL NOT NULL)"
)
APPLICATION_ID = 0x64707267
"""The header's application id of a dprag budget file ("dprg"), rewritten by every commit."""

_INTERNAL = ("sqlite_", CATALOG)  # SQLite's own objects (sqlite_sequence, sqlite_stat1, ...)
_LOG = re.compile(r"audit|queries|pruned|[a-z_][a-z0-9_]*_(charges|pruned)")
"""The append-only logs (checked along their first and last paths at open)."""

# Connections inherited through fork() are never closed by the child (closing
# them could disturb the parent's locks); they are parked here instead.
_INHERITED: list[Any] = []


@dataclass(frozen=True)
class SQLiteSpec:
    """One kind of store in a file: its catalog key, kind, objects and creation statements.

    ``ddl`` runs (with ``params``, one tuple per statement) in the creating
    transaction; ``migrate`` (idempotent) runs when a store is listed in the
    catalog for the first time (files written before the catalog existed) and
    when a store listed with an older ``version`` is opened writable (read-only,
    it is used as that version listed it). ``version`` is the schema version
    recorded.

    >>> SQLiteSpec("ledger", "per-unit ledger", ("units",), ()).version
    2
    """

    key: str
    kind: str
    objects: tuple[str, ...]
    ddl: tuple[str, ...]
    params: tuple[tuple[Any, ...], ...] = ()
    migrate: tuple[str, ...] = ()
    version: int = 2


@dataclass(frozen=True)
class _Listed:
    kind: str
    name: str
    objects: tuple[str, ...]
    legacy: bool
    version: int = 0


# Stores written before the catalog existed, recognised by exact tables, columns and
# triggers (a look-alike of another application is not enough: its columns differ).
_LEGACY_LEDGER = {
    "meta": ("key", "value"),
    "units": ("unit", "remaining"),
    "audit": ("seq", "query_id", "unit", "cost", "at"),
}
_LEGACY_LEDGER_EXTRA = ("audit_no_update", "audit_no_delete")
_LEGACY_BUDGET = ("id", "total_epsilon", "total_delta", "spent_epsilon", "spent_delta", "queries")
_LEGACY_CHARGES = ("query_id", "epsilon", "delta", "at")


def unavailable(label: str, exc: sqlite3.Error) -> LedgerUnavailable:
    """A :class:`LedgerUnavailable` naming the store and SQLite's error code (never an id).

    >>> str(unavailable("per-unit ledger in '/l.db'", sqlite3.OperationalError("x")))
    "the per-unit ledger in '/l.db' is unavailable (OperationalError)"
    """
    code = getattr(exc, "sqlite_errorname", type(exc).__name__)
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return damaged(label, f"its pages are damaged ({code})")
    if code in ("SQLITE_ERROR", "SQLITE_MISMATCH", "SQLITE_FORMAT", "SQLITE_SCHEMA"):
        return damaged(label, f"its tables are not the ones its catalog lists ({code})")
    if code.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH", "SQLITE_IOERR")):
        return LedgerUnavailable(
            f"the {label} cannot be opened ({code}): check the file, its directory, their "
            "owner and mode, and the disk"
        )
    return LedgerUnavailable(f"the {label} is unavailable ({code})")


def busy(exc: sqlite3.Error) -> bool:
    """True when ``exc`` is SQLite's ``SQLITE_BUSY`` or ``SQLITE_LOCKED`` (or one of their
    extended codes, which keep the primary code in their low byte), read from its error code.

    >>> err = sqlite3.OperationalError("database is locked")
    >>> err.sqlite_errorcode = sqlite3.SQLITE_BUSY
    >>> busy(err), busy(sqlite3.OperationalError("no such table: t"))
    (True, False)
    """
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


RESTORE = (
    "restore it from its latest backup (sqlite3 .backup) and charge back what was spent "
    "since (docs/ledgers.md, Backups)"
)
"""The fix every damaged-file message names."""


def damaged(label: str, why: str, fix: str = RESTORE) -> LedgerUnavailable:
    """The one-line refusal of a damaged or foreign file: what is wrong and the fix.

    >>> print(damaged("budget file '/b.db'", "it is a directory", "give the .db file"))
    the budget file '/b.db' cannot be used: it is a directory; nothing was written to it: give ...
    """
    return LedgerUnavailable(f"the {label} cannot be used: {why}; nothing was written to it: {fix}")


_MAGIC = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)


@dataclass(frozen=True)
class _Header:
    page_size: int
    identity: int  # the header's user_version: the file's random identity (0: none recorded)


def _read_header(path: Path, label: str) -> _Header | None:
    """The database header of ``path`` checked against SQLite's file format (None: empty).

    Catches what SQLite would read as another database or trip over later: a
    file that is not SQLite's, a truncated file (shorter than its header says
    or not a whole number of pages), impossible header fields, and a ``-wal``
    file beside it that is not a WAL of this page size.
    """
    with open(path, "rb") as file:
        head = file.read(100)
        size = os.fstat(file.fileno()).st_size
    if size == 0:
        return None
    if not _MAGIC.startswith(head[: len(_MAGIC)]) or len(head) < len(_MAGIC):
        if _MAGIC.startswith(head) and len(head) < len(_MAGIC):
            raise damaged(label, f"the file is truncated ({size} bytes)")
        raise damaged(
            label,
            "the file is not a SQLite database",
            "point to the budget's own .db file, or " + RESTORE,
        )
    if len(head) < 100:
        raise damaged(label, f"the file is truncated ({size} bytes, shorter than its header)")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1) or head[18] not in (1, 2) or head[19] not in (1, 2):
        raise damaged(label, "its header is damaged (page size or format version)")
    if head[21:24] != b"\x40\x20\x20" or int.from_bytes(head[44:48], "big") not in range(5):
        raise damaged(label, "its header is damaged (payload fractions or schema format)")
    if int.from_bytes(head[56:60], "big") not in range(4):
        raise damaged(label, "its header is damaged (text encoding)")
    pages = int.from_bytes(head[28:32], "big")
    if size % page or (head[24:28] == head[92:96] and pages * page > size):
        raise damaged(label, f"the file is truncated ({size} bytes: fewer pages than it lists)")
    _check_wal(path, page, label)
    return _Header(page, int.from_bytes(head[60:64], "big"))


def _check_wal(path: Path, page: int, label: str) -> None:
    """Refuse a ``-wal`` file beside ``path`` that cannot be this database's (wrong magic or
    page size): SQLite would replay it onto the file."""
    wal = path.with_name(path.name + "-wal")
    try:
        with open(wal, "rb") as file:
            head = file.read(32)
    except FileNotFoundError:
        return
    except OSError:  # unreadable: SQLite reports it when it opens the file
        return
    if not head:
        return
    if (
        len(head) < 32
        or int.from_bytes(head[:4], "big") not in _WAL_MAGIC
        or int.from_bytes(head[8:12], "big") != page
    ):
        raise foreign_wal(label, wal)


def foreign_wal(label: str, wal: Path) -> LedgerUnavailable:
    """The refusal of a ``-wal`` file that belongs to another database."""
    return damaged(
        label,
        f"the write-ahead log {str(wal)!r} beside it belongs to another database (a copy "
        "placed next to another store's stale -wal?)",
        f"stop every process using the file, move {wal.name!r} (and {wal.name[:-4]}-shm) "
        "out of the directory, then open it again",
    )


def _migrate(conn: sqlite3.Connection, statements: Sequence[str]) -> None:
    """Run migration statements; an ``ALTER TABLE t ADD COLUMN c`` whose column exists is
    skipped (SQLite has no ``IF NOT EXISTS`` there), so every migration is idempotent."""
    for stmt in statements:
        words = stmt.split()
        if words[:2] == ["ALTER", "TABLE"] and words[3:5] == ["ADD", "COLUMN"]:
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{words[2]}")')}
            if words[5] in columns:
                continue
        conn.execute(stmt)


def _checked_path(path: object) -> Path:
    """``path`` as a Path, refusing what is not a database file path."""
    if not isinstance(path, (str, os.PathLike)) or str(path) in ("", ":memory:"):
        raise ValueError("path must be a database file path (use an in-memory class instead)")
    return Path(path)


def _create_private(path: Path, label: str) -> None:
    """Create ``path`` empty with mode 0600 (whatever the umask) unless it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        why = errno.errorcode.get(exc.errno or 0, "?")
        raise LedgerUnavailable(f"the {label} cannot be created ({why})") from None
    os.close(fd)


# fdatasync, as SQLite's own syncs: the WAL's data and size, not its mtime (which would
# cost a journal commit per charge); plain fsync where the platform has no fdatasync
_datasync = getattr(os, "fdatasync", os.fsync)


def _flock_within(fd: int, timeout: float) -> bool:
    """Take an exclusive flock on ``fd`` within ``timeout`` seconds; False if not.

    A blocked ``flock`` is woken by the kernel the moment the holder releases
    (no polling, so no waiter starves behind a writer that re-locks at once).
    The blocking call runs in a helper thread so that the wait is bounded; a
    helper that gets the lock after its caller gave up closes ``fd``, which
    releases it. On False the caller no longer owns ``fd``.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    got, guard, gave_up = threading.Event(), threading.Lock(), [False]

    def take() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with guard:
            if gave_up[0]:
                os.close(fd)
            else:
                got.set()

    threading.Thread(target=take, daemon=True).start()
    if got.wait(timeout):
        return True
    with guard:
        gave_up[0] = not got.is_set()
        return got.is_set()


def _checkpointer(ref: weakref.ref[SQLiteStore], due: threading.Event) -> None:
    """Copy the WAL into the database file, passively (writers go on meanwhile), when woken;
    ends once its store is gone."""
    while True:
        woken = due.wait(timeout=30.0)
        store = ref()
        if store is None:
            return
        if woken:
            due.clear()
            with contextlib.suppress(sqlite3.Error, LedgerUnavailable):  # busy: the next one
                store.conn().execute("PRAGMA wal_checkpoint(PASSIVE)")
        del store


class SQLiteStore:
    """A SQLite file of dprag stores, opened per thread, read-only when it cannot be written.

    ``label`` names the store in every message ("corpus budget 'corpus' in
    '/srv/b.db'"). The constructor refuses a missing file unless ``create``,
    and a file that is not dprag's before anything is written to it.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.db")
    >>> SQLiteStore(path, busy_timeout=1.0, label="store")
    Traceback (most recent call last):
    ...
    dprag_core.accounting.stores.errors.LedgerUnavailable: no store exists ...
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float,
        label: str,
        create: bool = False,
        read_only: bool = False,
    ) -> None:
        self.timeout = positive_finite("busy_timeout", busy_timeout)
        self.path = _checked_path(path)
        self.label = label
        self._local = threading.local()
        self._immutable = False
        self.identity = 0
        """The file's random identity (its header's ``user_version``; 0: none recorded)."""
        self._dir_synced = -1
        self._commits = 0
        self._checkpoint_due = threading.Event()
        self._checkpointer_pid = -1
        if not self.path.exists():
            if not create or read_only:
                raise LedgerUnavailable(
                    f"no {label} exists (the file is missing): pass create=True to create it "
                    "(a relative path is resolved against the working directory: open a "
                    "budget by its name, or by an absolute path)"
                )
            _create_private(self.path, label)
        self.read_only = read_only or not os.access(self.path, os.W_OK)
        self._creating = create and not self.read_only
        self._names: set[str] = set()
        self._listed = self._inspect_when_free()

    def _inspect_when_free(self) -> dict[str, _Listed]:
        """:meth:`_inspect`, again while another process holds the file busy (a creator
        switching it to WAL answers SQLITE_BUSY at once, past SQLite's busy handler), for
        at most ``busy_timeout``."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._inspect()
            except sqlite3.Error as exc:  # busy or locked: _inspect maps every other error
                if time.monotonic() >= deadline:
                    raise unavailable(self.label, exc) from None
            time.sleep(0.01)

    # -- opening -----------------------------------------------------------------

    def _connect_read_only(self) -> sqlite3.Connection:
        """``mode=ro``, or ``immutable=1`` where SQLite cannot create its -shm (read-only media)."""
        base = f"file:{quote(str(self.path.resolve()))}"
        for query in ("immutable=1",) if self._immutable else ("mode=ro", "immutable=1"):
            conn = sqlite3.connect(
                f"{base}?{query}", uri=True, timeout=self.timeout, isolation_level=None
            )
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError as exc:
                conn.close()
                name = getattr(exc, "sqlite_errorname", "")
                if query == "mode=ro" and name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
                    self._immutable = True
                    continue
                raise
            return conn
        raise AssertionError("unreachable")  # pragma: no cover

    def _inspect(self) -> dict[str, _Listed]:
        """The stores this file holds; refuses a file that is not dprag's (nothing written)."""
        if self.path.is_dir():
            raise damaged(
                self.label, "it is a directory, not a budget file", "give the path of the .db file"
            )
        try:
            header = _read_header(self.path, self.label)
        except OSError as exc:
            raise LedgerUnavailable(
                f"the {self.label} cannot be read ({exc.strerror}): check its owner and mode"
            ) from None
        if header is None:  # an empty file: a store is created in it, or none exists
            if not self._creating:
                raise damaged(
                    self.label,
                    "the file is empty (0 bytes)",
                    "create a budget with `dprag ledger init`, or " + RESTORE,
                )
            return {}
        conn = None
        try:
            conn = self._connect_read_only()
            (seen,) = conn.execute("PRAGMA user_version").fetchone()
            if header.identity and seen != header.identity:  # pages replayed from another WAL
                raise foreign_wal(self.label, self.path.with_name(self.path.name + "-wal"))
            self.identity = int(seen)
            kinds = dict(conn.execute("SELECT name, type FROM sqlite_master").fetchall())
            names = set(kinds)
            listed = self._listed_in(conn, names)
            self._check_tables(conn, [n for n, k in kinds.items() if k == "table"])
        except (ValueError, TypeError, AttributeError):  # values no dprag version writes
            raise damaged(self.label, "its store catalog is damaged") from None
        except sqlite3.Error as exc:
            if busy(exc):  # another process holds the file: _inspect_when_free tries again
                raise
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB":
                raise damaged(
                    self.label,
                    "the file is not a SQLite database (or its header is damaged)",
                    "point to the budget's own .db file, or " + RESTORE,
                ) from None
            raise unavailable(self.label, exc) from None
        finally:
            if conn is not None:
                conn.close()
        self._names = names
        owned = {n for s in listed.values() for n in s.objects}
        foreign = [n for n in names - owned if not n.startswith(_INTERNAL)]
        if foreign:
            raise LedgerUnavailable(
                f"the {self.label} cannot be opened: the file holds {len(foreign)} table(s), "
                "index(es) or trigger(s) that no dprag store owns (another application's "
                "database?); nothing was written to it: give the budget a file of its own"
            )
        return listed

    @staticmethod
    def _listed_in(conn: sqlite3.Connection, names: set[str]) -> dict[str, _Listed]:
        listed: dict[str, _Listed] = {}
        if CATALOG in names:
            for key, kind, name, objects, version in conn.execute(
                f"SELECT store, kind, name, objects, version FROM {CATALOG}"
            ):
                if not all(isinstance(v, str) for v in (key, kind, name, objects)):
                    raise ValueError("a catalog row holds a value no dprag version writes")
                listed[key] = _Listed(kind, name, tuple(objects.split()), False, int(version))

        def columns(table: str) -> tuple[str, ...]:
            return tuple(row[1] for row in conn.execute(f'PRAGMA table_info("{table}")'))

        if (
            "ledger" not in listed
            and all(x in names for x in _LEGACY_LEDGER_EXTRA)
            and all(t in names and columns(t) == cols for t, cols in _LEGACY_LEDGER.items())
        ):
            objects = (*_LEGACY_LEDGER, *_LEGACY_LEDGER_EXTRA, "audit_query")
            listed["ledger"] = _Listed("per-unit ledger", "ledger", objects, legacy=True)
        for table in sorted(names):
            prefix = table[: -len("_budget")]
            key = f"corpus:{prefix}"
            charges = f"{prefix}_charges"
            extra = (f"{charges}_no_update", f"{charges}_no_delete")
            if (
                table.endswith("_budget")
                and key not in listed
                and charges in names
                and all(x in names for x in extra)
                and columns(table) == _LEGACY_BUDGET
                and columns(charges) == _LEGACY_CHARGES
            ):
                objects = (table, charges, *extra)
                listed[key] = _Listed("corpus budget", prefix, objects, legacy=True)
        return listed

    def _check_tables(self, conn: sqlite3.Connection, tables: list[str]) -> None:
        """The integrity check at open, before anything is read or charged: every table
        that holds a budget's state (the catalog, totals, what units have left) in full
        (``PRAGMA quick_check``, its pages only); each append-only log (audit, charges,
        claims) along its first and last paths, where reads and appends go. Its cost
        does not grow with the logs (:meth:`check` reads every page)."""
        for table in tables:
            if table.startswith("sqlite_"):
                continue
            if not _LOG.fullmatch(table):
                self._quick_check(conn, table)
                continue
            conn.execute(f'SELECT * FROM "{table}" LIMIT 1').fetchall()
            with contextlib.suppress(sqlite3.OperationalError):  # WITHOUT ROWID: no rowid
                conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid DESC LIMIT 1').fetchall()

    def _quick_check(self, conn: sqlite3.Connection, table: str) -> None:
        """``PRAGMA quick_check`` of one table and its indexes (its pages only: cheap for the
        small tables that hold a budget's state); a failure refuses the file."""
        rows = conn.execute(f'PRAGMA quick_check("{table}")').fetchall()
        if rows != [("ok",)]:
            raise damaged(self.label, f"the integrity check of its table {table!r} failed")

    def check(self) -> int:
        """``PRAGMA quick_check`` of the whole file (every page; a second or so per GiB);
        raises :class:`LedgerUnavailable` naming the file and the fix, else returns the
        number of stores it holds."""
        try:
            rows = self.conn().execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as exc:
            raise unavailable(self.label, exc) from None
        if rows != [("ok",)]:
            raise damaged(self.label, f"the integrity check found {len(rows)} problem(s)")
        return len(self._listed)

    def listed(self) -> list[tuple[str, str, str]]:
        """(kind, catalog key, name) of every store this file holds, sorted by kind and key.

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "e.db")
        >>> SQLiteStore(path, busy_timeout=1.0, label="file", create=True).listed()
        []
        """
        return sorted((s.kind, key, s.name) for key, s in self._listed.items())

    def open(self, spec: SQLiteSpec, *, create: bool, name: str | None) -> str:
        """Open (or, with ``create``, create) the store ``spec``; return its recorded name.

        ``name``: the identity to record when creating (default: the catalog
        key's last part) or to check when opening (None: any).
        """
        found = self._listed.get(spec.key)
        if found is None:
            present = [n for n in spec.objects if n in self._names]
            if present:
                raise incomplete(self.label, [n for n in spec.objects if n not in present])
            if not create:
                raise LedgerUnavailable(
                    f"no {self.label} exists: pass create=True to create it (a relative path "
                    "is resolved against the working directory)"
                )
            if self.read_only:
                raise LedgerUnavailable(f"no {self.label} exists, and the file is read-only")
            found = self._create(spec, name or spec.key.rsplit(":", 1)[-1])
        if found.kind != spec.kind:
            raise LedgerUnavailable(f"the {self.label} is a {found.kind}, not a {spec.kind}")
        if name is not None and name != found.name:
            raise LedgerUnavailable(
                f"the {self.label} is named {found.name!r}, not {name!r}: it is another "
                "store (check the path, the table and the name)"
            )
        if found.legacy:  # recognised by its tables and triggers: listed when writable
            if not self.read_only:
                self._adopt(spec, found)
            return found.name
        expected = spec.objects
        if found.version < spec.version:  # listed by an earlier version
            if self.read_only:
                expected = tuple(n for n in spec.objects if n in found.objects)
            else:
                found = self._upgrade(spec, found)
        absent = [n for n in expected if n not in found.objects or n not in self._names]
        if absent:
            raise incomplete(self.label, absent)
        return found.name

    def _create(self, spec: SQLiteSpec, name: str) -> _Listed:
        with self.write() as conn:
            conn.execute(_CATALOG_DDL)
            row = conn.execute(
                f"SELECT kind, name, objects, version FROM {CATALOG} WHERE store = ?",
                (spec.key,),
            ).fetchone()
            if row is not None:  # another process created it meanwhile
                self._names.update(row[2].split())
                return _Listed(row[0], row[1], tuple(row[2].split()), False, int(row[3]))
            params = spec.params or ((),) * len(spec.ddl)
            for stmt, args in zip(spec.ddl, params, strict=True):
                conn.execute(stmt, args)
            self._list(conn, spec, name)
            stamped = self._stamp(conn)
        if stamped:  # the header on disk carries it from now on (a stale -wal is then seen)
            with contextlib.suppress(sqlite3.Error):
                self.conn().execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._names.update(spec.objects)
        self._listed[spec.key] = _Listed(spec.kind, name, spec.objects, False, spec.version)
        return self._listed[spec.key]

    def _upgrade(self, spec: SQLiteSpec, found: _Listed) -> _Listed:
        """Bring a store listed by an earlier version up to ``spec`` (its ``migrate``)."""
        if any(n not in self._names for n in found.objects):
            raise incomplete(self.label, [n for n in found.objects if n not in self._names])
        with self.write() as conn:
            row = conn.execute(
                f"SELECT version FROM {CATALOG} WHERE store = ?", (spec.key,)
            ).fetchone()
            if row is not None and int(row[0]) < spec.version:  # not upgraded meanwhile
                _migrate(conn, spec.migrate)
                conn.execute(
                    f"UPDATE {CATALOG} SET objects = ?, version = ? WHERE store = ?",
                    (" ".join(spec.objects), spec.version, spec.key),
                )
                self._stamp(conn)
        self._names.update(spec.objects)
        self._listed[spec.key] = _Listed(found.kind, found.name, spec.objects, False, spec.version)
        return self._listed[spec.key]

    def _adopt(self, spec: SQLiteSpec, found: _Listed) -> None:
        """List a store written before the catalog existed (and bring its schema up to date)."""
        with self.write() as conn:
            conn.execute(_CATALOG_DDL)
            if conn.execute(f"SELECT 1 FROM {CATALOG} WHERE store = ?", (spec.key,)).fetchone():
                return  # adopted meanwhile by another process
            _migrate(conn, spec.migrate)
            self._list(conn, spec, found.name)
            self._stamp(conn)
        self._listed[spec.key] = _Listed(spec.kind, found.name, spec.objects, False, spec.version)

    def _stamp(self, conn: sqlite3.Connection) -> bool:
        """Give the file a random identity in its header (``user_version``) unless it has one:
        a ``-wal`` whose pages carry another identity is refused at open."""
        (current,) = conn.execute("PRAGMA user_version").fetchone()
        if current:
            return False
        self.identity = secrets.randbelow(2**31 - 1) + 1
        conn.execute(f"PRAGMA user_version = {self.identity}")
        return True

    @staticmethod
    def _list(conn: sqlite3.Connection, spec: SQLiteSpec, name: str) -> None:
        conn.execute(
            f"INSERT INTO {CATALOG} VALUES (?, ?, ?, ?, ?, ?)",
            (spec.key, spec.kind, name, " ".join(spec.objects), spec.version, time.time()),
        )

    # -- connections and transactions ---------------------------------------------

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, and again after a fork)."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            return conn
        if conn is not None:
            _INHERITED.append(conn)
        try:
            if self.read_only:
                conn = self._connect_read_only()
            else:
                conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
                conn.execute("PRAGMA journal_mode = WAL")
                # commits are made durable by write()'s own fsync of the WAL, outside the
                # writers' queue; checkpoints run there too (_checkpoint), never inside it
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        except sqlite3.Error as exc:
            raise unavailable(self.label, exc) from None
        local.conn, local.pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """Hold the sidecar flock for one write transaction (bounded by ``busy_timeout``)."""
        if fcntl is None:  # pragma: no cover - depends on the platform
            yield
            return
        try:
            fd = os.open(
                self.path.with_name(self.path.name + "-lock"), os.O_RDWR | os.O_CREAT, FILE_MODE
            )
        except OSError:  # e.g. a read-only directory: SQLite's busy handler still queues
            yield
            return
        if not _flock_within(fd, self.timeout):
            raise LedgerUnavailable(f"the {self.label} stayed locked longer than busy_timeout")
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor releases its flock

    @contextlib.contextmanager
    def write(self, *, charge: bool = False, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on exit, rolled back on error.

        ``charge``: a failing ``COMMIT`` raises :class:`LedgerOutcomeUnknown`
        (the write may have reached the disk) instead of ``LedgerUnavailable``.
        ``durable=False``: return after the commit, without the WAL's fsync
        (other connections see the write at once); the next fsync of the WAL
        (any write's, or :meth:`sync`) makes it durable with everything before it.
        """
        if self.read_only:
            raise LedgerUnavailable(f"the {self.label} is read-only for this process")
        conn = self.conn()
        committed = False
        with self._writer_turn():
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise unavailable(self.label, exc) from None
            if conn.in_transaction:
                try:
                    # page 1 (the header, with the file's identity) goes into every commit's
                    # WAL frames: a -wal of another file is then seen at open (_inspect)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if charge:
                        raise self._unknown() from None
                    raise unavailable(self.label, exc) from None
                committed = True
        if committed and durable:  # the queue is free again: fsyncs of several writers overlap
            self._make_durable(charge)

    def sync(self) -> None:
        """Make every commit to the file so far durable: fsync the WAL (:meth:`write`).

        A failing fsync raises :class:`LedgerOutcomeUnknown`: what was committed
        without it may or may not survive a crash.
        """
        if self.read_only:
            raise LedgerUnavailable(f"the {self.label} is read-only for this process")
        self._make_durable(True)

    def _unknown(self) -> LedgerOutcomeUnknown:
        return LedgerOutcomeUnknown(
            f"the {self.label} failed while committing a charge: the outcome is "
            "unknown; release nothing and retry with the same query id"
        )

    def _make_durable(self, charge: bool) -> None:
        """fdatasync the WAL (and once per WAL file its directory): the commit is durable now.

        Group commit: the fsync runs after the writers' queue is released, so the
        fsyncs of several processes overlap and one device flush serves them all.
        A failing fsync leaves a charge's durability unknown. Every
        :data:`CHECKPOINT_EVERY` commits the background checkpointer is woken.
        """
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:  # checkpointed and removed: the database file holds it all
            return
        try:
            _datasync(fd)
            info = os.fstat(fd)
            if info.st_ino != self._dir_synced:  # a new WAL file: its directory entry too
                dir_fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
                self._dir_synced = info.st_ino
        except OSError:
            if charge:
                raise self._unknown() from None
            raise LedgerUnavailable(f"the {self.label} could not be made durable") from None
        finally:
            os.close(fd)
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY == 0:
            self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        """Wake this process's checkpointer thread (started on first use, again after a fork)."""
        if self._checkpointer_pid != os.getpid():
            self._checkpointer_pid = os.getpid()
            self._checkpoint_due = threading.Event()
            args = (weakref.ref(self), self._checkpoint_due)
            threading.Thread(target=_checkpointer, args=args, daemon=True, name="dprag-wal").start()
        self._checkpoint_due.set()

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """All rows of one read (no transaction needed: WAL readers never block)."""
        try:
            return self.conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise unavailable(self.label, exc) from None

    def close(self) -> None:
        """Close this thread's connection (other threads close their own on exit)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            conn.close()
        local.conn = None


def open_sqlite(
    path: str | os.PathLike[str] | None,
    spec: SQLiteSpec,
    *,
    what: str,
    name: object,
    create: object,
    read_only: object,
    busy_timeout: float,
    needs: str | None,
) -> tuple[SQLiteStore, str]:
    """A budget's constructor, once: options checked, the file found or opened, ``spec`` opened.

    ``path`` None: the store named ``name`` in the per-user budget directory
    (:mod:`~dprag_core.accounting.stores.places`: registered, else
    ``<name>.db``). Creating refuses a relative path, and, when a ``name`` is
    given, a second store of the same kind and name on this host
    (``places.claim``). ``what`` names the
    store in messages (the label adds the file's path); ``needs``: the
    parameter creating requires and the caller left out. Returns the store and
    the store's recorded name.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "b.db")
    >>> spec = SQLiteSpec("t", "test", ("t",), ("CREATE TABLE IF NOT EXISTS t (x INTEGER)",))
    >>> store, name = open_sqlite(path, spec, what="test store", name=None, create=True,
    ...                           read_only=False, busy_timeout=5.0, needs=None)
    >>> name, store.label.startswith("test store in ")
    ('t', True)
    """
    checked, create, read_only = open_options(
        name=name, create=create, read_only=read_only, needs=needs
    )
    if path is None:
        if checked is None:
            raise TypeError(
                f"give path (a SQLite file) or name (the {spec.kind}'s identity: without a "
                "path it is kept in the per-user budget directory, found from any directory)"
            )
        file = places.locate(spec.kind, checked, spec.key)
    else:
        file = _checked_path(path)
        if create and not read_only:
            file = places.creatable_path(file)

    def opened() -> tuple[SQLiteStore, str]:
        store = SQLiteStore(
            file,
            busy_timeout=busy_timeout,
            create=create,
            read_only=read_only,
            label=f"{what} in {str(file.absolute())!r}",
        )
        recorded = store.open(spec, create=create, name=checked)
        if not store.read_only:  # a store that charges is the one this host recorded
            registry.verify(spec.kind, recorded, file, store.identity, store.label)
        return store, recorded

    if not create or read_only or checked is None:  # no name given: no corpus identity
        return opened()
    registry.check_create(spec.kind, checked, file.absolute())
    with places.claim(spec.kind, checked, file.absolute(), spec.key):
        store, recorded = opened()
        if registry.lookup(spec.kind, checked) is None:
            registry.record(spec.kind, checked, file, store.identity)
        return store, recorded


def move_file(old: Path, new: Path, *, busy_timeout: float) -> list[tuple[str, str]]:
    """Move the budget file ``old`` to the absolute ``new`` (``dprag ledger move``): an
    online backup copy (mode 0600) checked page by page, the host's and this user's records
    of its named stores pointed at it, then ``old`` and its -wal, -shm and -lock deleted.
    Returns the (kind, name) of its stores. Stop the serving processes first.
    """
    new = places.creatable_path(new)
    if new.exists():
        raise ValueError(f"--to {str(new)!r} exists: give a new file")
    store = SQLiteStore(old, busy_timeout=busy_timeout, label=f"budget file {str(old)!r}")
    if store.read_only:
        raise LedgerUnavailable(
            f"the {store.label} is read-only for this user: move it as its owner"
        )
    stores = store.listed()
    for kind, _, name in stores:
        entry = registry.lookup(kind, name)
        if entry is not None and entry.path != str(old.resolve()):
            raise LedgerUnavailable(
                f"the {store.label} is a copy of the {kind} named {name!r} kept in "
                f"{entry.path!r}: move that one"
            )
    _create_private(new, f"budget file {str(new)!r}")
    source, target = store.conn(), sqlite3.connect(new)
    try:
        source.backup(target)
        target.execute("PRAGMA journal_mode = WAL")
        if target.execute("PRAGMA quick_check").fetchall() != [("ok",)]:
            raise LedgerUnavailable(f"the copy {str(new)!r} failed its integrity check")
    except BaseException:
        target.close()
        new.unlink(missing_ok=True)
        raise
    target.close()
    store.close()
    for kind, key, name in stores:
        registry.record(kind, name, new, store.identity, replace=True)
        places.repoint(kind, name, new, key)
    for tail in ("", "-wal", "-shm", "-lock"):
        old.with_name(old.name + tail).unlink(missing_ok=True)
    return [(kind, name) for kind, _, name in stores]
