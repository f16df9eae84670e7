"""A durable corpus budget in PostgreSQL, for several processes or hosts (psycopg 3).

Tables ``{table}_meta`` (schema version), ``{table}_store`` (kind and
identity), ``{table}_budget`` (one row: totals, spent, query and refusal
counts) and ``{table}_charges`` (one append-only row per query id). A charge
is one statement: the ``SECURITY DEFINER`` function ``{table}_charge(query
id, epsilon, delta)`` refuses a negative or oversized cost, locks the budget
row, looks the query id up (reporting a recorded one, never charging it
twice), then adds the cost under ``WHERE spent + cost <= total`` and records
the query id with the server's time, in one transaction (or counts the
refusal). Every wait is bounded
(:class:`~dprag_core.accounting.stores.postgres.PostgresTimeouts`); a
connection lost mid-charge raises
:class:`~dprag_core.accounting.stores.errors.LedgerOutcomeUnknown`. As for
:class:`~dprag_core.accounting.ledger.PostgresLedger`, the owner creates the
schema once (``create=True`` with ``grant_to=``, or ``dprag ledger init
--corpus-epsilon ...``) and serving roles open it holding only ``SELECT`` and
``EXECUTE`` rights: they can charge and read, never lower what was spent or
raise the total (:mod:`~dprag_core.accounting.stores.pgschema`).

>>> acc = PostgresCorpusAccountant("postgresql://app@db/app")  # doctest: +SKIP
>>> acc.charge(Budget(0.5, 1e-8), query_id="q-123")  # doctest: +SKIP
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.stores.amounts import budget_units, check_table
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
from dprag_core.budget import Budget

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresCorpusAccountant", "corpus_spec"]

_CORPUS_CHARGE_TEXT = """
CREATE OR REPLACE FUNCTION {charge}(q text, e bigint, d bigint)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pe bigint;
    pd bigint;
BEGIN
    IF q IS NULL OR e IS NULL OR d IS NULL OR e < 0 OR d < 0
            OR e > 1000000000000000000 OR d > 1000000000000000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'DPBAD',
            MESSAGE = 'a charge needs a query id and a cost in [0, 1e18]';
    END IF;
    PERFORM 1 FROM {budget} WHERE id = 1 FOR UPDATE;
    SELECT c.epsilon, c.delta INTO pe, pd FROM {charges} AS c WHERE c.query_id = q;
    IF FOUND THEN
        IF pe = e AND pd = d THEN
            RETURN 'recorded';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
    IF EXISTS (SELECT 1 FROM {pruned} AS p WHERE p.digest = DIGEST) THEN
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
    UPDATE {budget} SET spent_epsilon = spent_epsilon + e, spent_delta = spent_delta + d,
        queries = queries + 1
        WHERE id = 1 AND spent_epsilon + e <= total_epsilon AND spent_delta + d <= total_delta;
    IF NOT FOUND THEN
        UPDATE {budget} SET refusals = refusals + 1 WHERE id = 1;
        RETURN 'exhausted';
    END IF;
    INSERT INTO {charges}(query_id, epsilon, delta, at)
        VALUES (q, e, d, extract(epoch FROM clock_timestamp()));
    RETURN 'charged';
