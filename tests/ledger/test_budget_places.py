"""A budget is found by the corpus it protects: by its name, from any directory or process.

Before: ``SQLiteCorpusAccountant("budget.db", ..., create=True)`` started from
three working directories made three budgets (12 queries, 48 epsilon granted
against 16). Now a store is created at an absolute path or by its name in the
per-user budget directory, and a second store of one kind and name is refused
(``dprag_core.accounting.stores.places``).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ledger_support import fails_in_one_line as fails

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, SQLiteLedger
from dprag_core.accounting.stores.places import BUDGET_DIR_ENV
from dprag_core.budget import Budget
from dprag_core.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _make(what: str, path: Path | str | None, **kw: Any) -> Any:
    if what == "corpus":
        return SQLiteCorpusAccountant(path, **({"total": Budget(2.0)} | kw))
    return SQLiteLedger(path, **({"budget_per_unit": 1.0} | kw))


def _python(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env={**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


SPEND_ALL = """
    from dprag_core import Budget, PrivacyBudgetExhausted, SQLiteCorpusAccountant
    budget = SQLiteCorpusAccountant(name="records", total=Budget(16.0), create=True)
    granted = 0
    try:
        while True:
            budget.charge(Budget(4.0))
            granted += 1
    except PrivacyBudgetExhausted:
        print(granted, budget.path)
"""


def test_one_name_is_one_budget_from_every_working_directory(tmp_path: Path) -> None:
    granted, files = 0, set()
    for folder in ("app", "cron", "worker"):  # the three working directories
        (tmp_path / folder).mkdir()
        count, path = _python(SPEND_ALL, tmp_path / folder).split()
        granted, files = granted + int(count), files | {path}
    assert granted == 4  # 16 epsilon / 4 per query, not 4 per directory
    assert files == {str(Path(os.environ[BUDGET_DIR_ENV]) / "records.db")}
    assert not any(p.suffix == ".db" for p in tmp_path.rglob("*"))  # none in a cwd


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_relative_path_is_never_created(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"path 'budget\.db' is relative.*name="):
        _make(what, "budget.db", create=True)
    assert list(tmp_path.iterdir()) == []
    _make(what, tmp_path / "budget.db", create=True).close()
    assert _make(what, "budget.db").path == Path("budget.db")  # opening one may be relative


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_second_store_of_one_name_is_refused_naming_the_first(what: str, tmp_path: Path) -> None:
    name = "records"
    first, second = tmp_path / "a" / "first.db", tmp_path / "b" / "second.db"
    first.parent.mkdir(), second.parent.mkdir()
    _make(what, first, create=True, name=name).close()
    _make(what, first, create=True, name=name).close()  # the same store again: opened
    with pytest.raises(LedgerUnavailable, match="already exists") as info:
        _make(what, second, create=True, name=name)
    assert str(first) in str(info.value)
    assert not second.exists()  # refused before anything was written
    assert _make(what, second, create=True, name="another-corpus").name == "another-corpus"
    first.unlink()  # deleting its file retires a budget: the name is free again
    assert _make(what, tmp_path / "b" / "third.db", create=True, name=name).path.exists()
    # a store created without a name names no corpus: nothing to check or register
    _make(what, tmp_path / "a" / "x.db", create=True).close()
    _make(what, tmp_path / "b" / "y.db", create=True).close()
    assert _make(what, tmp_path / "b" / "y.db").name == ("corpus" if what == "corpus" else "ledger")


def test_opening_by_name_reaches_the_store_wherever_it_was_created(tmp_path: Path) -> None:
    path = tmp_path / "srv" / "budgets.db"
    path.parent.mkdir()
    acc = SQLiteCorpusAccountant(
        path, total=Budget(3.0), table="notes", name="records", create=True
    )
    acc.charge(Budget(1.0))
    again = SQLiteCorpusAccountant(name="records", table="notes")
    assert (again.path, again.spent_epsilon) == (path, 1.0)
    with pytest.raises(ValueError, match="table 'notes'"):
        SQLiteCorpusAccountant(name="records")  # registered under another table
    with pytest.raises(LedgerUnavailable, match="create=True") as info:
        SQLiteCorpusAccountant(name="nobody")
    assert str(Path(os.environ[BUDGET_DIR_ENV]) / "nobody.db") in str(info.value)
    with pytest.raises(TypeError, match=r"give path .* or name"):
        SQLiteCorpusAccountant(total=Budget(1.0), create=True)


def test_a_corpus_budget_and_its_ledger_share_the_file_of_their_name(
    capsys: pytest.CaptureFixture[str], budget_home: Path
) -> None:
    budget = SQLiteCorpusAccountant(name="records", total=Budget(5.0, 1e-5), create=True)
    ledger = SQLiteLedger(name="records", budget_per_unit=2.0, create=True)
    assert budget.path == ledger.path == budget_home / "records.db"
    budget.charge(Budget(2.500001999999))
    assert main(["ledger", "status", "--name", "records"]) == 0
    text = capsys.readouterr().out
    assert "corpus budget 'corpus'" in text and "per-unit ledger in" in text
    # exact amounts, never rounded (2.500001999999 is not 2.5)
    assert "spent        epsilon=2.500001999999  delta=0" in text, text
    assert "remaining    epsilon=2.499998000001  delta=0.00001" in text, text


def test_the_default_directory_is_the_users_data_directory(tmp_path: Path) -> None:
    code = """
        from dprag_core import Budget, SQLiteCorpusAccountant
        print(SQLiteCorpusAccountant(name="records", total=Budget(1.0), create=True).path)
    """
    env = {k: v for k, v in os.environ.items() if k not in (BUDGET_DIR_ENV, "XDG_DATA_HOME")}
    xdg = {**env, "XDG_DATA_HOME": str(tmp_path / "data")}
    printed = _python(code, tmp_path, xdg).strip()
    assert printed == str(tmp_path / "data" / "dprag" / "records.db")
    home = {**env, "HOME": str(tmp_path / "home")}
    printed = _python(code, tmp_path, home).strip()
    assert printed == str(tmp_path / "home" / ".local" / "share" / "dprag" / "records.db")
    register = tmp_path / "home" / ".local" / "share" / "dprag" / "names"
    assert stat.S_IMODE(register.stat().st_mode) == 0o700  # owner only: it holds paths


RACE = """
    import sys, time
    from dprag_core import Budget, SQLiteCorpusAccountant
    from dprag_core.accounting.ledger import LedgerUnavailable
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    try:
        SQLiteCorpusAccountant(sys.argv[2], total=Budget(1.0), name="records", create=True)
        print("created")
    except LedgerUnavailable:
        print("refused")
