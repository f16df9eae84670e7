"""PostgreSQL under faults and least privilege: bounded waits, unknown outcomes, grants.

Faults come from a loopback proxy (tcp_proxy.py), so no server privileges are
needed. The role tests create and drop a login role: they run only where the
suite owns its server (scripts/test.sh sets DPRAG_TEST_POSTGRES_ROLES=1 when
it starts one).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, dsn_with, needs_postgres, needs_roles
from tcp_proxy import Proxy

from dprag_core.accounting import PostgresCorpusAccountant
from dprag_core.accounting.ledger import (
    LedgerOutcomeUnknown,
    LedgerUnavailable,
    PostgresLedger,
    PostgresTimeouts,
)
from dprag_core.budget import Budget
from dprag_core.ledger_cli import ledger_init

pytestmark = [pytest.mark.postgres, needs_postgres]
FAST = PostgresTimeouts(connect=5, statement=1.0, lock=0.5, idle_in_transaction=5)


def _dsn(**changes: Any) -> str:
    return dsn_with(**changes)


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread; fail if it is still blocked after ``seconds`` (liveness)."""
    caught: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            caught[0] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the charge was not bounded in time"
    return caught[0]


def test_a_paused_server_gives_an_unknown_outcome_not_a_hang(proxy: Proxy, table: str) -> None:
    led = PostgresLedger(
        _dsn(host="127.0.0.1", port=proxy.port),
        budget_per_unit=1.0,
        table=table,
        timeouts=FAST,
        create=True,
    )

    def connected_then_paused() -> None:
        led.remaining(["a"])  # this thread's connection is up
        proxy.mode = "pause"
        led.charge("q1", ["a"], 0.5)

    exc = _within(30, connected_then_paused)
    assert isinstance(exc, LedgerOutcomeUnknown) and "same query id" in str(exc)
    proxy.mode = "forward"
    assert led.charge("q1", ["a"], 0.5).granted  # the retry finds out: charged once
    assert led.remaining(["a"]) == {"a": 0.5}


@pytest.mark.parametrize("kind", ["ledger", "corpus"])
def test_a_reply_lost_after_the_commit_is_unknown_and_the_retry_is_idempotent(
    proxy: Proxy, table: str, kind: str
) -> None:
    via_proxy = _dsn(host="127.0.0.1", port=proxy.port)
    if kind == "ledger":
        led = PostgresLedger(
            via_proxy, budget_per_unit=1.0, table=table, timeouts=FAST, create=True
        )
        charge: Callable[[], object] = lambda: led.charge("q1", ["a", "b"], 0.5)  # noqa: E731
    else:
        acc = PostgresCorpusAccountant(
            via_proxy, total=Budget(1.0), table=table, timeouts=FAST, create=True
        )
        charge = lambda: acc.charge(Budget(0.5), query_id="q1")  # noqa: E731
    proxy.mode = "cut"
    with pytest.raises(LedgerOutcomeUnknown, match="unknown") as info:
        charge()
    assert "nothing was charged" not in str(info.value)
    proxy.mode = "forward"
    time.sleep(0.2)
    charge()  # the retry: already recorded, so nothing new
    if kind == "ledger":
        direct = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table)
        assert [e.query_id for e in direct.audit_log()] == ["q1", "q1"]
        assert direct.remaining(["a", "b"]) == {"a": 0.5, "b": 0.5}
    else:
        again = PostgresCorpusAccountant(POSTGRES_DSN, total=Budget(1.0), table=table)
        assert (again.queries, again.spent_epsilon) == (1, 0.5)


@pytest.mark.parametrize("kind", ["ledger", "corpus"])
def test_a_row_held_by_an_idle_transaction_times_out(table: str, kind: str) -> None:
    import psycopg

    if kind == "ledger":
        led = PostgresLedger(
            POSTGRES_DSN, budget_per_unit=1.0, table=table, timeouts=FAST, create=True
        )
        led.charge("q0", ["a"], 0.1)
        hold, charge = (
            f"SELECT 1 FROM {table}_units FOR UPDATE",
            lambda: led.charge("q1", ["a"], 0.1),
        )
    else:
        acc = PostgresCorpusAccountant(
            POSTGRES_DSN, total=Budget(1.0), table=table, timeouts=FAST, create=True
        )
        hold, charge = (
            f"SELECT 1 FROM {table}_budget FOR UPDATE",
            lambda: acc.charge(Budget(0.1), query_id="q1"),
        )
    with psycopg.connect(POSTGRES_DSN) as holder:  # a transaction left open, idle
        holder.execute(hold)
        exc = _within(30, charge)
        assert isinstance(exc, LedgerUnavailable) and "timed out" in str(exc)
        assert not isinstance(exc, LedgerOutcomeUnknown)  # the server rolled it back
        holder.rollback()
    charge()  # works again once the row is free


