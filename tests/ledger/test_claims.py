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
from query_support import murag

from dprag_core import PrivateRAG
from dprag_core.accounting.ledger import (
    LedgerUnavailable,
    PostgresLedger,
    SQLiteLedger,
    charge_active,
)
from dprag_core.accounting.stores import sqlite as sqlite_store
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.answers import DPAnswer
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

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


# -- a claim seen at once, made durable by the query's charge or its settle ----------------------


def test_a_claim_not_yet_durable_refuses_a_reuse_at_once(make_ledger: LedgerFactory) -> None:
    """``durable=False`` (what the apps use) defers the disk, never the record: the id is
    refused from the claim's return, on this object and on any other, before any charge."""
    led = make_ledger(budget_per_unit=1.0)
    assert led.claim("q", durable=False)
    with pytest.raises(QueryIdReused):
        led.claim("q", durable=False)
    if make_ledger.kind != "memory":  # type: ignore[attr-defined]
        other = make_ledger(budget_per_unit=1.0)  # another connection (another process alike)
        with pytest.raises(QueryIdReused):
            other.claim("q", durable=False)
        with pytest.raises(QueryIdReused):
            other.claim("q")
    assert led.charge("q", ["a"], 0.5).granted  # the claimed id charges once
    led.settle()
    with pytest.raises(QueryIdReused):
        led.claim("q", durable=False)
    with pytest.raises(TypeError, match="durable"):
        led.claim("q2", durable=1)  # type: ignore[arg-type]
    assert led.remaining(["a"]) == {"a": 0.5}


