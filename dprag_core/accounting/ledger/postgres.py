"""A PostgreSQL ledger for several serving processes or hosts (psycopg 3).

One charge is one transaction, run server-side by a PL/pgSQL function in one
round trip: insert the units never seen before (with the full
``budget_per_unit``), lock all the query's unit rows in sorted order
(``SELECT ... ORDER BY unit FOR UPDATE``, so overlapping charges queue instead
of deadlocking), and if any unit lacks ``cost`` roll all of it back and return
the lacking units; else debit them with a conditional ``UPDATE ... SET
remaining = remaining - cost WHERE unit = ANY(...) AND remaining >= cost``
whose row count must equal the number of units (else everything rolls back and
the charge is retried), and append the audit rows in the same transaction. A committed
charge is durable (PostgreSQL's WAL), so a crash between the charge and the
release loses budget, never privacy. A deadlock or serialisation failure is
retried; a lost or unreachable server raises :class:`LedgerUnavailable` whose
message never contains the DSN.

Each thread (and each process, after a fork) opens its own connection.
Tables are ``{table}_units``, ``{table}_audit`` and ``{table}_meta``.

>>> led = PostgresLedger("postgresql://user@db/app", budget_per_unit=1.0)  # doctest: +SKIP
>>> led.charge("q1", ["a", "b"], 0.5).granted  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dprag_core._validation import positive_finite
from dprag_core.accounting.ledger.base import Ledger, LedgerUnavailable

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresLedger"]

_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_RETRIES = 20


# The whole charge runs server-side in one statement (one round trip, one
# transaction). Inside a sub-transaction: insert the missing units (sorted), then
# lock every unit row in unit order — so overlapping charges queue instead of
# deadlocking — and check the budgets; a refusal raises DPLAC, which rolls the
# sub-transaction back (the inserted rows too) and returns the lacking units.
# The conditional UPDATE's row count is checked as well (a mismatch raises a
# serialisation failure: everything rolls back and the client retries).
_CHARGE_FUNCTION = """
CREATE OR REPLACE FUNCTION {charge}(q text, us text[], c bigint, b bigint, at double precision)
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    lacking text[] := '{{}}';
    n_updated integer;
BEGIN
    BEGIN
        INSERT INTO {units}(unit, remaining) SELECT x.u, b FROM unnest(us) AS x(u) ORDER BY x.u
            ON CONFLICT (unit) DO NOTHING;
        PERFORM 1 FROM {units} WHERE unit = ANY(us) ORDER BY unit FOR UPDATE;
        SELECT coalesce(array_agg(unit ORDER BY unit), '{{}}') INTO lacking
            FROM {units} WHERE unit = ANY(us) AND remaining < c;
        IF cardinality(lacking) > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'DPLAC', MESSAGE = 'ledger charge refused';
        END IF;
        UPDATE {units} SET remaining = remaining - c WHERE unit = ANY(us) AND remaining >= c;
        GET DIAGNOSTICS n_updated = ROW_COUNT;
        IF n_updated <> cardinality(us) THEN
            RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'ledger charge raced; retrying';
        END IF;
        INSERT INTO {audit}(query_id, unit, cost, at)
            SELECT q, x.u, c, at FROM unnest(us) AS x(u);
    EXCEPTION WHEN SQLSTATE 'DPLAC' THEN
        RETURN lacking;
    END;
    RETURN '{{}}';
