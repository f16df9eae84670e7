"""A PostgreSQL ledger for several serving processes or hosts (psycopg 3).

One charge is one transaction, run server-side by a PL/pgSQL function in one
round trip: take a transaction lock on the query id (so a retry never charges
twice: an id already in the audit log with the same units and cost is
granted without a new debit), insert the units never seen before (with the
full ``budget_per_unit``), lock all the query's unit rows in sorted order
(``SELECT ... ORDER BY unit FOR UPDATE``, so overlapping charges queue instead
of deadlocking), and if any unit lacks ``cost`` roll all of it back and return
the lacking units; else debit them with a conditional ``UPDATE ... SET
remaining = remaining - cost WHERE unit = ANY(...) AND remaining >= cost``
whose row count must equal the number of units (else everything rolls back and
the charge is retried), and append the audit rows in the same transaction. A
committed charge is durable (PostgreSQL's WAL), so a crash between the charge
and the release loses budget, never privacy. Every wait is bounded
(:class:`~dprag_core.accounting.ledger.postgres_store.PostgresTimeouts`).

**Least privilege.** The schema (tables ``{table}_units``, ``{table}_audit``,
``{table}_meta``, the append-only triggers and the ``SECURITY DEFINER``
charge function) is created or migrated by its owner, once:
:meth:`PostgresLedger.create_schema` or ``dprag ledger init``. Serving
processes open it (without ``create``) as a role that holds only ``SELECT``
on the tables and ``EXECUTE`` on the charge function (``grant_to``): it can
charge and read, and cannot rewrite budgets or history. A missing or partly
missing schema raises :class:`LedgerUnavailable` naming the missing objects.

>>> led = PostgresLedger("postgresql://user@db/app", budget_per_unit=1.0)  # doctest: +SKIP
>>> led.charge("q1", ["a", "b"], 0.5).granted  # doctest: +SKIP
True
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dprag_core.accounting.ledger.base import (
    Ledger,
    LedgerUnavailable,
    check_table,
    incomplete,
    reused_id,
)
from dprag_core.accounting.ledger.postgres_store import (
    INIT_HINT,
    PostgresStore,
    PostgresTimeouts,
    psycopg_module,
)
from dprag_core.validation import strict_bool

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresLedger", "PostgresSchema"]

SCHEMA_VERSION = 2

# The whole charge runs server-side in one statement (one round trip, one
# transaction), as the schema owner (SECURITY DEFINER, fixed search_path). A
# transaction lock on the query id makes a retry idempotent. Inside a
# sub-transaction: insert the missing units (sorted), then lock every unit row
# in unit order, so overlapping charges queue instead of deadlocking, and check
# the budgets; a refusal raises DPLAC, which rolls the sub-transaction back
# (the inserted rows too) and returns the lacking units. The conditional
# UPDATE's row count is checked as well (a mismatch raises a serialisation
# failure: everything rolls back and the client retries).
_LEDGER_CHARGE = """
CREATE OR REPLACE FUNCTION {charge}(q text, us text[], c bigint, b bigint, at double precision)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lacking text[] := '{{}}';
    n_updated integer;
    done text[];
    same boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext({tag} || q));
    SELECT array_agg(a.unit ORDER BY a.unit), bool_and(a.cost = c) INTO done, same
        FROM {audit} AS a WHERE a.query_id = q;
    IF done IS NOT NULL THEN
        IF same AND done = (SELECT array_agg(x.u ORDER BY x.u) FROM unnest(us) AS x(u)) THEN
            RETURN '{{}}';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
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