END $$
"""


_CORPUS_CHARGE = _CORPUS_CHARGE_TEXT.replace("DIGEST", digest_sql("q"))

_SETTINGS = "INSERT INTO {budget} VALUES (1, %s, %s, 0, 0, 0, 0) ON CONFLICT (id) DO NOTHING"


def corpus_spec() -> PostgresSpec:
    """The corpus budget's tables and charge function.

    >>> sorted(corpus_spec().tables)
    ['budget', 'charges', 'pruned']
    """
    return PostgresSpec(
        "corpus budget",
        {
            "budget": "id integer PRIMARY KEY CHECK (id = 1), total_epsilon bigint NOT NULL,"
            " total_delta bigint NOT NULL, spent_epsilon bigint NOT NULL,"
            " spent_delta bigint NOT NULL, queries bigint NOT NULL,"
            " refusals bigint NOT NULL DEFAULT 0",
            "charges": "query_id text PRIMARY KEY, epsilon bigint NOT NULL,"
            " delta bigint NOT NULL, at double precision NOT NULL",
            "pruned": PRUNED,
        },
        # the last charges and the last charge's time: an index read, whatever the history's
        # length (a store made before it gets it when its owner runs `dprag ledger init`)
        (
            "CREATE INDEX IF NOT EXISTS {charges_at} ON {charges}(at, query_id)",
            *append_only("charges", prunable=True),
            *append_only("pruned"),
        ),
        _CORPUS_CHARGE,
        "text, bigint, bigint",
        ("ALTER TABLE {budget} ADD COLUMN IF NOT EXISTS refusals bigint NOT NULL DEFAULT 0",),
        added=("pruned",),
    )


class PostgresCorpusAccountant(PostgresBacked, DurableCorpusAccountant):
    """A total corpus :class:`~dprag_core.budget.Budget` in PostgreSQL tables.

    ``dsn``: a libpq connection string or URI (never echoed in messages).
    ``total``: the corpus budget, needed to create; when opening, None reads
    the recorded one and any other total raises ``ValueError``. ``table``:
    table-name prefix (lowercase identifier). ``name``: the budget's
    identity, recorded at creation (default: ``table``) and checked when
    given on opening. ``timeouts``: bounds on every wait. ``create``: create
    or migrate a missing or outdated schema (the owner's rights); without it
    (serving roles) one is refused. ``grant_to``: with ``create``, grant that
    serving role the runtime rights. ``schema``: the PostgreSQL schema the
    store lives in, one of its own: no role but its owner may create or own
    anything in it (checked at every open,
    :mod:`~dprag_core.accounting.stores.pgtrust`).

    >>> PostgresCorpusAccountant("host=127.0.0.1 port=1",
    ...                          timeouts=PostgresTimeouts(connect=1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dprag_core.accounting.stores.errors.LedgerUnavailable: the PostgreSQL corpus budget ...
    """

    _logs = ("charges",)

    def __init__(
        self,
        dsn: str,
        *,
        total: Budget | None = None,
        table: str = "dprag_corpus",
        name: str | None = None,
        timeouts: PostgresTimeouts | None = None,
        create: bool = False,
        grant_to: str | None = None,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        if total is not None and not isinstance(total, Budget):
            raise TypeError(f"total must be a Budget, got {type(total).__name__}")
        given = None if total is None else budget_units("total", total)
        self._t = check_table(table)
        self._schema, self._store, self.name = open_postgres(
            dsn,
            corpus_spec(),
            table=table,
            name=name,
            create=create,
            needs="total" if given is None else None,
            timeouts=timeouts,
            grant_to=grant_to,
            schema=schema,
            settings=[(_SETTINGS, given or (0, 0))],
        )
        stored = self._store.run(self._stored_total)
        self.check_total(total, stored, self._store.label)
        super().__init__(
            stored,
            label=self._store.label,
            status_command=f"dprag ledger status --table {table}"
            + ("" if schema == DEFAULT_SCHEMA else f" --schema {schema}")
            + " (the DSN in $DPRAG_LEDGER_DSN)",
        )

    def _stored_total(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        row = conn.execute(
            self._schema.sql("SELECT total_epsilon, total_delta FROM {budget}")
        ).fetchone()
        if row is None:
            raise LedgerUnavailable(f"the {self._store.label} records no total")
        return int(row[0]), int(row[1])

    def _state(self) -> tuple[int, int, int]:
        def work(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
            row = conn.execute(
                self._schema.sql("SELECT spent_epsilon, spent_delta, queries FROM {budget}")
            ).fetchone()
            if row is None:
                raise LedgerUnavailable(f"the {self._store.label} records no total")
            return int(row[0]), int(row[1]), int(row[2])

        return self._store.run(work)

    def _charge(self, query_id: str, epsilon: int, delta: int) -> str:
        def work(conn: psycopg.Connection[Any]) -> str:
            row = self._schema.call_charge(conn, (query_id, epsilon, delta))
            if row is None:
                raise LedgerUnavailable(f"the {self._store.label} returned no outcome")
            return str(row[0])

        return self._store.run(work, charge=True)

    def _status_row(self) -> tuple[int, int, int, int | None, float | None]:
        Row = tuple[int, int, int, int | None, float | None]

        def work(conn: psycopg.Connection[Any]) -> Row:
            row = conn.execute(
                self._schema.sql(
                    "SELECT spent_epsilon, spent_delta, queries, refusals,"
                    " (SELECT max(at) FROM {charges}) FROM {budget}"
                )
            ).fetchone()
            if row is None:
                raise LedgerUnavailable(f"the {self._store.label} records no total")
            last = None if row[4] is None else float(row[4])
            return int(row[0]), int(row[1]), int(row[2]), int(row[3]), last

        return self._store.run(work)

    def _history_rows(self, last: int | None = None) -> list[tuple[str, int, int, float]]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[str, int, int, float]]:
            sql = "SELECT query_id, epsilon, delta, at FROM {charges}"
            if last is None:
                rows = conn.execute(self._schema.sql(f"{sql} ORDER BY at, query_id")).fetchall()
            else:  # the (at, query_id) index, read backwards
                text = f"{sql} ORDER BY at DESC, query_id DESC LIMIT %s"
                rows = conn.execute(self._schema.sql(text), (last,)).fetchall()[::-1]
            return [(str(q), int(e), int(d), float(at)) for q, e, d, at in rows]

        return self._store.run(work)

    def __repr__(self) -> str:
        return f"PostgresCorpusAccountant(table={self._t!r}, total={self.total!r})"