END $$
"""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("PostgresLedger needs psycopg 3: pip install 'dprag[postgres]'") from exc
    return psycopg


class PostgresLedger(Ledger):
    """Per-unit budgets in PostgreSQL tables, shared by any number of processes.

    ``dsn``: a libpq connection string or URI (never echoed in messages).
    ``table``: table-name prefix (lowercase identifier), to keep several ledgers
    in one database. ``connect_timeout``: seconds before an unreachable server
    raises :class:`LedgerUnavailable`. Re-opening with a different
    ``budget_per_unit`` raises ``ValueError``.

    >>> PostgresLedger("host=127.0.0.1 port=1", budget_per_unit=1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dprag_core.accounting.ledger.base.LedgerUnavailable: the PostgreSQL ledger is unreachable ...
    """

    def __init__(
        self,
        dsn: str,
        *,
        budget_per_unit: float,
        table: str = "dprag_ledger",
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__(budget_per_unit=budget_per_unit)
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn must be a non-empty PostgreSQL connection string")
        if not isinstance(table, str) or not _TABLE.fullmatch(table):
            raise ValueError("table must match [a-z_][a-z0-9_]{0,40}")
        self._timeout = positive_finite("connect_timeout", connect_timeout)
        self.__dsn = dsn
        self._t = table
        self._local = threading.local()
        self._init_schema()

    # -- connections -------------------------------------------------------------

    def _conn(self) -> psycopg.Connection[Any]:
        local = self._local
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid() and not conn.closed:
            return conn
        pg = _psycopg()
        try:
            conn = pg.connect(
                self.__dsn, autocommit=True, connect_timeout=max(1, round(self._timeout))
            )
        except pg.Error:
            raise LedgerUnavailable(
                "the PostgreSQL ledger is unreachable (check the DSN and that the server is up)"
            ) from None
        local.conn, local.pid = conn, os.getpid()
        return conn

    def _run(self, work: Any) -> Any:
        """Run ``work(conn)``; retry deadlocks, map connection failures to LedgerUnavailable."""
        pg = _psycopg()
        for _ in range(_RETRIES):
            conn = self._conn()
            try:
                return work(conn)
            except (pg.errors.DeadlockDetected, pg.errors.SerializationFailure):
                time.sleep(0.001)
                continue
            except pg.OperationalError:
                self._local.conn = None
                raise LedgerUnavailable(
                    "the PostgreSQL ledger failed during a transaction (nothing was charged)"
                ) from None
        raise LedgerUnavailable("the PostgreSQL ledger kept deadlocking; nothing was charged")

    def _sql(self, text: str) -> Any:
        sql = _psycopg().sql
        return sql.SQL(text).format(
            units=sql.Identifier(f"{self._t}_units"),
            audit=sql.Identifier(f"{self._t}_audit"),
            meta=sql.Identifier(f"{self._t}_meta"),
            fn=sql.Identifier(f"{self._t}_append_only"),
            charge=sql.Identifier(f"{self._t}_charge"),
        )

    # -- schema ------------------------------------------------------------------

    def _init_schema(self) -> None:
        def work(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._t,))
                exists = conn.execute("SELECT to_regclass(%s)", (f"{self._t}_audit",)).fetchone()
                if exists is None or exists[0] is None:
                    for stmt in (
                        "CREATE TABLE {meta} (key text PRIMARY KEY, value bigint NOT NULL)",
                        "CREATE TABLE {units} (unit text PRIMARY KEY, remaining bigint NOT NULL)",
                        "CREATE TABLE {audit} (seq bigserial PRIMARY KEY,"
                        " query_id text NOT NULL, unit text NOT NULL, cost bigint NOT NULL,"
                        " at double precision NOT NULL)",
                        "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS"
                        " $$BEGIN RAISE EXCEPTION 'the audit log is append-only'; END$$",
                        "CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON {audit}"
                        " FOR EACH ROW EXECUTE FUNCTION {fn}()",
                        "CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON {audit}"
                        " FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
                    ):
                        conn.execute(self._sql(stmt))
                conn.execute(self._sql(_CHARGE_FUNCTION))
                conn.execute(
                    self._sql(
                        "INSERT INTO {meta}(key, value) VALUES ('budget', %s)"
                        " ON CONFLICT (key) DO NOTHING"
                    ),
                    (self._budget,),
                )
                row = conn.execute(
                    self._sql("SELECT value FROM {meta} WHERE key = 'budget'")
                ).fetchone()
                return int(row[0]) if row is not None else -1

        stored = self._run(work)
        if stored != self._budget:
            raise ValueError(
                f"budget_per_unit {self.budget_per_unit!r} differs from the "
                f"{stored / 10**12!r} this ledger was created with"
            )

    # -- primitives --------------------------------------------------------------

    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        def work(conn: psycopg.Connection[Any]) -> list[str]:
            row = conn.execute(
                self._sql("SELECT {charge}(%s, %s, %s, %s, %s)"),
                (query_id, units, cost, self._budget, time.time()),
            ).fetchone()
            return list(row[0]) if row is not None else list(units)

        result: list[str] = self._run(work)
        return result

    def _remaining(self, units: list[str]) -> dict[str, int]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, int]:
            rows = conn.execute(
                self._sql("SELECT unit, remaining FROM {units} WHERE unit = ANY(%s)"), (units,)
            ).fetchall()
            known = {u: int(left) for u, left in rows}
            return {u: known.get(u, self._budget) for u in units}

        result: dict[str, int] = self._run(work)
        return result

    def _audit_rows(self) -> Iterator[tuple[str, str, int, float]]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int, float]]:
            return [
                (q, u, int(c), float(at))
                for q, u, c, at in conn.execute(
                    self._sql("SELECT query_id, unit, cost, at FROM {audit} ORDER BY seq")
                )
            ]

        rows: list[tuple[str, str, int, float]] = self._run(work)
        return iter(rows)

    def _total_spent(self) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(self._sql("SELECT coalesce(sum(cost), 0) FROM {audit}")).fetchone()
            return int(row[0]) if row is not None else 0

        result: int = self._run(work)
        return result

    def drop(self) -> None:
        """Delete this ledger's tables (tests and teardown only: the budgets are lost)."""

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                for stmt in (
                    "DROP TABLE IF EXISTS {audit}",
                    "DROP TABLE IF EXISTS {units}",
                    "DROP TABLE IF EXISTS {meta}",
                    "DROP FUNCTION IF EXISTS {fn}",
                    "DROP FUNCTION IF EXISTS {charge}",
                ):
                    conn.execute(self._sql(stmt))

        self._run(work)

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    def __repr__(self) -> str:
        return f"PostgresLedger(table={self._t!r}, budget_per_unit={self.budget_per_unit!r})"
