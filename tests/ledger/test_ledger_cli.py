"""``dprag ledger``: init, status, history, export and plot, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from ledger_support import (
    POSTGRES_DSN,
    drop_postgres_tables,
    needs_postgres,
    needs_roles,
)
from ledger_support import (
    fails_in_one_line as fails,
)

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger, SQLiteLedger
from dprag_core.budget import Budget, PrivacyBudgetExhausted
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


def test_operator_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPRAG_LEDGER_DSN", raising=False)
    db = str(tmp_path / "b.db")
    assert "missing" in fails(["ledger", "status", "--sqlite", str(tmp_path / "none.db")])
    assert not (tmp_path / "none.db").exists()
    init = ["ledger", "init", "--sqlite", db]
    assert "--corpus-delta" in fails([*init, "--corpus-epsilon", "2"])  # no silent delta = 0
    assert main([*init, "--corpus-epsilon", "2", "--corpus-delta", "0"]) == 0
    assert main([*init, "--budget-per-unit", "1"]) == 0
    assert "differs" in fails([*init, "--corpus-epsilon", "3", "--corpus-delta", "0"])
    assert "PostgreSQL" in fails([*init, "--budget-per-unit", "1", "--grant-to", "app"])
    assert "--schema is for PostgreSQL" in fails(
        ["ledger", "status", "--sqlite", db, "--schema", "s"]
    )
    assert "choose one with --table" in fails(["ledger", "export", "--sqlite", db])
    assert "no table 'nope'" in fails(["ledger", "status", "--sqlite", db, "--table", "nope"])
    (tmp_path / "app.db").write_text("not a database")
    assert "not a SQLite database" in fails(
        ["ledger", "status", "--sqlite", str(tmp_path / "app.db")]
    )
    secret = "postgresql://alice:hunter2@127.0.0.1:1/db?connect_timeout=1"
    for argv in (["ledger", "status", "--dsn", secret], ["ledger", "status"]):
        monkeypatch.setenv("DPRAG_LEDGER_DSN", secret)
        message = fails(argv)
        assert "unreachable" in message and "hunter2" not in message and "alice" not in message


def test_an_operator_error_from_the_console_is_one_line_without_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dprag_core.cli",
            "ledger",
            "status",
            "--sqlite",
            str(tmp_path / "x.db"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "x.db" in done.stderr


def _operator_target(kind: str, tmp_path: Path, table: str) -> list[str]:
    return ["--sqlite", str(tmp_path / "b.db")] if kind == "sqlite" else ["--dsn", POSTGRES_DSN]


@pytest.mark.parametrize(
    "kind", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres])]
)
def test_the_operator_view_on_both_backends(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = f"t_{uuid.uuid4().hex[:12]}"
    where = _operator_target(kind, tmp_path, table)
    corpus = ["--table", table if kind == "postgres" else "corpus"]
    ledger = ["--table", f"{table}_l"] if kind == "postgres" else ["--ledger"]
    try:
        init = ["ledger", "init", *where]
        assert main([*init, *corpus, "--corpus-epsilon", "1", "--corpus-delta", "1e-6"]) == 0
        ledger_init_table = ["--table", f"{table}_l"] if kind == "postgres" else []
        assert main([*init, *ledger_init_table, "--budget-per-unit", "1", "--name", "people"]) == 0
        acc, led = _opened(kind, tmp_path, table)
        for i in range(2):
            acc.charge(Budget(0.5, 5e-7), query_id=f"q{i}")
        with pytest.raises(PrivacyBudgetExhausted, match="persists") as refused:
            acc.charge(Budget(0.5))
        message = str(refused.value)  # names the command that shows it, never the DSN
        shown = [*where, *corpus] if kind == "sqlite" else corpus
        assert f"see it: dprag ledger status {' '.join(shown)}" in message, message
        assert kind == "sqlite" or POSTGRES_DSN not in message
        led.charge("q1", ["a", "b"], 0.5)
        led.charge("q2", ["a"], 0.5)
        assert not led.charge("q3", ["a"], 0.5).granted
        capsys.readouterr()
        assert main(["ledger", "status", *where, *corpus]) == 0
        text = capsys.readouterr().out
        assert "remaining    epsilon=0  delta=0  (exhausted)" in text and "1e-300" not in text
        assert main(["ledger", "status", *where, *ledger, "--json"]) == 0
        (view,) = json.loads(capsys.readouterr().out)
        assert view["kind"] == "per-unit ledger" and view["name"] == "people"
        assert (view["units"], view["exhausted"], view["refusals"], view["queries"]) == (2, 1, 1, 2)
        assert view["histogram"][5] == 1 and view["histogram"][9] == 1
        assert main(["ledger", "status", *where, *corpus, "--json"]) == 0
        (budget,) = json.loads(capsys.readouterr().out)
        assert (budget["spent_epsilon"], budget["remaining_epsilon"], budget["refusals"]) == (
            1.0, 0.0, 1,
        )  # fmt: skip
        out = tmp_path / "audit.csv"
        assert main(["ledger", "export", *where, *ledger, "--output", str(out)]) == 0
        rows = list(csv.DictReader(out.open()))
        assert [(r["query_id"], r["unit"]) for r in rows] == [("q1", "a"), ("q1", "b"), ("q2", "a")]
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        assert "3 rows written" in capsys.readouterr().out
        assert main(["ledger", "export", *where, *corpus, "--format", "json"]) == 0
        exported = json.loads(capsys.readouterr().out)
        assert [r["query_id"] for r in exported] == [r.query_id for r in acc.history()]
        assert main(["ledger", "history", *where, *corpus, "--last", "1"]) == 0
        shown = capsys.readouterr().out
        last = list(acc.history())[-1].query_id
        assert "the last 1 rows" in shown and last in shown and shown.count("\n  ") == 1
        plot = tmp_path / "spend.png"
        assert main(["ledger", "status", *where, *ledger, "--plot", str(plot)]) == 0
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert POSTGRES_DSN not in capsys.readouterr().out or not POSTGRES_DSN
    finally:
        if kind == "postgres":
            drop_postgres_tables(table)
            drop_postgres_tables(f"{table}_l")


def _opened(kind: str, tmp_path: Path, table: str) -> tuple[Any, Any]:
    """The serving side's view of the stores that ``dprag ledger init`` made."""
    if kind == "sqlite":
        return SQLiteCorpusAccountant(tmp_path / "b.db"), SQLiteLedger(tmp_path / "b.db")
    return PostgresCorpusAccountant(POSTGRES_DSN, table=table), PostgresLedger(
        POSTGRES_DSN, table=f"{table}_l"
    )


