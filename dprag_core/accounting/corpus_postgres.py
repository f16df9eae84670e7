"""A durable corpus budget in PostgreSQL, for several processes or hosts (psycopg 3).

Tables ``{table}_meta`` (schema version), ``{table}_budget`` (one row:
totals, spent, query count) and ``{table}_charges`` (one append-only row per
query id). A charge is one statement: the ``SECURITY DEFINER`` function
``{table}_charge`` locks the budget row, looks the query id up (a retry with
the same id and cost records nothing and counts as charged), then adds the
cost under ``WHERE spent + cost <= total`` and records the query id, in one
transaction. Every wait is bounded
(:class:`~dprag_core.accounting.ledger.PostgresTimeouts`); a connection lost
mid-charge raises :class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown`.
As for :class:`~dprag_core.accounting.ledger.PostgresLedger`, the owner
creates the schema once (:meth:`PostgresCorpusAccountant.create_schema` or
``dprag ledger init --corpus-epsilon ...``) and serving roles open it with
holding only ``SELECT`` and ``EXECUTE`` rights (without ``create=True``, a
missing schema is refused).

>>> acc = PostgresCorpusAccountant(
...     "postgresql://app@db/app", total=Budget(10.0, 1e-6))  # doctest: +SKIP
>>> acc.charge(Budget(0.5, 1e-8), query_id="q-123")  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger.base import LedgerUnavailable, check_table
from dprag_core.accounting.ledger.postgres import PostgresSchema, drop_schema
from dprag_core.accounting.ledger.postgres_store import (
    INIT_HINT,
    PostgresStore,
    PostgresTimeouts,
)
from dprag_core.budget import Budget
from dprag_core.validation import strict_bool

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresCorpusAccountant"]

_CORPUS_CHARGE = """
CREATE OR REPLACE FUNCTION {charge}(q text, e bigint, d bigint, at double precision)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pe bigint;
    pd bigint;
BEGIN
    PERFORM 1 FROM {budget} WHERE id = 1 FOR UPDATE;
    SELECT c.epsilon, c.delta INTO pe, pd FROM {charges} AS c WHERE c.query_id = q;
    IF FOUND THEN
        IF pe = e AND pd = d THEN
            RETURN 'recorded';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'DPREU', MESSAGE = 'query id reused';
    END IF;
    UPDATE {budget} SET spent_epsilon = spent_epsilon + e, spent_delta = spent_delta + d,
        queries = queries + 1
        WHERE id = 1 AND spent_epsilon + e <= total_epsilon AND spent_delta + d <= total_delta;
    IF NOT FOUND THEN
        RETURN 'exhausted';
    END IF;
    INSERT INTO {charges}(query_id, epsilon, delta, at) VALUES (q, e, d, at);
    RETURN 'charged';
END $$
"""


def corpus_schema(table: str) -> PostgresSchema:
    """The corpus budget's tables.

    >>> sorted(corpus_schema("c").tables)
    ['budget', 'charges', 'meta']
    """
    return PostgresSchema(
        table,
        {
            "meta": "key text PRIMARY KEY, value bigint NOT NULL",
            "budget": "id integer PRIMARY KEY CHECK (id = 1), total_epsilon bigint NOT NULL,"
            " total_delta bigint NOT NULL, spent_epsilon bigint NOT NULL,"
            " spent_delta bigint NOT NULL, queries bigint NOT NULL",
            "charges": "query_id text PRIMARY KEY, epsilon bigint NOT NULL,"
            " delta bigint NOT NULL, at double precision NOT NULL",
        },
        [
            "CREATE OR REPLACE TRIGGER append_only BEFORE UPDATE OR DELETE ON {charges}"
            " FOR EACH ROW EXECUTE FUNCTION {fn}()",
            "CREATE OR REPLACE TRIGGER append_only_truncate BEFORE TRUNCATE ON {charges}"
            " FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
        ],
        _CORPUS_CHARGE,
        "text, bigint, bigint, double precision",
    )


class PostgresCorpusAccountant(DurableCorpusAccountant):
    """A total corpus :class:`~dprag_core.budget.Budget` in PostgreSQL tables.

    ``dsn``: a libpq connection string or URI (never echoed in messages).
    ``total``: the corpus budget; a store created with another total raises
    ``ValueError``. ``table``: table-name prefix (lowercase identifier).
    ``timeouts``: bounds on every wait. ``create``: create or migrate a
    missing schema (needs the owner's rights); without it (serving roles) a
    missing schema is refused.

    >>> PostgresCorpusAccountant("host=127.0.0.1 port=1", total=Budget(1.0),
    ...                          timeouts=PostgresTimeouts(connect=1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dprag_core.accounting.ledger.base.LedgerUnavailable: the PostgreSQL ledger is unreachable ...
    """

    def __init__(
        self,
        dsn: str,
        *,
        total: Budget,
        table: str = "dprag_corpus",
        timeouts: PostgresTimeouts | None = None,
        create: bool = False,
    ) -> None:
        super().__init__(total)
        self._t = check_table(table)
        create = strict_bool("create", create)
        self._schema = corpus_schema(table)
        self._store = PostgresStore(dsn, timeouts if timeouts is not None else PostgresTimeouts())
        self.check_total(self._store.run(lambda conn: self._open(conn, create=create)))

    @classmethod
    def create_schema(
        cls, dsn: str, *, total: Budget, table: str = "dprag_corpus", grant_to: str | None = None
    ) -> None:
        """Create or migrate the schema (as its owner) and grant ``grant_to`` runtime rights.

        >>> PostgresCorpusAccountant.create_schema("postgresql://owner@db/app",
        ...     total=Budget(10.0, 1e-6), grant_to="dprag_app")  # doctest: +SKIP
        """
        acc = cls(dsn, total=total, table=table, create=True)
        try:
            acc._schema.grant_runtime(acc._store, grant_to)
        finally:
            acc.close()

    def _open(self, conn: psycopg.Connection[Any], *, create: bool) -> tuple[int, int]:
        row = self._schema.open_row(
            conn,
            create=create,
            read="SELECT total_epsilon, total_delta FROM {budget}",
            insert="INSERT INTO {budget} VALUES (1, %s, %s, 0, 0, 0) ON CONFLICT (id) DO NOTHING",
            values=(self._total_eps, self._total_delta),
            missing="the PostgreSQL corpus budget holds no total",
        )
        return int(row[0]), int(row[1])

    def _state(self) -> tuple[int, int, int]:
        def work(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
            row = conn.execute(
                self._schema.sql("SELECT spent_epsilon, spent_delta, queries FROM {budget}")
            ).fetchone()
            if row is None:
                raise LedgerUnavailable(f"the PostgreSQL corpus budget holds no total: {INIT_HINT}")
            return int(row[0]), int(row[1]), int(row[2])

        return self._store.run(work)

    def _charge(self, query_id: str, epsilon: int, delta: int) -> bool:
        def work(conn: psycopg.Connection[Any]) -> bool:
            row = self._schema.call_charge(conn, (query_id, epsilon, delta, time.time()))
            return row is not None and row[0] != "exhausted"

        return self._store.run(work, charge=True)

    def drop(self) -> None:
        """Delete this budget's tables (tests and teardown only: the spend is lost)."""
        drop_schema(self._store, self._schema)

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()

    def __repr__(self) -> str:
        return f"PostgresCorpusAccountant(table={self._t!r}, total={self.total!r})"
