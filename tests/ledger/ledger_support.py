"""Helpers for the ledger tests: the PostgreSQL switch, worker processes, audit replay.

A plain module (not a conftest) so that worker processes can import it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger import AuditEntry, Ledger, PostgresLedger, SQLiteLedger
from dprag_core.accounting.stores.amounts import SCALE
from dprag_core.accounting.stores.pgtrust import DEFAULT_SCHEMA
from dprag_core.budget import Budget, PrivacyBudgetExhausted

POSTGRES_DSN = os.environ.get("DPRAG_TEST_POSTGRES_DSN", "")
NO_POSTGRES = 'DPRAG_TEST_POSTGRES_DSN is unset: run `eval "$(scripts/postgres_for_tests.sh)"`'
needs_postgres = pytest.mark.skipif(not POSTGRES_DSN, reason=NO_POSTGRES)
needs_roles = pytest.mark.skipif(
    os.environ.get("DPRAG_TEST_POSTGRES_ROLES") != "1",
    reason="creates a login role: set DPRAG_TEST_POSTGRES_ROLES=1 on a throwaway server",
)

LedgerFactory = Callable[..., Ledger]


def dsn_with(**changes: Any) -> str:
    """The test server's DSN with some parameters changed (host, port, user, options)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(POSTGRES_DSN, **changes)


def drop_postgres_tables(table: str, schema: str = DEFAULT_SCHEMA) -> None:
    """Drop a test ledger's tables whatever budget it was created with."""
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        for suffix in ("audit", "units", "meta", "store", "budget", "charges", "queries", "pruned"):
            conn.execute(f"DROP TABLE IF EXISTS {schema}.{table}_{suffix} CASCADE")
        for fn in ("append_only", "charge"):
            conn.execute(f"DROP FUNCTION IF EXISTS {schema}.{table}_{fn} CASCADE")


def open_ledger(kind: str, target: str, budget: float, *, create: bool = False) -> Ledger:
    """Open the shared ledger: ``target`` is a file path (sqlite) or 'dsn|table' (postgres)."""
    if kind == "sqlite":
        return SQLiteLedger(target, budget_per_unit=budget, create=create)
    dsn, table = target.rsplit("|", 1)
    return PostgresLedger(dsn, budget_per_unit=budget, table=table, create=create)


def charge_many(
    kind: str, target: str, budget: float, cost: float, worker: int, queries: int, pool: int
) -> list[str]:
    """Charge ``queries`` random overlapping unit sets; return the granted query ids."""
    rng = np.random.default_rng(worker)
    granted = []
    with open_ledger(kind, target, budget) as led:
        for i in range(queries):
            size = int(rng.integers(1, 6))
            units = [f"u{j}" for j in rng.choice(pool, size=size, replace=False)]
            qid = f"w{worker}-q{i}"
            if led.charge(qid, units, cost).granted:
                granted.append(qid)
    return granted


def charge_until_killed(
    kind: str, target: str, budget: float, cost: float, worker: int, markers: str
) -> None:
    """Loop forever: claim, charge, settle, 'generate', then append a released marker (after
    the commits)."""
    rng = np.random.default_rng(worker)
    led = open_ledger(kind, target, budget)
    own = [f"w{worker}-u{j}" for j in range(30)]  # fresh units: the first charges succeed
    fd = os.open(markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    i = 0
    while True:
        picked = rng.choice(30, size=int(rng.integers(1, 8)), replace=False)
        units = [own[j] for j in picked] + [f"u{j}" for j in picked[:1] if j % 2]
        qid = f"w{worker}-q{i}"
        i += 1
        led.claim(qid, durable=False)  # as the apps do: seen now, durable before the release
        if led.charge(qid, units, cost).granted:
            led.settle()
            time.sleep(float(rng.uniform(0, 0.002)))  # the answer is being computed
            os.write(fd, f"{qid} {','.join(sorted(units))}\n".encode())


def claimed_ids(kind: str, target: str) -> set[str]:
    """The query ids in a shared ledger's table of claims (``target`` as for
    :func:`open_ledger`), read directly."""
    if kind == "sqlite":
        import sqlite3

        with contextlib.closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as conn:
            return {q for (q,) in conn.execute("SELECT query_id FROM queries")}
    import psycopg

    dsn, table = target.rsplit("|", 1)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT query_id FROM {DEFAULT_SCHEMA}.{table}_queries")
        return {q for (q,) in rows}


def replay(entries: list[AuditEntry]) -> dict[str, int]:
    """Per-unit spend in integer pico-epsilon units, replayed from an audit log."""
    spent: dict[str, int] = {}
    for e in entries:
        spent[e.unit] = spent.get(e.unit, 0) + round(e.cost * SCALE)
    return spent


def open_corpus(
    kind: str, target: str, total: Budget, *, create: bool = False
) -> DurableCorpusAccountant:
    """Open the shared corpus budget (``target`` as for :func:`open_ledger`)."""
    if kind == "sqlite":
        return SQLiteCorpusAccountant(target, total=total, create=create)
    dsn, table = target.rsplit("|", 1)
    return PostgresCorpusAccountant(dsn, total=total, table=table, create=create)


def corpus_charge_many(
    kind: str, target: str, total: Budget, cost: Budget, worker: int, queries: int
) -> list[str]:
    """Charge ``queries`` times; return the query ids charged (refusals are expected)."""
    granted = []
    with open_corpus(kind, target, total) as acc:
        for i in range(queries):
            qid = f"w{worker}-q{i}"
            try:
                acc.charge(cost, query_id=qid)
            except PrivacyBudgetExhausted:
                continue
            granted.append(qid)
    return granted


def corpus_charge_until_killed(
    kind: str, target: str, total: Budget, cost: Budget, worker: int, markers: str
) -> None:
    """Loop forever: charge, 'answer', then append a released marker (after the commit)."""
    rng = np.random.default_rng(worker)
    acc = open_corpus(kind, target, total)
    fd = os.open(markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    i = 0
    while True:
        qid = f"w{worker}-q{i}"
        i += 1
        acc.charge(cost, query_id=qid)
        time.sleep(float(rng.uniform(0, 0.002)))  # the answer is being computed
        os.write(fd, f"{qid} released\n".encode())


def fails_in_one_line(argv: list[str]) -> str:
    """``dprag`` ``argv`` must end in one line (the SystemExit message), not a traceback."""
    from dprag_core.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    message = str(info.value.code)
    assert info.value.code not in (0, None) and "\n" not in message
    return message