"""


def test_racing_creations_of_one_name_make_one_store(tmp_path: Path) -> None:
    import time

    start = str(time.time() + 2.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RACE), start, str(tmp_path / f"{i}.db")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    said = sorted(p.communicate(timeout=120)[0].strip() for p in racers)
    assert said == ["created"] + ["refused"] * 5
    assert len(list(tmp_path.glob("*.db"))) == 1


def test_an_unusable_budget_directory_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv(BUDGET_DIR_ENV, str(tmp_path / "file" / "dprag"))
    with pytest.raises(LedgerUnavailable, match=f"cannot be written .*{BUDGET_DIR_ENV}"):
        SQLiteCorpusAccountant(tmp_path / "b.db", total=Budget(1.0), name="records", create=True)
    assert not (tmp_path / "b.db").exists()
    monkeypatch.setenv(BUDGET_DIR_ENV, "relative/dir")
    with pytest.raises(ValueError, match=f"{BUDGET_DIR_ENV} must be an absolute path"):
        SQLiteCorpusAccountant(name="records", total=Budget(1.0), create=True)


def test_the_cli_finds_a_store_by_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DPRAG_LEDGER_DSN", raising=False)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    init = ["ledger", "init", "--name", "records", "--corpus-epsilon", "2", "--corpus-delta", "0"]
    assert main(init) == 0
    monkeypatch.chdir(tmp_path / "b")
    SQLiteCorpusAccountant(name="records").charge(Budget(2.0))
    capsys.readouterr()
    assert main(["ledger", "status", "--name", "records"]) == 0
    assert "(exhausted)" in capsys.readouterr().out
    # a second budget of the name, at a relative path here: refused, in the CLI's words
    message = fails(["ledger", "init", "--sqlite", "b.db", "--name", "records",
                      "--corpus-epsilon", "2", "--corpus-delta", "0"])  # fmt: skip
    assert "already exists" in message and "--name 'records'" in message
    assert not (tmp_path / "b" / "b.db").exists()
    assert "no store named 'nobody'" in fails(["ledger", "status", "--name", "nobody"])


PYTHON_WORDS = re.compile(r"\b\w+=(True|False|'|\"|[A-Z]|$|\s)|create=|total=|budget_per_unit")


def test_cli_errors_speak_in_flags_not_python_keywords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DPRAG_LEDGER_DSN", raising=False)
    db = str(tmp_path / "b.db")
    init = ["ledger", "init", "--sqlite", db]
    assert main([*init, "--corpus-epsilon", "2", "--corpus-delta", "0", "--name", "records"]) == 0
    assert main([*init, "--budget-per-unit", "1"]) == 0
    messages = [
        fails(["ledger", "status", "--sqlite", str(tmp_path / "none.db")]),  # missing file
        fails([*init, "--corpus-epsilon", "3", "--corpus-delta", "0"]),  # another total
        fails([*init, "--budget-per-unit", "2"]),  # another budget per unit
        fails([*init, "--corpus-epsilon", "2", "--corpus-delta", "0", "--name", "x y"]),
        fails([*init, "--corpus-epsilon", "2", "--corpus-delta", "0", "--table", "Bad"]),
        fails(["ledger", "status", "--sqlite", db, "--table", "nope"]),
        fails(["ledger", "init", "--sqlite", str(tmp_path / "c.db"), "--corpus-epsilon", "2",
                "--corpus-delta", "0", "--name", "records"]),  # a second budget of the name
    ]  # fmt: skip
    assert "dprag ledger init" in messages[0] and "--corpus-epsilon 3" in messages[1]
    assert "--budget-per-unit" in messages[2] and messages[3].count("--name") == 1
    for message in messages:
        assert not PYTHON_WORDS.search(message), message


def test_a_moved_budget_is_found_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget_home: Path
) -> None:
    """docs/ledgers.md's recipe: back up, delete the old file, init the copy."""
    import sqlite3

    monkeypatch.delenv("DPRAG_LEDGER_DSN", raising=False)
    budget = SQLiteCorpusAccountant(name="records", total=Budget(5.0, 1e-5), create=True)
    budget.charge(Budget(2.0, 1e-6))
    old, new = budget.path, tmp_path / "disk2" / "records.db"
    new.parent.mkdir()
    with sqlite3.connect(old) as source, sqlite3.connect(new) as copy:
        source.backup(copy)
    budget.close()
    for leftover in old.parent.glob("records.db*"):
        leftover.unlink()
    init = ["ledger", "init", "--sqlite", str(new), "--name", "records"]
    assert main([*init, "--corpus-epsilon", "5", "--corpus-delta", "1e-5"]) == 0
    moved = SQLiteCorpusAccountant(name="records")
    assert (moved.path, moved.spent_epsilon, moved.spent_delta) == (new, 2.0, 1e-6)
    assert not old.exists()
