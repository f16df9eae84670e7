"""A PostgreSQL ledger for several serving processes or hosts (psycopg 3).

One charge is one transaction, run server-side by a PL/pgSQL function in one
round trip (so are a claim and a settle: :meth:`Ledger.claim`): take a
transaction lock on the query id (an id already in the audit log is reported
as recorded, never charged twice), then one upsert
(``INSERT ... ON CONFLICT (unit) DO UPDATE SET remaining = remaining - cost``,
rows in unit order, so overlapping charges queue instead of deadlocking)
inserts the units never seen before (with the ``budget_per_unit`` recorded in
the store, never one the caller chose), locks and debits every unit; if any
unit is left below zero it lacked the cost: all of it rolls back, the refusal
is counted and the lacking units are returned. Else the audit rows (time
stamped by the server) are appended in the same transaction. A committed charge is
durable (PostgreSQL's WAL), so a crash between the charge and the release
loses budget, never privacy. Every wait is bounded
(:class:`~dprag_core.accounting.stores.postgres.PostgresTimeouts`).

**Least privilege** (:mod:`~dprag_core.accounting.stores.pgschema`). The
schema is created or migrated by its owner, once: ``create=True`` (with
``grant_to=`` the serving role) or ``dprag ledger init``. Serving processes
open it as a role that holds only ``SELECT`` on the tables and ``EXECUTE``
on the charge function: it can charge non-negative costs and read, and
cannot rewrite budgets or history, lower what a unit spent or give a unit a
budget of its choosing. A missing or partly missing schema raises
:class:`LedgerUnavailable` naming the table.

>>> led = PostgresLedger("postgresql://app@db/app")  # doctest: +SKIP
>>> led.charge("q1", ["a", "b"], 0.5).granted  # doctest: +SKIP
True
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dprag_core.accounting.ledger.base import Ledger
from dprag_core.accounting.status import HISTOGRAM_BINS, LedgerStatus
from dprag_core.accounting.stores.amounts import to_units
from dprag_core.accounting.stores.errors import LedgerUnavailable
from dprag_core.accounting.stores.pgschema import (
    PRUNED,
    PostgresBacked,
    PostgresSpec,
    append_only,
    digest_sql,
    open_postgres,
)
from dprag_core.accounting.stores.pgtrust import DEFAULT_SCHEMA
from dprag_core.accounting.stores.postgres import PostgresTimeouts

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresLedger", "ledger_spec"]

# The whole charge runs server-side in one statement (one round trip, one
# transaction), as the schema owner (SECURITY DEFINER, fixed search_path). It
# refuses a bad cost and repeated units (one audit row per debit: the audit log
# is the budget's own record), reads the per-unit budget from the store, and takes a
# transaction lock on the query id. Without units it is a claim (Ledger.claim):
# one insert records the id in the queries table unless it is there, in the audit
# log or pruned already; c = 0 commits it durably, c = 1 without waiting for the WAL
# flush (the claim is seen at once and made durable by the next durable commit,
# which flushes the WAL up to its own record and so through the claim's),
# c = 2 is the settle (Ledger.settle): one counter row rewritten to its own
# value, committed durably. Inside a sub-transaction it appends the
# audit rows, then one upsert inserts the missing units, locks every unit row
# in unit order and debits it; a unit left below zero lacked the cost: DPLAC
# rolls the sub-transaction back (audit rows and inserted units too), counts
# the refusal and returns the lacking units.
# Every lookup is by key: enable_seqscan = off keeps the plans a session caches at
# its first calls (made while a new store's tables are empty, when a scan is the
# cheapest) on the indexes as the tables grow, so a claim or a charge reads a few
# index pages whatever the number of queries recorded.
_LEDGER_CHARGE_TEXT = """
CREATE OR REPLACE FUNCTION {charge}(q text, us text[], c bigint, OUT outcome text,
    OUT lacking text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off AS $$
DECLARE
    b bigint;
    done text[];
    same boolean;
    distinct_units boolean;
    gone boolean;
BEGIN
    IF q IS NULL OR us IS NULL OR c IS NULL OR c < 0 OR c > 1000000000000000000
            OR array_position(us, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'DPBAD',
            MESSAGE = 'a charge needs a query id, units and a cost in [0, 1e18]';
    END IF;
    lacking := '{{}}';
    IF cardinality(us) = 0 THEN
        -- the settle: no lock on its id (any fresh one), one of the 64 counter rows rewritten
        IF c = 2 THEN
            UPDATE {meta} SET value = value WHERE key = 'queries:' || (hashtext(q) & 63)::text;
            outcome := 'settled';
            RETURN;
        ELSIF c = 1 THEN
            PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        ELSIF c <> 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'DPBAD', MESSAGE = 'a claim needs a cost of 0 or 1';
        END IF;
        -- a claim: the query's id recorded before any of its charges, in one insert (an
        -- id claimed, charged or pruned before is reported as recorded)
        PERFORM pg_advisory_xact_lock(hashtext({tag} || q));
        INSERT INTO {queries}(query_id, at)
            SELECT q, extract(epoch FROM clock_timestamp())
            WHERE NOT EXISTS (SELECT 1 FROM {audit} AS a WHERE a.query_id = q)
                AND NOT EXISTS (SELECT 1 FROM {pruned} AS p WHERE p.digest = DIGEST)
            ON CONFLICT (query_id) DO NOTHING;
        outcome := CASE WHEN FOUND THEN 'claimed' ELSE 'recorded' END;
        RETURN;
    END IF;
    SELECT m.value, (SELECT count(DISTINCT x.u) FROM unnest(us) AS x(u)) = cardinality(us)
        INTO b, distinct_units FROM {meta} AS m WHERE m.key = 'budget';
    IF NOT distinct_units THEN
        RAISE EXCEPTION USING ERRCODE = 'DPBAD', MESSAGE = 'a charge needs distinct units';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext({tag} || q));
    SELECT d.units, d.same, EXISTS (SELECT 1 FROM {pruned} AS p WHERE p.digest = DIGEST)
        INTO done, same, gone
        FROM (SELECT array_agg(a.unit ORDER BY a.unit) AS units, bool_and(a.cost = c) AS same
            FROM {audit} AS a WHERE a.query_id = q) AS d;
    IF done IS NOT NULL THEN
        IF same AND done = (SELECT array_agg(x.u ORDER BY x.u) FROM unnest(us) AS x(u))
        THEN
            outcome := 'recorded';
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
    IF gone THEN
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
    BEGIN
        -- the audit rows first: the unit rows below stay locked until the commit, so
        -- nothing else runs while they are held (one time stamp for the charge's rows)
        INSERT INTO {audit}(query_id, unit, cost, at)
            SELECT q, x.u, c, t.at FROM (SELECT extract(epoch FROM clock_timestamp()) AS at) AS t,
                unnest(us) AS x(u);
        -- one statement inserts the new units, locks every unit row in unit order (so
        -- overlapping charges queue instead of deadlocking) and debits it; a unit left
        -- below zero lacked the cost: the sub-transaction rolls all of it back (the
        -- audit rows too)
        WITH debited AS (
            INSERT INTO {units} AS u (unit, remaining)
                SELECT x.u, b - c FROM unnest(us) AS x(u) ORDER BY 1
            ON CONFLICT (unit) DO UPDATE SET remaining = u.remaining - c
            RETURNING u.unit, u.remaining
        )
        SELECT coalesce(array_agg(d.unit ORDER BY d.unit) FILTER (WHERE d.remaining < 0), '{{}}')
            INTO lacking FROM debited AS d;
        IF cardinality(lacking) > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'DPLAC', MESSAGE = 'ledger charge refused';
        END IF;
    EXCEPTION WHEN SQLSTATE 'DPLAC' THEN
        UPDATE {meta} SET value = value + 1 WHERE key = 'refusals';
        outcome := 'refused';
        RETURN;
    END;
    -- the kept query count: one of 64 counter rows, chosen by the id, so that concurrent
    -- charges rarely wait for one another's commit on it
    UPDATE {meta} SET value = value + 1 WHERE key = 'queries:' || (hashtext(q) & 63)::text;
    outcome := 'charged';
END $$
"""


_LEDGER_CHARGE = _LEDGER_CHARGE_TEXT.replace("DIGEST", digest_sql("q"))

_SETTINGS = "INSERT INTO {meta}(key, value) VALUES ('budget', %s) ON CONFLICT DO NOTHING"


def ledger_spec() -> PostgresSpec:
    """The per-unit ledger's tables and charge function.

    >>> sorted(ledger_spec().tables)
    ['audit', 'pruned', 'queries', 'units']
    """
    return PostgresSpec(
        "per-unit ledger",
        {
            "units": "unit text PRIMARY KEY, remaining bigint NOT NULL",
            "audit": "seq bigserial PRIMARY KEY, query_id text NOT NULL, unit text NOT NULL,"
            " cost bigint NOT NULL, at double precision NOT NULL",
            "queries": "query_id text PRIMARY KEY, at double precision NOT NULL",
            "pruned": PRUNED,
        },
        (
            "CREATE INDEX IF NOT EXISTS {audit_query} ON {audit}(query_id)",
            # the kept query count (version 5): a migrated store's counters start from its
            # audit log (under the owner's schema lock), a new store's from 0
            "INSERT INTO {meta}(key, value) SELECT 'queries:' || (hashtext(d.q) & 63)::text,"
            " count(*) FROM (SELECT DISTINCT a.query_id AS q FROM {audit} AS a) AS d"
            " GROUP BY 1 ON CONFLICT (key) DO NOTHING",
            "INSERT INTO {meta}(key, value) SELECT 'queries:' || s::text, 0"
            " FROM generate_series(0, 63) AS s ON CONFLICT (key) DO NOTHING",
            *append_only("audit", prunable=True),
            *append_only("queries", prunable=True),
            *append_only("pruned"),
        ),
        _LEDGER_CHARGE,
        "text, text[], bigint",
        added=("queries", "pruned"),
    )


class PostgresLedger(PostgresBacked, Ledger):
    """Per-unit budgets in PostgreSQL tables, shared by any number of processes.

    ``dsn``: a libpq connection string or URI (never echoed in messages).
    ``budget_per_unit``: needed to create; when opening, None reads the
    recorded one and any other value than the recorded one raises
    ``ValueError``. ``table``: table-name prefix (lowercase identifier), to
    keep several ledgers in one database. ``name``: the ledger's identity,
    recorded at creation (default: ``table``) and checked when given on
    opening. ``timeouts``: bounds on every wait
    (:class:`~dprag_core.accounting.stores.postgres.PostgresTimeouts`).
    ``create``: create or migrate a missing or outdated schema (the owner's
    rights); without it (serving roles) one is refused. ``grant_to``: with
    ``create``, grant that serving role the runtime rights. ``schema``: the
    PostgreSQL schema the store lives in, one of its own: no role but its
    owner may create or own anything in it (checked at every open,
    :mod:`~dprag_core.accounting.stores.pgtrust`).

    >>> PostgresLedger("host=127.0.0.1 port=1",
    ...                timeouts=PostgresTimeouts(connect=1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dprag_core.accounting.stores.errors.LedgerUnavailable: the PostgreSQL per-unit ledger ...
    """

    def __init__(
        self,
        dsn: str,
        *,
        budget_per_unit: float | None = None,
        table: str = "dprag_ledger",
        name: str | None = None,
        timeouts: PostgresTimeouts | None = None,
        create: bool = False,
        grant_to: str | None = None,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        given = None
        if budget_per_unit is not None:
            given = to_units("budget_per_unit", budget_per_unit, positive=True)
        self._t = table
        self._schema, self._store, self.name = open_postgres(
            dsn,
            ledger_spec(),
            table=table,
            name=name,
            create=create,
            needs="budget_per_unit" if given is None else None,
            timeouts=timeouts,
            grant_to=grant_to,
            schema=schema,
            settings=[(_SETTINGS, (given,))],
        )
        self.label = self._store.label
        self._adopt_budget(given, self._store.run(self._stored_budget), self.label)

    _logs = ("queries", "audit")

    def _stored_budget(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(self._sql("SELECT value FROM {meta} WHERE key = 'budget'")).fetchone()
        if row is None:
            raise LedgerUnavailable(f"the {self._store.label} records no budget_per_unit")
        return int(row[0])

    def _sql(self, text: str) -> Any:
        return self._schema.sql(text)

    # -- primitives --------------------------------------------------------------

    def _charge(self, query_id: str, units: list[str], cost: int) -> tuple[str, list[str]]:
        def work(conn: psycopg.Connection[Any]) -> tuple[str, list[str]]:
            row = self._schema.call_charge(conn, (query_id, units, cost))
            if row is None:
                raise LedgerUnavailable(f"the {self._store.label} returned no outcome")
            return str(row[0]), list(row[1])

        return self._store.run(work, charge=True)

    def _claim(self, query_id: str, *, durable: bool) -> bool:
        def work(conn: psycopg.Connection[Any]) -> bool:
            row = self._schema.call_charge(conn, (query_id, [], 0 if durable else 1))
            if row is None:
                raise LedgerUnavailable(f"the {self._store.label} returned no outcome")
            return bool(row[0] == "claimed")

        return self._store.run(work, charge=True)

    def _settle(self) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            row = self._schema.call_charge(conn, (str(uuid.uuid4()), [], 2))
            if row is None or row[0] != "settled":
                raise LedgerUnavailable(f"the {self._store.label} did not settle its claims")

        self._store.run(work, charge=True)

    def _recorded(self, query_id: str) -> list[tuple[str, int]]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[str, int]]:
            rows = conn.execute(
                self._sql("SELECT unit, cost FROM {audit} WHERE query_id = %s"), (query_id,)
            ).fetchall()
            return [(unit, int(cost)) for unit, cost in rows]

        return self._store.run(work)

    def _remaining(self, units: list[str]) -> dict[str, int]:
        def work(conn: psycopg.Connection[Any]) -> dict[str, int]:
            rows = conn.execute(
                self._sql("SELECT unit, remaining FROM {units} WHERE unit = ANY(%s)"), (units,)
            ).fetchall()
            known = {u: int(left) for u, left in rows}
            return {u: known.get(u, self._budget) for u in units}

        return self._store.run(work)

    def _audit_rows(self, last: int | None = None) -> Iterator[tuple[str, str, int, float]]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int, float]]:
            args: tuple[int, ...] = ()
            if last is None:
                sql = "SELECT query_id, unit, cost, at FROM {audit} ORDER BY seq"
            else:  # the primary key's index, read backwards
                sql = (
                    "SELECT * FROM (SELECT seq, query_id, unit, cost, at FROM {audit}"
                    " ORDER BY seq DESC LIMIT %s) AS t ORDER BY seq"
                )
                args = (last,)
            rows = conn.execute(self._sql(sql), args)
            return [(r[-4], r[-3], int(r[-2]), float(r[-1])) for r in rows]

        return iter(self._store.run(work))

    def _total_spent(self) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(self._sql("SELECT coalesce(sum(cost), 0) FROM {audit}")).fetchone()
            return int(row[0]) if row is not None else 0

        return self._store.run(work)

    def _status(self, min_cost: int) -> LedgerStatus:
        b = self._budget

        def work(conn: psycopg.Connection[Any]) -> LedgerStatus:
            with conn.transaction():  # one snapshot
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                row = conn.execute(
                    self._sql(
                        "SELECT (SELECT count(*) FROM {units}),"
                        " (SELECT count(*) FROM {units} WHERE remaining < %s),"
                        # the kept query count (64 counter rows)
                        " (SELECT coalesce(sum(value), 0) FROM {meta}"
                        "  WHERE key LIKE 'queries:%%'),"
                        " (SELECT at FROM {audit} ORDER BY seq DESC LIMIT 1),"
                        # what every unit spent, from the units: each debit is in both
                        " (SELECT coalesce(sum(%s - remaining), 0) FROM {units}),"
                        " (SELECT value FROM {meta} WHERE key = 'refusals')"
                    ),
                    (min_cost, b),
                ).fetchone()
                bins = [0] * HISTOGRAM_BINS
                for k, n in conn.execute(
                    self._sql(
                        "SELECT least(floor((%s - remaining)::numeric * %s / %s), %s)::int,"
                        " count(*) FROM {units} GROUP BY 1"
                    ),
                    (b, HISTOGRAM_BINS, b, HISTOGRAM_BINS - 1),
                ):
                    bins[int(k)] = int(n)
            assert row is not None
            return self._make_status(row, bins)

        return self._store.run(work)

    def __repr__(self) -> str:
        return f"PostgresLedger(table={self._t!r}, budget_per_unit={self.budget_per_unit!r})"
