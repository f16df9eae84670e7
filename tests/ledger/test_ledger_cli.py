"""``dprag ledger init``: the schema owner's step, from the command line."""

from __future__ import annotations

import uuid

import pytest
from ledger_support import POSTGRES_DSN, drop_postgres_tables, needs_postgres

from dprag_core.accounting import PostgresCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger
from dprag_core.budget import Budget
from dprag_core.cli import main


def test_init_needs_a_dsn_and_exactly_one_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPRAG_LEDGER_DSN", raising=False)
    with pytest.raises(SystemExit, match="DPRAG_LEDGER_DSN"):
        main(["ledger", "init", "--budget-per-unit", "1"])
    with pytest.raises(SystemExit, match="exactly one"):
        main(["ledger", "init", "--dsn", "host=x", "--budget-per-unit", "1",
              "--corpus-epsilon", "2"])  # fmt: skip
    with pytest.raises(SystemExit):
        main(["ledger", "init", "--dsn", "host=x", "--corpus-epsilon", "-2"])


@pytest.mark.postgres
@needs_postgres
def test_init_creates_what_runtime_opens_with_create_false(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = f"t_{uuid.uuid4().hex[:16]}"
    monkeypatch.setenv("DPRAG_LEDGER_DSN", POSTGRES_DSN)
    try:
        with pytest.raises(LedgerUnavailable, match="dprag ledger init"):
            PostgresCorpusAccountant(POSTGRES_DSN, total=Budget(2.0), table=table, create=False)
        args = ["ledger", "init", "--table", table, "--corpus-epsilon", "2", "--corpus-delta", "0"]
        assert main(args) == 0
        assert main(["ledger", "init", "--table", f"{table}_l", "--budget-per-unit", "1"]) == 0
        out = capsys.readouterr().out
        assert "ready" in out and POSTGRES_DSN not in out
        acc = PostgresCorpusAccountant(POSTGRES_DSN, total=Budget(2.0), table=table, create=False)
        acc.charge(Budget(1.0), query_id="q1")
        led = PostgresLedger(POSTGRES_DSN, budget_per_unit=1.0, table=f"{table}_l", create=False)
        assert led.charge("q1", ["a"], 1.0).granted
    finally:
        drop_postgres_tables(table)
        drop_postgres_tables(f"{table}_l")
