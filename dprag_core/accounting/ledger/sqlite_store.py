"""One SQLite file shared by threads and processes: connections, modes, transactions.

Used by :class:`~dprag_core.accounting.ledger.SQLiteLedger` and
:class:`~dprag_core.accounting.SQLiteCorpusAccountant`, which may share a file.

* The file is created with mode 0600 (owner only: it holds unit ids, query ids
  and times); SQLite gives its ``-wal`` and ``-shm`` files the database file's
  mode. An existing file keeps its mode.
* A file this process cannot write is opened read-only: reads work, a charge
  raises :class:`~dprag_core.accounting.ledger.LedgerUnavailable`.
* A write is one ``BEGIN IMMEDIATE`` transaction. Writers of this file first
  queue on an exclusive ``flock`` of a sidecar ``-lock`` file (0600), which
  the kernel hands to a blocked waiter as soon as it is released: SQLite's own
  busy handler sleeps in growing steps and lets a waiting writer starve under
  contention. Both waits are bounded by ``busy_timeout``.
* WAL with ``synchronous=FULL``: a committed write survives a crash or power loss.

Each thread (and each process, after a fork) opens its own connection.

>>> import os, tempfile
>>> store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "s.db"), busy_timeout=5.0, create=True)
>>> with store.write() as conn:
...     _ = conn.execute("CREATE TABLE t (x INTEGER)")
>>> oct(os.stat(store.path).st_mode & 0o777), store.read("SELECT count(*) FROM t")
('0o600', [(0,)])
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dprag_core.accounting.ledger.base import LedgerUnavailable
from dprag_core.validation import positive_finite

try:  # POSIX only; elsewhere SQLite's busy handler alone queues writers
    import fcntl
except ImportError:  # pragma: no cover - depends on the platform
    fcntl = None  # type: ignore[assignment]

__all__ = ["FILE_MODE", "SQLiteStore"]

FILE_MODE = 0o600
"""Mode of a newly created ledger file (and, through SQLite, of its -wal and -shm)."""

# Connections inherited through fork() are never closed by the child (closing
# them could disturb the parent's locks); they are parked here instead.
_INHERITED: list[Any] = []


def unavailable(exc: sqlite3.Error) -> LedgerUnavailable:
    """A :class:`LedgerUnavailable` naming SQLite's error code (never a path or an id).

    >>> str(unavailable(sqlite3.OperationalError("x")))
    'the SQLite ledger is unavailable (OperationalError)'
    """
    code = getattr(exc, "sqlite_errorname", type(exc).__name__)
    return LedgerUnavailable(f"the SQLite ledger is unavailable ({code})")


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise LedgerUnavailable(
            f"the SQLite ledger file cannot be created ({errno.errorcode.get(exc.errno or 0, '?')})"
        ) from None
    os.close(fd)


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


class SQLiteStore:
    """A SQLite file opened per thread, read-only when this process cannot write it.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.db")
    >>> SQLiteStore(path, busy_timeout=1.0, create=True).read_only
    False
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout: float, create: bool = False
    ) -> None:
        self.timeout = positive_finite("busy_timeout", busy_timeout)
        if not isinstance(path, (str, os.PathLike)) or str(path) in ("", ":memory:"):
            raise ValueError("path must be a database file path (use an in-memory class instead)")
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise LedgerUnavailable(
                    f"no budget store at {str(self.path.absolute())!r}: pass create=True to "
                    "create one (a relative path is resolved against the working directory)"
                )
            _create_private(self.path)
        self.read_only = not os.access(self.path, os.W_OK)
        self._local = threading.local()

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
                uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
            else:
                conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        except sqlite3.Error as exc:
            raise unavailable(exc) from None
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
            raise LedgerUnavailable("the SQLite ledger stayed locked longer than busy_timeout")
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor releases its flock

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on exit, rolled back on error."""
        if self.read_only:
            raise LedgerUnavailable("the SQLite ledger file is read-only for this process")
        conn = self.conn()
        with self._writer_turn():
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise unavailable(exc) from None

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """All rows of one read (no transaction needed: WAL readers never block)."""
        try:
            return self.conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise unavailable(exc) from None

    def missing(self, names: Sequence[str]) -> list[str]:
        """The tables, triggers and indexes in ``names`` that this file lacks.

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "m.db")
        >>> SQLiteStore(path, busy_timeout=1.0, create=True).missing(["t"])
        ['t']
        """
        have = {row[0] for row in self.read("SELECT name FROM sqlite_master")}
        return [n for n in names if n not in have]

    def close(self) -> None:
        """Close this thread's connection (other threads close their own on exit)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            conn.close()
        local.conn = None