@pytest.mark.postgres
@needs_postgres
@needs_roles
def test_init_checks_the_role_before_creating_anything(table: str) -> None:
    import psycopg

    init = ["ledger", "init", "--dsn", POSTGRES_DSN, "--table", table, "--budget-per-unit", "1"]
    assert "not 'public'" in fails([*init, "--grant-to", "public"])
    assert "no role 'nobody_here'" in fails([*init, "--grant-to", "nobody_here"])
    with psycopg.connect(POSTGRES_DSN) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"{table}_meta",)).fetchone() == (None,)


INIT = ["init", "--corpus-epsilon", "2", "--corpus-delta", "0"]


@pytest.mark.parametrize(
    ("command", "option", "text", "said"),
    [
        (INIT, "--corpus-epsilon", "abc", "must be a finite number > 0, got abc"),
        (INIT, "--corpus-epsilon", "inf", "must be a finite number > 0, got inf"),
        (INIT, "--corpus-delta", "1", "must be a number in [0, 1), got 1"),
        (["history"], "--last", "-5", "must be an integer >= 0, got -5"),
        (["history"], "--last", "ten", "must be an integer >= 0, got ten"),
    ],
)
def test_a_bad_number_is_refused_naming_the_range(
    command: list[str],
    option: str,
    text: str,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not a number, or out of range: argparse's usage error names the range; nothing created."""
    path = str(tmp_path / "b.db")
    with pytest.raises(SystemExit) as info:
        main(["ledger", command[0], "--sqlite", path, *command[1:], option, text])
    assert info.value.code == 2
    assert f"argument {option}: {said}" in capsys.readouterr().err
    assert not (tmp_path / "b.db").exists()