def test_a_missing_or_partial_schema_is_a_clear_error(table: str) -> None:
    import psycopg

    with pytest.raises(LedgerUnavailable, match=r"absent.*dprag ledger init"):
        PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=False)
    PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True).close()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}_units")
    for create in (True, False):
        with pytest.raises(LedgerUnavailable, match=f"incomplete.*{table}_units"):
            PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=create)


def test_bad_timeouts_are_refused() -> None:
    with pytest.raises(ValueError, match="statement"):
        PostgresTimeouts(statement=float("nan"))
    with pytest.raises(TypeError, match="timeouts"):
        PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, timeouts=5)  # type: ignore[arg-type]


@needs_roles
def test_a_runtime_role_charges_and_reads_but_cannot_rewrite_history(
    table: str, runtime_role: str
) -> None:
    import psycopg

    corpus = f"{table}_c"
    ns = {"dsn": POSTGRES_DSN, "table": table, "grant_to": runtime_role, "corpus_delta": 0.0}
    import argparse

    assert ledger_init(argparse.Namespace(**ns, budget_per_unit=1.0, corpus_epsilon=None)) == 0
    ns["table"] = corpus
    assert ledger_init(argparse.Namespace(**ns, budget_per_unit=None, corpus_epsilon=2.0)) == 0
    as_app = _dsn(user=runtime_role)
    try:
        led = PostgresLedger(as_app, budget_per_unit=1.0, table=table, create=False)
        assert led.charge("q1", ["a"], 0.5).granted and led.remaining(["a"]) == {"a": 0.5}
        assert [e.query_id for e in led.audit_log()] == ["q1"]
        acc = PostgresCorpusAccountant(as_app, total=Budget(2.0), table=corpus, create=False)
        acc.charge(Budget(0.5), query_id="q1")
        assert acc.queries == 1
        # create=True is the owner's step: the serving role is refused, the owner named
        with pytest.raises(LedgerUnavailable, match="schema dprag is owned by role 'dprag'"):
            PostgresLedger(as_app, budget_per_unit=1.0, table=table, create=True)
        with psycopg.connect(as_app, autocommit=True) as conn:
            for attack in (
                f"DELETE FROM dprag.{table}_audit",
                f"UPDATE dprag.{table}_units SET remaining = 1000000000000",
                f"ALTER TABLE dprag.{table}_audit DISABLE TRIGGER ALL",
                f"TRUNCATE dprag.{table}_audit",
                f"UPDATE dprag.{corpus}_budget SET spent_epsilon = 0",
                f"DELETE FROM dprag.{corpus}_charges",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attack)
        assert led.remaining(["a"]) == {"a": 0.5} and acc.spent_epsilon == 0.5
    finally:
        drop_postgres_tables(corpus)


@needs_roles
def test_a_role_without_grants_gets_a_clear_error(table: str, runtime_role: str) -> None:
    PostgresLedger.create_schema(POSTGRES_DSN, budget_per_unit=1.0, table=table)
    with pytest.raises(LedgerUnavailable, match=r"lacks a right.*docs/ledgers\.md"):
        PostgresLedger(_dsn(user=runtime_role), budget_per_unit=1.0, table=table, create=False)


def _killed_while_blocked(table: str, *, check_client: bool) -> int:
    """Kill -9 a client whose charge waits for a lock; rows it committed after its death."""
    import multiprocessing as mp
    import signal

    import psycopg

    slow = PostgresTimeouts(statement=60, lock=30)  # neither fires during this test

    def client() -> None:
        led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, timeouts=slow)
        if not check_client:  # the control: what a plain connection does
            led._store.conn().execute("SET client_connection_check_interval = 0")
        led.charge("killed", ["held"], 0.1)

    with psycopg.connect(POSTGRES_DSN) as holder:
        holder.execute(f"SELECT 1 FROM {table}_units FOR UPDATE")
        proc = mp.get_context("fork").Process(target=client)
        proc.start()
        time.sleep(1.0)  # the charge is now waiting for the row
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        time.sleep(2.5)  # longer than client_connection_check_interval (1 s)
        holder.rollback()  # the row is free: a surviving charge would commit now
    time.sleep(0.5)
    with psycopg.connect(POSTGRES_DSN) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}_audit WHERE query_id = 'killed'")
        return int(row.fetchone()[0])  # type: ignore[index]


def test_a_killed_clients_blocked_charge_does_not_commit_later(table: str) -> None:
    led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=table, create=True)
    led.charge("q0", ["held"], 0.1)
    assert _killed_while_blocked(table, check_client=True) == 0
    # the positive control: without the client check the dead client's charge commits
    assert _killed_while_blocked(table, check_client=False) == 1


def test_the_dsns_own_options_are_kept(table: str) -> None:
    dsn = _dsn(options="-c application_name=dprag_serving")
    led = PostgresLedger(dsn, budget_per_unit=1.0, table=table, timeouts=FAST, create=True)
    conn = led._store.conn()
    assert conn.execute("SHOW application_name").fetchone() == ("dprag_serving",)
    assert conn.execute("SHOW lock_timeout").fetchone() == ("500ms",)
