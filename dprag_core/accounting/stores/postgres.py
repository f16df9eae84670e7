"""PostgreSQL connections with every wait bounded: timeouts, keepalives, error mapping.

Used by :class:`~dprag_core.accounting.ledger.PostgresLedger` and
:class:`~dprag_core.accounting.PostgresCorpusAccountant` (their one timeout
setting is ``timeouts=``). Every connection sets
(:class:`PostgresTimeouts`, all in seconds):

* ``statement_timeout`` and ``lock_timeout`` (server side): a charge blocked by
  a busy server or by a row another transaction holds is cancelled and rolled
  back, and raises :class:`~dprag_core.accounting.stores.errors.LedgerUnavailable`
  (nothing was charged);
* ``idle_in_transaction_session_timeout``, and on PostgreSQL 14+
  ``client_connection_check_interval`` (1 s): the server ends a statement
  whose client has gone, instead of letting it commit later;
* TCP keepalives and ``tcp_user_timeout``: a dead peer is noticed;
* a client-side deadline (``statement + 2`` seconds): a server that stops
  answering (paused, partitioned) gets its socket closed by this client;
* ``search_path = pg_catalog, pg_temp``: a name in dprag's statements never
  resolves to an object another role planted in a schema the DSN searches
  (every store object is named with its own schema,
  :mod:`~dprag_core.accounting.stores.pgtrust`).

A connection lost while a charge is in flight raises
:class:`~dprag_core.accounting.stores.errors.LedgerOutcomeUnknown`: the server
may have committed it. A retry with the same query id on the same budget
object tells which. Messages name the store (its kind and table prefix) and
never contain the DSN.

>>> PostgresTimeouts().lock
5.0
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dprag_core.accounting.stores.errors import LedgerOutcomeUnknown, LedgerUnavailable
from dprag_core.validation import missing_extra, positive_finite, strict_init

if TYPE_CHECKING:
    import psycopg

__all__ = ["INIT_HINT", "PostgresStore", "PostgresTimeouts", "psycopg_module"]

T = TypeVar("T")
_RETRIES = 20
_GRACE = 2.0
# Once per connection, one round trip: the DSN's first schema (where stores of earlier
# versions were kept), then a search path no other role can plant a name in (pg_temp,
# this session's own, last), and on PostgreSQL 14+ the dead-client check.
_SESSION_BEFORE_14 = (
    "SELECT pg_catalog.current_schema(),"
    " pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)"
)
_SESSION = (
    _SESSION_BEFORE_14
    + ", pg_catalog.set_config('client_connection_check_interval', '1000', false)"
)
INIT_HINT = "run `dprag ledger init` (docs/ledgers.md) as the schema owner"


def psycopg_module() -> Any:
    """psycopg 3, imported lazily (an ImportError says how to install it)."""
    try:
        import psycopg
    except ImportError as exc:
        raise missing_extra("PostgreSQL support", exc, extra="postgres") from exc
    return psycopg


@dataclass(frozen=True)
class PostgresTimeouts:
    """Bounds, in seconds, on every wait of a PostgreSQL corpus budget or per-unit ledger.

    ``connect``: reaching the server. ``statement``: one statement on the
    server (a charge is one statement). ``lock``: waiting for a row lock.
    ``idle_in_transaction``: the server ends a session idle inside a
    transaction. ``keepalive_idle``/``keepalive_interval``/``keepalive_count``:
    TCP keepalive probes (a dead peer is detected after about
    idle + interval·count seconds).

    >>> PostgresTimeouts(statement=2.0).statement
    2.0
    >>> PostgresTimeouts(lock=0)
    Traceback (most recent call last):
    ...
    ValueError: lock must be a finite number > 0, got 0
    >>> PostgresTimeouts(conect=3)
    Traceback (most recent call last):
    ...
    TypeError: PostgresTimeouts got an unknown keyword argument 'conect'; did you mean 'connect'?
    """

    connect: float = 10.0
    statement: float = 10.0
    lock: float = 5.0
    idle_in_transaction: float = 30.0
    keepalive_idle: float = 10.0
    keepalive_interval: float = 5.0
    keepalive_count: int = 3

    def __post_init__(self) -> None:
        for name in (
            "connect",
            "statement",
            "lock",
            "idle_in_transaction",
            "keepalive_idle",
            "keepalive_interval",
            "keepalive_count",
        ):
            positive_finite(name, getattr(self, name))

    def libpq(self) -> dict[str, Any]:
        """The connection parameters that apply these bounds.

        >>> PostgresTimeouts().libpq()["keepalives"]
        1
        """
        dead_peer = self.keepalive_idle + self.keepalive_interval * self.keepalive_count
        return {
            "connect_timeout": max(1, round(self.connect)),
            "keepalives": 1,
            "keepalives_idle": max(1, round(self.keepalive_idle)),
            "keepalives_interval": max(1, round(self.keepalive_interval)),
            "keepalives_count": max(1, round(self.keepalive_count)),
            "tcp_user_timeout": ms(dead_peer),
            "options": (
                f"-c statement_timeout={ms(self.statement)} -c lock_timeout={ms(self.lock)}"
                f" -c idle_in_transaction_session_timeout={ms(self.idle_in_transaction)}"
            ),
        }


PostgresTimeouts.__init__ = strict_init(PostgresTimeouts.__init__)  # type: ignore[method-assign]


def ms(seconds: float) -> int:
    """Whole milliseconds (at least 1) for a PostgreSQL setting.

    >>> ms(0.0001), ms(2.5)
    (1, 2500)
    """
    return max(1, round(seconds * 1000))


class _Deadline:
    """Closes a connection's socket if the server has not answered by the deadline.

    Deadlines are watched by one thread per process (:class:`_Watchdog`), not a
    timer thread per statement: starting a thread waits for the scheduler,
    which on a busy machine costs a charge milliseconds.
    """

    def __init__(self, conn: psycopg.Connection[Any], seconds: float) -> None:
        self.fired = False
        self.at = time.monotonic() + seconds
        self._conn = conn

    def fire(self) -> None:
        self.fired = True
        try:
            sock = socket.socket(fileno=os.dup(self._conn.fileno()))
        except (OSError, ValueError):
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()

    def __enter__(self) -> _Deadline:
        _WATCHDOG.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _WATCHDOG.discard(self)


class _Watchdog:
    """One daemon thread per process that fires the deadlines that pass (every 0.1 s)."""

    TICK = 0.1

    def __init__(self) -> None:
        self._active: set[_Deadline] = set()
        self._lock = threading.Lock()
        self._pid = -1

    def add(self, deadline: _Deadline) -> None:
        with self._lock:
            self._active.add(deadline)
            if self._pid != os.getpid():  # first use, or a forked child: start this one's thread
                self._pid = os.getpid()
                threading.Thread(target=self._run, daemon=True, name="dprag-deadlines").start()

    def discard(self, deadline: _Deadline) -> None:
        with self._lock:
            self._active.discard(deadline)

    def _run(self) -> None:
        while True:
            time.sleep(self.TICK)
            now = time.monotonic()
            with self._lock:
                due = [d for d in self._active if d.at <= now]
                self._active.difference_update(due)
            for d in due:
                d.fire()


_WATCHDOG = _Watchdog()


class PostgresStore:
    """Per-thread psycopg connections to one database, with bounded waits.

    ``label`` names the store in every message ("PostgreSQL corpus budget
    'dprag_corpus'").

    >>> PostgresStore("host=127.0.0.1 port=1", PostgresTimeouts(connect=1),
    ...               label="PostgreSQL corpus budget 'c'").run(lambda conn: None)
    Traceback (most recent call last):
    ...
    dprag_core.accounting.stores.errors.LedgerUnavailable: the PostgreSQL corpus budget 'c' ...
    """

    def __init__(self, dsn: str, timeouts: PostgresTimeouts | None, *, label: str) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn must be a non-empty PostgreSQL connection string")
        timeouts = PostgresTimeouts() if timeouts is None else timeouts
        if not isinstance(timeouts, PostgresTimeouts):
            raise TypeError(f"timeouts must be PostgresTimeouts, got {type(timeouts).__name__}")
        self.__dsn = dsn
        self.timeouts = timeouts
        self.label = label
        self.dsn_schema: str | None = None
        """The schema the DSN's own search path puts first (known once connected)."""
        self._local = threading.local()

    def conn(self) -> psycopg.Connection[Any]:
        """This thread's connection (opened on first use, again after a fork or a loss)."""
        local = self._local
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid() and not conn.closed:
            return conn
        pg = psycopg_module()
        try:
            params = self.timeouts.libpq()
            own = pg.conninfo.conninfo_to_dict(self.__dsn).get("options")
            if own:  # the DSN's own options stay; the bounds are added after them
                params["options"] = f"{own} {params['options']}"
            conn = pg.connect(self.__dsn, autocommit=True, **params)
            row = conn.execute(
                _SESSION if conn.info.server_version >= 140000 else _SESSION_BEFORE_14
            ).fetchone()
        except pg.Error:
            raise LedgerUnavailable(
                f"the {self.label} is unreachable (check the DSN and that the server is up)"
            ) from None
        self.dsn_schema = None if row is None or row[0] is None else str(row[0])
        local.conn, local.pid = conn, os.getpid()
        return conn

    def run(self, work: Callable[[psycopg.Connection[Any]], T], *, charge: bool = False) -> T:
        """Run ``work(conn)`` under the client deadline; retry deadlocks; map failures.

        ``charge``: a lost connection means an unknown outcome
        (:class:`LedgerOutcomeUnknown`) rather than a failed read.
        """
        pg = psycopg_module()
        errors = pg.errors
        for _ in range(_RETRIES):
            conn = self.conn()
            deadline = _Deadline(conn, self.timeouts.statement + _GRACE)
            try:
                with deadline:
                    return work(conn)
            except (errors.DeadlockDetected, errors.SerializationFailure):
                time.sleep(0.001)
                continue
            except errors.ReadOnlySqlTransaction:
                raise LedgerUnavailable(
                    f"the {self.label} is read-only here (a standby or a read-only session):"
                    " charges go to the primary; nothing was charged"
                ) from None
            except (errors.QueryCanceled, errors.LockNotAvailable):
                raise LedgerUnavailable(
                    f"the {self.label} timed out (statement_timeout or lock_timeout);"
                    " nothing was charged"
                ) from None
            except errors.InsufficientPrivilege:
                raise LedgerUnavailable(
                    f"the PostgreSQL role lacks a right the {self.label} needs: see the grants in"
                    " docs/ledgers.md"
                ) from None
            except (errors.UndefinedTable, errors.UndefinedFunction, errors.UndefinedColumn):
                raise LedgerUnavailable(
                    f"the {self.label}'s schema is missing: {INIT_HINT}"
                ) from None
            except pg.OperationalError:
                self.forget(conn)
                why = "stopped answering" if deadline.fired else "lost its connection"
                if charge:
                    raise LedgerOutcomeUnknown(
                        f"the {self.label} {why} during a charge: the outcome is unknown;"
                        " release nothing and retry with the same query id"
                    ) from None
                raise LedgerUnavailable(f"the {self.label} {why}; nothing was charged") from None
        raise LedgerUnavailable(f"the {self.label} kept deadlocking; nothing was charged")

    def forget(self, conn: psycopg.Connection[Any]) -> None:
        """Drop a broken connection (the next call opens a new one)."""
        with contextlib.suppress(Exception):  # it is broken already
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None