class WalSyncs:
    """Counts the fsyncs of a SQLite file's WAL: a commit that returned before an fsync
    began is durable once that fsync is done (it holds every frame written before it; a
    checkpoint that moved the frames out synced them first)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fsyncs = 0
        real = sqlite_store._datasync

        def datasync(fd: int) -> None:
            began = self.fsyncs
            real(fd)
            assert self.fsyncs == began  # one thread: no other fsync overlapped it
            self.fsyncs += 1

        monkeypatch.setattr(sqlite_store, "_datasync", datasync)

    def mark(self) -> int:
        """Taken right after a commit returned: what :meth:`durable` checks against."""
        return self.fsyncs

    def durable(self, mark: int) -> bool:
        return self.fsyncs > mark


def test_sqlite_a_visible_claim_is_made_durable_by_the_charge_or_the_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = SQLiteLedger(tmp_path / "l.db", budget_per_unit=1.0, create=True)
    syncs = WalSyncs(monkeypatch)
    assert led.claim("durable")
    assert syncs.fsyncs == 1  # the default: fsync'd before the claim returns
    assert led.claim("q1", durable=False)
    claimed = syncs.mark()
    assert not syncs.durable(claimed)  # committed (seen by all), not yet fsync'd
    assert led.charge("q1", ["a"], 0.25).granted  # the charge's fsync carries the claim
    assert syncs.durable(claimed) and syncs.fsyncs == 2
    led.settle()  # nothing left to settle: no store call
    assert syncs.fsyncs == 2
    assert led.claim("q2", durable=False)  # a query that charges nothing ...
    claimed = syncs.mark()
    assert led.charge("q2", [], 0.25).granted and not syncs.durable(claimed)
    led.settle()  # ... is made durable by its settle: one fsync
    assert syncs.durable(claimed) and syncs.fsyncs == 3
    assert led.claim("q3", durable=False) and led.claim("q4", durable=False)
    claimed = syncs.mark()
    assert not led.charge("q3", ["a"], 1.0).granted  # a refusal is a durable write too
    assert syncs.durable(claimed)
    led.settle()
    assert syncs.fsyncs == 4


@needs_postgres
def test_postgres_a_visible_claim_is_in_the_flushed_wal_after_the_settle(table: str) -> None:
    """The claim's commit record precedes the settle's (or the charge's), which is flushed:
    the WAL flushed through the settle holds the claim."""
    import psycopg

    led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:

        def lsn(what: str) -> int:
            row = conn.execute(f"SELECT pg_current_wal_{what}_lsn() - '0/0'::pg_lsn").fetchone()
            assert row is not None
            return int(row[0])

        assert led.claim("q1", durable=False)
        claimed = lsn("insert")  # past the claim's commit record
        led.settle()
        assert lsn("flush") >= claimed
        assert led.claim("q2", durable=False)
        claimed = lsn("insert")
        assert led.charge("q2", ["a"], 0.5).granted
        assert lsn("flush") >= claimed
    with pytest.raises(QueryIdReused):
        PostgresLedger(POSTGRES_DSN, table=table).claim("q1")


@pytest.mark.postgres
@needs_postgres
def test_postgres_claims_and_charges_read_by_key_whatever_plans_a_session_cached(
    table: str,
) -> None:
    """A session caches its plans at its first calls, made while a new store's tables are
    empty (a scan of the audit log is the cheapest then). Its later claims and charges
    still read every table by key: their work does not grow with the queries recorded."""
    import psycopg

    from dprag_core.accounting.stores.pgtrust import DEFAULT_SCHEMA

    PostgresLedger(POSTGRES_DSN, budget_per_unit=1e3, table=table, create=True).close()
    call = f'SELECT * FROM "{DEFAULT_SCHEMA}"."{table}_charge"(%s::text, %s::text[], %s::int8)'
    logs = [f"{table}_{t}" for t in ("audit", "queries", "units", "pruned")]

    def query(conn: psycopg.Connection[object], i: int) -> None:
        conn.execute(call, (f"q{i}", [], 1))  # its claim, seen at once
        conn.execute(call, (f"q{i}", [f"a{i}", f"b{i}"], 1))  # its charge

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        for i in range(40):  # the plans are made at the first calls, on empty tables
            query(conn, i)
        with conn.transaction(force_rollback=True):  # this transaction's own table reads
            query(conn, 40)
            rows = conn.execute(
                "SELECT relname, seq_scan, idx_scan FROM pg_stat_xact_user_tables"
                " WHERE schemaname = %s AND relname = ANY(%s)",
                (DEFAULT_SCHEMA, logs),
            ).fetchall()
    assert {name: scans for name, scans, _ in rows} == dict.fromkeys(logs, 0)
    assert all(index_reads > 0 for _, _, index_reads in rows)  # the view saw the reads


@pytest.mark.parametrize("mode", ["answer", "stream"])
@pytest.mark.parametrize("score", [0.9, 0.1], ids=["charged", "nothing-above-tau"])
def test_an_app_releases_only_after_its_claim_is_durable_and_refuses_a_reuse_at_once(
    mode: str, score: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PrivateRAG over MuRAG: the claim is seen before the private section opens (another
    app's query under the same id is refused before it retrieves anything, while the first
    is still inside its private section), and durable before the first thing leaves, whether
    the query charged units (the charge's fsync) or none (the settle's)."""
    path = tmp_path / "l.db"
    SQLiteLedger(path, budget_per_unit=10.0, create=True).close()
    syncs = WalSyncs(monkeypatch)
    claims: list[int] = []
    real_claim = SQLiteLedger._claim

    def claim(self: SQLiteLedger, query_id: str, *, durable: bool) -> bool:
        done = real_claim(self, query_id, durable=durable)
        claims.append(syncs.mark())
        return done

    monkeypatch.setattr(SQLiteLedger, "_claim", claim)
    fetched: list[str] = []
    seen: dict[str, bool] = {}

    @HonoursK
    def reuser(question: str, k: int) -> list[ScoredDocument]:
        fetched.append(question)
        return []

    other = PrivateRAG(murag(SQLiteLedger(path)), reuser)

    @HonoursK
    def retriever(question: str, k: int) -> list[ScoredDocument]:  # the private section
        seen["durable before"] = syncs.durable(claims[-1])
        try:
            other.answer("Who else?", query_id="req-1")
        except QueryIdReused:
            seen["reuse refused"] = True
        return [ScoredDocument(f"d{i}", f"record {i}", score) for i in range(3)][:k]

    app = PrivateRAG(murag(SQLiteLedger(path)), retriever)
    if mode == "answer":
        first: object = app.answer("Who?", query_id="req-1")
    else:
        first = next(iter(app.stream("Who?", query_id="req-1")))
    assert syncs.durable(claims[0])  # before the first thing left
    assert seen == {"durable before": False, "reuse refused": True} and fetched == []
    assert isinstance(first, (str, DPAnswer))
    with pytest.raises(QueryIdReused):
        other.answer("Who?", query_id="req-1")
    assert fetched == []
