"""Ledger fixtures: every backend, fresh per test.

PostgreSQL tests need a server: ``eval "$(scripts/postgres_for_tests.sh)"`` sets
DPRAG_TEST_POSTGRES_DSN (scripts/test.sh does this in CI); without it they skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_support import (
    NO_POSTGRES,
    POSTGRES_DSN,
    LedgerFactory,
    drop_postgres_tables,
    needs_postgres,
)
from tcp_proxy import Proxy

from dprag_core.accounting.ledger import InMemoryLedger, Ledger, PostgresLedger, SQLiteLedger

BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres]),
]


@pytest.fixture(params=BACKENDS)
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerFactory]:
    """``make_ledger(budget_per_unit=...)`` opens (or re-opens) this test's ledger."""
    kind = request.param
    table = f"t_{uuid.uuid4().hex[:16]}"
    opened: list[Ledger] = []

    def factory(*, budget_per_unit: float) -> Ledger:
        led: Ledger
        if kind == "memory":
            led = InMemoryLedger(budget_per_unit=budget_per_unit)
        elif kind == "sqlite":
            led = SQLiteLedger(tmp_path / "ledger.db", budget_per_unit=budget_per_unit, create=True)
        else:
            led = PostgresLedger(
                POSTGRES_DSN, budget_per_unit=budget_per_unit, table=table, create=True
            )
        opened.append(led)
        return led

    factory.kind = kind  # type: ignore[attr-defined]
    yield factory
    for led in opened:
        led.close()
    if kind == "postgres":
        drop_postgres_tables(table)


@pytest.fixture
def table() -> Iterator[str]:
    """A fresh PostgreSQL table prefix, dropped afterwards (skips without a server)."""
    if not POSTGRES_DSN:
        pytest.skip(NO_POSTGRES)
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    drop_postgres_tables(name)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A loopback fault proxy in front of the test server (tcp_proxy.py)."""
    from psycopg.conninfo import conninfo_to_dict

    if not POSTGRES_DSN:
        pytest.skip(NO_POSTGRES)
    info = conninfo_to_dict(POSTGRES_DSN)
    p = Proxy(str(info.get("host", "127.0.0.1")), int(info.get("port", 5432)))
    yield p
    p.close()


@pytest.fixture
def runtime_role() -> Iterator[str]:
    """A fresh login role without any rights (needs DPRAG_TEST_POSTGRES_ROLES=1)."""
    import psycopg

    role = f"dprag_rt_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    yield role
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


@pytest.fixture
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(kind, target) for a ledger shared by worker processes; kind from indirect param."""
    kind = request.param
    if kind == "sqlite":
        yield kind, str(tmp_path / "shared.db")
        return
    if not POSTGRES_DSN:
        pytest.skip(NO_POSTGRES)
    table = f"t_{uuid.uuid4().hex[:16]}"
    yield kind, f"{POSTGRES_DSN}|{table}"
    drop_postgres_tables(table)
