"""Query ids claimed before a query's private section: the record reuse is decided from.

Before issue 36 a ledger recorded a query id only with a non-empty charge, so an
app reusing an id was refused (``QueryIdReused``) exactly when some unit had
scored above τ: the refusal told whether a document was in the corpus. A claim
(:meth:`Ledger.claim`) records every query's id, whatever it then charges, on
every backend; a charge with ``retry=True`` (an app's accepted retry of a query
that released nothing) reuses what was recorded, never charging an id twice.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from ledger_support import POSTGRES_DSN, LedgerFactory, needs_postgres

from dprag_core.accounting.ledger import (
    LedgerUnavailable,
    PostgresLedger,
    SQLiteLedger,
    charge_active,
)
from dprag_core.accounting.stores.errors import QueryIdReused

SECRET_ID = "q-3c9e-private-looking-id"


def test_a_claim_records_the_id_whatever_the_query_charges(make_ledger: LedgerFactory) -> None:
    led = make_ledger(budget_per_unit=1.0)
    assert led.charge("nothing-above-tau", [], 0.5).granted  # records nothing ...
    assert led.claim("nothing-above-tau")  # ... so the claim is the record
    assert led.claim(SECRET_ID)
    assert led.charge(SECRET_ID, ["a"], 0.5).granted  # a claimed id charges once
    led.charge("charged", ["b"], 0.5)
    for qid in ("nothing-above-tau", SECRET_ID, "charged"):  # claimed, or charged: refused
        with pytest.raises(QueryIdReused, match="query_id") as refused:
            led.claim(qid)
        assert qid not in str(refused.value)
    with pytest.raises(ValueError, match="query_id"):
        led.claim(" ")
    if make_ledger.kind != "memory":  # type: ignore[attr-defined]
        with pytest.raises(QueryIdReused):  # after a restart, from another process
            make_ledger(budget_per_unit=1.0).claim("nothing-above-tau")
    assert led.remaining(["a", "b"]) == {"a": 0.5, "b": 0.5}


def test_a_retry_reuses_the_recorded_charge_and_never_charges_twice(
    make_ledger: LedgerFactory,
) -> None:
    led = make_ledger(budget_per_unit=1.0)
    assert led.charge("q", ["a", "b"], 0.5).granted
    result = led.charge("q", ["a", "b", "c"], 0.5, retry=True)
    assert (result.granted, result.lacking, result.retry) == (False, ("c",), True)
    assert charge_active(led, "q", ["c", "b", "a"], 0.5, retry=True) == ["b", "a"]
    assert led.remaining(["a", "b", "c"]) == {"a": 0.5, "b": 0.5, "c": 1.0}
    with pytest.raises(QueryIdReused):  # without retry=True, as before
        led.charge("q", ["a", "b"], 0.5)
    fresh = led.charge("not-recorded", ["c"], 0.5, retry=True)  # nothing recorded: charged
    assert fresh.granted and not fresh.retry and led.remaining(["c"]) == {"c": 0.5}


def test_a_version_2_sqlite_ledger_is_upgraded_when_opened_writable(tmp_path: Path) -> None:
    """A file written before claims existed: read as it is, upgraded by a writer."""
    path = tmp_path / "l.db"
    SQLiteLedger(path, budget_per_unit=1.0, create=True).charge("q0", ["a"], 0.25)
    old_objects = "meta units audit audit_query audit_no_update audit_no_delete"
    with sqlite3.connect(path) as conn:
        for trigger in ("meta_watermark", "queries_no_update", "queries_no_delete"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE queries")
        conn.execute("DROP TABLE pruned")
        conn.execute("DELETE FROM meta WHERE key IN ('queries', 'watermark')")
        conn.execute(
            "UPDATE dprag_stores SET objects = ?, version = 2 WHERE store = 'ledger'",
            (old_objects,),
        )
    reader = SQLiteLedger(path, read_only=True)
    assert reader.remaining(["a"]) == {"a": 0.75}
    with pytest.raises(LedgerUnavailable):
        reader.claim("q1")
    writer = SQLiteLedger(path)
    assert writer.claim("q1")
    with pytest.raises(QueryIdReused):
        writer.claim("q0")  # an id of the earlier version's audit log
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT objects, version FROM dprag_stores WHERE store = 'ledger'")
        objects, version = row.fetchone()
    assert version == 4 and "queries" in objects.split()
    assert writer.status().queries == 1  # the count kept since version 4, from the audit log


@pytest.mark.postgres
@needs_postgres
def test_a_postgres_ledger_without_claims_is_outdated_until_its_owner_migrates(
    table: str,
) -> None:
    import psycopg

    PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True).charge(
        "q0", ["a"], 0.25
    )
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}_queries")
    with pytest.raises(LedgerUnavailable, match="outdated"):
        PostgresLedger(POSTGRES_DSN, table=table)
    migrated = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
    assert migrated.remaining(["a"]) == {"a": 0.75} and migrated.claim("q1")
    with pytest.raises(QueryIdReused):
        migrated.claim("q0")