class PostgresSchema:
    """Names, inspection, creation and grants of one prefixed set of tables.

    ``tables``: suffix -> CREATE TABLE body; ``extra``: statements run after
    the tables (triggers, indexes); ``charge_sql`` and ``charge_args``: the
    SECURITY DEFINER charge function and its argument types.

    >>> PostgresSchema("t", {}, [], "", "text").names()["charge"]
    't_charge'
    """

    def __init__(
        self,
        table: str,
        tables: dict[str, str],
        extra: list[str],
        charge_sql: str,
        charge_args: str,
    ) -> None:
        self.table = check_table(table)
        self.tables = tables
        self.extra = extra
        self.charge_sql = charge_sql
        self.charge_args = charge_args

    def names(self) -> dict[str, str]:
        """Suffix -> object name."""
        names = {k: f"{self.table}_{k}" for k in self.tables}
        names.update(
            fn=f"{self.table}_append_only",
            charge=f"{self.table}_charge",
            audit_query=f"{self.table}_audit_query",
        )
        return names

    def sql(self, text: str, schema: str | None = None) -> Any:
        """``text`` with ``{suffix}`` placeholders as identifiers (schema-qualified if given)."""
        sql = psycopg_module().sql
        ids = {
            k: sql.Identifier(schema, v) if schema else sql.Identifier(v)
            for k, v in self.names().items()
        }
        return sql.SQL(text).format(tag=sql.Literal(self.table + ":"), **ids)

    def missing(self, conn: psycopg.Connection[Any]) -> tuple[list[str], bool]:
        """(missing tables, whether the charge function is missing or outdated)."""
        absent = [
            n
            for k, n in self.names().items()
            if k in self.tables
            and conn.execute("SELECT to_regclass(%s)", (n,)).fetchone() in (None, (None,))
        ]
        if absent:
            return absent, True
        fn = f"{self.names()['charge']}({self.charge_args})"
        has_fn = conn.execute("SELECT to_regprocedure(%s)", (fn,)).fetchone()
        version = conn.execute(self.sql("SELECT value FROM {meta} WHERE key = 'schema'")).fetchone()
        outdated = has_fn in (None, (None,)) or version is None or version[0] < SCHEMA_VERSION
        return absent, outdated

    def create(self, conn: psycopg.Connection[Any]) -> None:
        """Create what is missing and (re)create the charge function: the owner's job."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            absent, _ = self.missing(conn)
            if absent and len(absent) < len(self.tables):
                raise LedgerUnavailable(incomplete(absent))
            schema = conn.execute("SELECT current_schema()").fetchone()
            if schema is None or schema[0] is None:
                raise LedgerUnavailable("the PostgreSQL role has no current schema to create in")
            if absent:
                for suffix, body in self.tables.items():
                    conn.execute(self.sql(f"CREATE TABLE {{{suffix}}} ({body})"))
                conn.execute(
                    self.sql(
                        "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS"
                        " $$BEGIN RAISE EXCEPTION 'the audit log is append-only'; END$$"
                    )
                )
            for stmt in self.extra:
                conn.execute(self.sql(stmt))
            conn.execute(self.sql(self.charge_sql, schema[0]))
            conn.execute(
                self.sql(f"REVOKE ALL ON FUNCTION {{charge}}({self.charge_args}) FROM PUBLIC")
            )
            conn.execute(
                self.sql(
                    "INSERT INTO {meta}(key, value) VALUES ('schema', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ),
                (SCHEMA_VERSION,),
            )

    def grant(self, conn: psycopg.Connection[Any], role: str) -> None:
        """Give ``role`` exactly the runtime rights: read the tables, call the charge."""
        sql = psycopg_module().sql
        who = sql.Identifier(role)
        with conn.transaction():
            row = conn.execute("SELECT current_schema()").fetchone()
            schema = sql.Identifier(row[0] if row is not None else "public")
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, who))
            for k in self.tables:
                conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(self.sql(f"{{{k}}}"), who))
            conn.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION {}({}) TO {}").format(
                    self.sql("{charge}"), sql.SQL(self.charge_args), who
                )
            )

    def grant_runtime(self, store: PostgresStore, grant_to: str | None) -> None:
        """:meth:`grant` the runtime rights to ``grant_to`` (a role name), if one is given."""
        if grant_to is not None:
            role = check_table(grant_to)
            store.run(lambda conn: self.grant(conn, role))

    def open_row(
        self,
        conn: psycopg.Connection[Any],
        *,
        create: bool,
        read: str,
        insert: str,
        values: tuple[Any, ...],
        missing: str,
    ) -> tuple[Any, ...]:
        """:meth:`check` the schema, then read the store's settings row (``read``).

        When it is absent and ``create``, ``insert`` (with ``values``) writes it
        first; still absent: :class:`LedgerUnavailable` saying ``missing``.
        """
        self.check(conn, create=create)
        row = conn.execute(self.sql(read)).fetchone()
        if row is None and create:
            conn.execute(self.sql(insert), values)
            row = conn.execute(self.sql(read)).fetchone()
        if row is None:
            raise LedgerUnavailable(f"{missing}: {INIT_HINT}")
        return tuple(row)

    def call_charge(
        self, conn: psycopg.Connection[Any], values: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """``SELECT charge(values)``: the one atomic charge; a reused id raises ``reused_id()``."""
        pg = psycopg_module()
        args = ", ".join(["%s"] * len(values))
        try:
            row = conn.execute(self.sql(f"SELECT {{charge}}({args})"), values).fetchone()
        except pg.Error as exc:
            if getattr(exc, "sqlstate", None) == "DPREU":
                raise reused_id() from None
            raise
        return None if row is None else tuple(row)

    def check(self, conn: psycopg.Connection[Any], *, create: bool) -> None:
        """Ensure a complete, current schema: create or migrate it when ``create``."""
        absent, outdated = self.missing(conn)
        if absent and len(absent) < len(self.tables):
            raise LedgerUnavailable(incomplete(absent))
        if absent or outdated:
            if not create:
                state = "absent" if absent else "outdated"
                raise LedgerUnavailable(
                    f"the PostgreSQL schema {self.table!r} is {state}: {INIT_HINT}, or pass "
                    "create=True as its owner"
                )
            self.create(conn)


def ledger_schema(table: str) -> PostgresSchema:
    """The per-unit ledger's tables.

    >>> sorted(ledger_schema("l").tables)
    ['audit', 'meta', 'units']
    """
    return PostgresSchema(
        table,
        {
            "meta": "key text PRIMARY KEY, value bigint NOT NULL",
            "units": "unit text PRIMARY KEY, remaining bigint NOT NULL",
            "audit": "seq bigserial PRIMARY KEY, query_id text NOT NULL, unit text NOT NULL,"
            " cost bigint NOT NULL, at double precision NOT NULL",
        },
        [
            "CREATE INDEX IF NOT EXISTS {audit_query} ON {audit}(query_id)",
            "CREATE OR REPLACE TRIGGER append_only BEFORE UPDATE OR DELETE ON {audit}"
            " FOR EACH ROW EXECUTE FUNCTION {fn}()",
            "CREATE OR REPLACE TRIGGER append_only_truncate BEFORE TRUNCATE ON {audit}"
            " FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
        ],
        _LEDGER_CHARGE,
        "text, text[], bigint, bigint, double precision",
    )


class PostgresLedger(Ledger):
    """Per-unit budgets in PostgreSQL tables, shared by any number of processes.

    ``dsn``: a libpq connection string or URI (never echoed in messages).
    ``table``: table-name prefix (lowercase identifier), to keep several ledgers
    in one database. ``timeouts``: bounds on every wait
    (:class:`~dprag_core.accounting.ledger.postgres_store.PostgresTimeouts`);
    ``connect_timeout`` overrides its ``connect``. ``create``: create or
    migrate a missing schema (needs the owner's rights); without it (serving
    roles) a missing schema is refused. Re-opening with a different
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
        connect_timeout: float | None = None,
        timeouts: PostgresTimeouts | None = None,
        create: bool = False,
    ) -> None:
        super().__init__(budget_per_unit=budget_per_unit)
        create = strict_bool("create", create)
        self._schema = ledger_schema(table)
        timeouts = timeouts if timeouts is not None else PostgresTimeouts()
        if connect_timeout is not None:
            timeouts = PostgresTimeouts(**{**timeouts.__dict__, "connect": connect_timeout})
        self._store = PostgresStore(dsn, timeouts)
        self._t = table
        stored = self._store.run(lambda conn: self._open(conn, create=create))
        if stored != self._budget:
            raise ValueError(
                f"budget_per_unit {self.budget_per_unit!r} differs from the "
                f"{stored / 10**12!r} this ledger was created with"
            )

    @classmethod
    def create_schema(
        cls,
        dsn: str,
        *,
        budget_per_unit: float,
        table: str = "dprag_ledger",
        grant_to: str | None = None,
    ) -> None:
        """Create or migrate the schema (as its owner) and grant ``grant_to`` runtime rights.

        >>> PostgresLedger.create_schema("postgresql://owner@db/app", budget_per_unit=5.0,
        ...                              grant_to="dprag_app")  # doctest: +SKIP
        """
        led = cls(dsn, budget_per_unit=budget_per_unit, table=table, create=True)
        try:
            led._schema.grant_runtime(led._store, grant_to)
        finally:
            led.close()

    def _open(self, conn: psycopg.Connection[Any], *, create: bool) -> int:
        row = self._schema.open_row(
            conn,
            create=create,
            read="SELECT value FROM {meta} WHERE key = 'budget'",
            insert="INSERT INTO {meta}(key, value) VALUES ('budget', %s)"
            " ON CONFLICT (key) DO NOTHING",
            values=(self._budget,),
            missing="the PostgreSQL ledger holds no budget",
        )
        return int(row[0])

    def _sql(self, text: str) -> Any:
        return self._schema.sql(text)

    # -- primitives --------------------------------------------------------------

    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        def work(conn: psycopg.Connection[Any]) -> list[str]:
            row = self._schema.call_charge(conn, (query_id, units, cost, self._budget, time.time()))
            return list(row[0]) if row is not None else list(units)

        return self._store.run(work, charge=True)

    def _remaining(self, units: list[str]) -> dict[str, int]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, int]:
            rows = conn.execute(
                self._sql("SELECT unit, remaining FROM {units} WHERE unit = ANY(%s)"), (units,)
            ).fetchall()
            known = {u: int(left) for u, left in rows}
            return {u: known.get(u, self._budget) for u in units}

        return self._store.run(work)

    def _audit_rows(self) -> Iterator[tuple[str, str, int, float]]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int, float]]:
            return [
                (q, u, int(c), float(at))
                for q, u, c, at in conn.execute(
                    self._sql("SELECT query_id, unit, cost, at FROM {audit} ORDER BY seq")
                )
            ]

        return iter(self._store.run(work))

    def _total_spent(self) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(self._sql("SELECT coalesce(sum(cost), 0) FROM {audit}")).fetchone()
            return int(row[0]) if row is not None else 0

        return self._store.run(work)

    def drop(self) -> None:
        """Delete this ledger's tables (tests and teardown only: the budgets are lost)."""
        drop_schema(self._store, self._schema)

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()

    def __repr__(self) -> str:
        return f"PostgresLedger(table={self._t!r}, budget_per_unit={self.budget_per_unit!r})"


def drop_schema(store: PostgresStore, schema: PostgresSchema) -> None:
    """Drop every table and function of ``schema`` (tests and teardown only)."""

    def work(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            for k in schema.tables:
                conn.execute(schema.sql(f"DROP TABLE IF EXISTS {{{k}}} CASCADE"))
            conn.execute(schema.sql("DROP FUNCTION IF EXISTS {fn} CASCADE"))
            conn.execute(schema.sql("DROP FUNCTION IF EXISTS {charge}"))

    store.run(work)
