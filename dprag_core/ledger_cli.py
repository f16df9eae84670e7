"""``dprag ledger``: create, inspect and export corpus budgets and per-unit ledgers.

One home for both kinds of budget, on SQLite and PostgreSQL. A store is
found by ``--name`` alone (SQLite, in the per-user budget directory:
``$DPRAG_BUDGET_DIR``, else ``~/.local/share/dprag``, from any working
directory: :mod:`~dprag_core.accounting.stores.places`), by ``--sqlite PATH``,
or on PostgreSQL by ``--dsn`` (or, to keep it out of shell history and process
lists, the environment variable ``DPRAG_LEDGER_DSN``; a DSN is never printed):

* ``init``: create (or migrate) a store, as its owner: ``--corpus-epsilon``
  with ``--corpus-delta`` (0 for a pure budget, said explicitly) or
  ``--budget-per-unit``; ``--name`` records its identity; on PostgreSQL
  ``--grant-to ROLE`` gives a serving role the runtime rights (charge and
  read, nothing else; the role is checked before anything is created) and
  ``--schema`` names the schema the stores live in (default ``dprag``; no
  other role may create in it, docs/ledgers.md).
* ``status``: total, spent, what is left, queries, refusals, last charge;
  for a per-unit ledger the units charged and exhausted and a histogram of
  their spend; ``--json`` for scripts, ``--plot FILE.png`` for the spend over
  time (matplotlib, the ``eval`` extra).
* ``history``: the last charges; ``export``: every audit row as CSV or JSON
  (``--output FILE``, written owner-only), for a compliance review.

Stores are opened read-only by the viewing commands; ``--name`` picks the
stores of that name, ``--table`` a store by its table prefix and ``--ledger``
the SQLite file's per-unit ledger (default: every store found). An operator
error is one line on stderr and a non-zero exit, never a traceback, in the
command's own words (its flags, never Python's keywords: :func:`cli_words`).

    dprag ledger init --name records --corpus-epsilon 50 --corpus-delta 1e-5
    dprag ledger status --name records
    DPRAG_LEDGER_DSN=postgresql://owner@db/app dprag ledger init \\
        --table dprag_ledger --budget-per-unit 10 --grant-to dprag_app
    dprag ledger status --sqlite /var/lib/dprag/records.db --plot spend.png
    dprag ledger export --name records --table corpus --format csv

>>> import argparse
>>> sub = argparse.ArgumentParser().add_subparsers()
>>> add_ledger_command(sub).prog.endswith("ledger")
True
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from dprag_core.accounting import (
    PostgresCorpusAccountant,
    SQLiteCorpusAccountant,
)
from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger import Ledger, PostgresLedger, SQLiteLedger
from dprag_core.accounting.stores import places
from dprag_core.accounting.stores.errors import LedgerUnavailable
from dprag_core.accounting.stores.pgschema import postgres_stores
from dprag_core.accounting.stores.pgtrust import DEFAULT_SCHEMA
from dprag_core.accounting.stores.postgres import PostgresStore, PostgresTimeouts
from dprag_core.accounting.stores.sqlite import RESTORE, SQLiteStore, move_file
from dprag_core.budget import Budget
from dprag_core.ledger_report import (
    amount,
    export_rows,
    plot_spend,
    status_json,
    status_lines,
    utc,
    write_private,
)
from dprag_core.validation import argument_int, argument_number

__all__ = ["add_ledger_command", "cli_words", "ledger_init"]

_CORPUS, _LEDGER = "corpus budget", "per-unit ledger"
_OPERATOR_ERRORS = (ValueError, TypeError, LedgerUnavailable, OSError, ImportError)
Store = DurableCorpusAccountant | Ledger


_positive = argument_number("a finite number > 0", lambda v: v > 0)
_delta = argument_number("a number in [0, 1)", lambda v: 0 <= v < 1)
_count = argument_int(0)


_CLI_WORDS = (  # what the Python API's messages say -> what the command's user types
    (r"pass create=True to create it", "create it with `dprag ledger init`"),
    (r",? ?or pass create=True as its owner", ""),
    (r"create=True", "`dprag ledger init`"),
    (r"omit total= to open it as recorded", "`dprag ledger status` shows the recorded total"),
    (
        r"total Budget\(epsilon=([^,]+), delta=([^)]+)\)",
        r"--corpus-epsilon \1 --corpus-delta \2",
    ),
    (r"\bbudget_per_unit\b", "--budget-per-unit"),
    (r"\bgrant_to\b", "--grant-to"),
    (r"\bpass table=('[^']*')", r"give --table \1"),
    (r"\b(name|table)=('[^']*')", r"--\1 \2"),
    (r"^(name|table) must", r"--\1 must"),
)


def cli_words(message: str) -> str:
    """An error of the Python API in the words of ``dprag ledger`` (its flags, not keywords).

    >>> cli_words("no corpus budget exists: pass create=True to create it")
    'no corpus budget exists: create it with `dprag ledger init`'
    >>> cli_words("total Budget(epsilon=3.0, delta=0.0) differs from the recorded one")
    '--corpus-epsilon 3.0 --corpus-delta 0.0 differs from the recorded one'
    """
    for pattern, replacement in _CLI_WORDS:
        message = re.sub(pattern, replacement, message)
    return message


def _target(args: argparse.Namespace, action: str) -> tuple[str, str | None]:
    """("sqlite", absolute path), ("sqlite", None): the store named ``--name`` in the
    budget directory, or ("postgres", dsn), from the arguments or the environment."""
    path = getattr(args, "sqlite", None)
    if path:
        if args.dsn:
            raise SystemExit(f"dprag ledger {action}: give --sqlite or --dsn, not both")
        if _schema(args) != DEFAULT_SCHEMA:
            raise SystemExit(f"dprag ledger {action}: --schema is for PostgreSQL")
        return "sqlite", str(Path(path).absolute())
    dsn = args.dsn or os.environ.get("DPRAG_LEDGER_DSN", "")
    if dsn:
        return "postgres", dsn
    if getattr(args, "name", None):
        if _schema(args) != DEFAULT_SCHEMA:
            raise SystemExit(f"dprag ledger {action}: --schema is for PostgreSQL")
        return "sqlite", None
    raise SystemExit(
        f"dprag ledger {action}: give --name (a store in the per-user budget directory), "
        "--sqlite PATH or --dsn, or set DPRAG_LEDGER_DSN"
    )


def _schema(args: argparse.Namespace) -> str:
    return str(getattr(args, "schema", None) or DEFAULT_SCHEMA)


def _busy(args: argparse.Namespace) -> float:
    """SQLite: how long to wait for the file's locks (``--timeout``)."""
    return float(getattr(args, "timeout", None) or 10.0)


def _timeouts(args: argparse.Namespace) -> PostgresTimeouts:
    """PostgreSQL: ``--timeout`` bounds reaching the server and every statement."""
    seconds = getattr(args, "timeout", None)
    if seconds is None:
        return PostgresTimeouts()
    return PostgresTimeouts(connect=seconds, statement=seconds, lock=min(5.0, seconds))


def ledger_init(args: argparse.Namespace) -> int:
    """Run ``dprag ledger init`` (the owner's step): create or migrate one store."""
    kind, target = _target(args, "init")
    name, grant_to = getattr(args, "name", None), args.grant_to
    if (args.budget_per_unit is None) == (args.corpus_epsilon is None):
        raise SystemExit(
            "dprag ledger init: give exactly one of --budget-per-unit (a per-unit ledger) "
            "and --corpus-epsilon (a corpus budget)"
        )
    if args.corpus_epsilon is not None and args.corpus_delta is None:
        raise SystemExit(
            "dprag ledger init: --corpus-epsilon needs --corpus-delta (write --corpus-delta 0 "
            "for a pure budget: every (epsilon, delta) mechanism is then refused)"
        )
    if kind == "sqlite" and grant_to is not None:
        raise SystemExit("dprag ledger init: --grant-to is for PostgreSQL (a file has no roles)")
    if kind == "sqlite" and args.budget_per_unit is not None and args.table:
        raise SystemExit("dprag ledger init: a SQLite file holds one per-unit ledger: drop --table")
    store: Store
    dsn = target or ""  # (used on PostgreSQL only, where _target always gives one)
    if args.budget_per_unit is not None:
        table = args.table or "dprag_ledger"
        if kind == "sqlite":
            store = SQLiteLedger(
                target,
                budget_per_unit=args.budget_per_unit,
                name=name,
                create=True,
                busy_timeout=_busy(args),
            )
        else:
            store = PostgresLedger(
                dsn,
                budget_per_unit=args.budget_per_unit,
                table=table,
                name=name,
                create=True,
                grant_to=grant_to,
                schema=_schema(args),
                timeouts=_timeouts(args),
            )
        what = f"per-unit ledger (budget per unit epsilon={amount(args.budget_per_unit)})"
    else:
        total = Budget(args.corpus_epsilon, args.corpus_delta)
        if kind == "sqlite":
            table = args.table or "corpus"
            store = SQLiteCorpusAccountant(
                target, total=total, table=table, name=name, create=True, busy_timeout=_busy(args)
            )
        else:
            table = args.table or "dprag_corpus"
            store = PostgresCorpusAccountant(
                dsn,
                total=total,
                table=table,
                name=name,
                create=True,
                grant_to=grant_to,
                schema=_schema(args),
                timeouts=_timeouts(args),
            )
        what = (
            f"corpus budget (total epsilon={amount(total.epsilon)}, "
            f"delta={amount(total.delta, decimals=18)})"
        )
    granted = f"; runtime rights granted to {grant_to!r}" if grant_to else ""
    print(f"ready: {what}, name {store.name!r}: {store.label}{granted}")
    store.close()
    return 0


def _named_files(name: str, action: str) -> list[str]:
    """The files that may hold the stores named ``name`` (registered, or the default one)."""
    found = [places.registered(kind, name) for kind in (_CORPUS, _LEDGER)]
    files = dict.fromkeys(str(r.path) for r in found if r is not None)
    default = places.default_path(name)
    if default.exists():
        files[str(default)] = None
    if not files:
        raise SystemExit(
            f"dprag ledger {action}: no store named {name!r} in the budget directory "
            f"{str(places.budget_dir())!r} (create one with dprag ledger init --name {name}, "
            "or set DPRAG_BUDGET_DIR to the directory that holds it)"
        )
    return list(files)


def _file_store(file: str, args: argparse.Namespace, *, writable: bool = False) -> SQLiteStore:
    """The budget file ``file`` opened (read-only unless ``writable``), its header, -wal and
    catalog checked: every damaged or foreign file is one line naming it and the fix."""
    store: SQLiteStore = _naming(
        file,
        lambda: SQLiteStore(
            file, busy_timeout=_busy(args), label=f"budget file {file!r}", read_only=not writable
        ),
    )
    return store


def _naming(file: str, run: Any) -> Any:
    """``run()``; an error no check foresaw (a damaged page read as a value no dprag
    version writes) becomes one line naming ``file`` and the full check, never a traceback."""
    try:
        return run()
    except (*_OPERATOR_ERRORS, SystemExit):
        raise
    except Exception as exc:  # the operator sees one line, never a traceback
        raise LedgerUnavailable(
            f"the budget file {file!r} cannot be read ({type(exc).__name__}): it may be "
            f"damaged: run `dprag ledger check --sqlite {file}`; {RESTORE}"
        ) from None


def _sqlite_store(
    file: str, kind: str, prefix: str, args: argparse.Namespace, *, writable: bool
) -> Store:
    """One store of a SQLite file, opened read-only unless ``writable`` (``prune``)."""

    def run() -> Store:
        ro, busy = not writable, _busy(args)
        if kind == _CORPUS:
            return SQLiteCorpusAccountant(file, table=prefix, read_only=ro, busy_timeout=busy)
        return SQLiteLedger(file, read_only=ro, busy_timeout=busy)

    store: Store = _naming(file, run)
    return store


def _open_all(args: argparse.Namespace, action: str, *, writable: bool = False) -> list[Store]:
    """The stores the viewing commands show, opened read-only (``--name``/``--table``/
    ``--ledger``); ``writable``: opened for ``prune``."""
    kind, target = _target(args, action)
    if kind == "sqlite":
        files = [target] if target is not None else _named_files(args.name, action)
        listed = [
            (file, k, key, name)
            for file in files
            for k, key, name in _file_store(file, args, writable=writable).listed()
        ]
        for file, k, key, _ in listed:  # every store of a file passes its checks, or none shows
            _sqlite_store(file, k, key.split(":", 1)[-1], args, writable=False).close()
        chosen = [
            (file, k, key.split(":", 1)[-1])
            for file, k, key, name in listed
            if (args.name is None or name == args.name)
            and (
                (args.table is None and not args.ledger)
                or (args.ledger and k == _LEDGER)
                or (args.table is not None and key == f"corpus:{args.table}")
            )
        ]
    else:
        if args.ledger:
            raise SystemExit(f"dprag ledger {action}: --ledger is for SQLite; give --table")
        assert target is not None  # a DSN
        listing = PostgresStore(target, _timeouts(args), label="PostgreSQL schema")
        chosen = [
            (target, k, prefix)
            for k, prefix in postgres_stores(listing, _schema(args))
            if args.table is None or prefix == args.table
        ]
        listing.close()
    stores: list[Store] = []
    for where, k, prefix in chosen:
        if kind == "sqlite":
            stores.append(_sqlite_store(where, k, prefix, args, writable=writable))
        else:
            pg = {"schema": _schema(args), "timeouts": _timeouts(args)}
            stores.append(
                PostgresCorpusAccountant(where, table=prefix, **pg)  # type: ignore[arg-type]
                if k == _CORPUS
                else PostgresLedger(where, table=prefix, **pg)  # type: ignore[arg-type]
            )
    stores = [s for s in stores if args.name is None or getattr(s, "name", None) == args.name]
    if not stores:
        which = f"table {args.table!r}" if args.table else "ledger" if args.ledger else "store"
        named = f" named {args.name!r}" if args.name else ""
        there = f"in {target!r}" if kind == "sqlite" and target else "there"
        raise SystemExit(
            f"dprag ledger {action}: no {which}{named} found {there} (see dprag ledger init)"
        )
    return stores


def _one(args: argparse.Namespace, action: str) -> Store:
    stores = _open_all(args, action)
    if len(stores) > 1:
        raise SystemExit(
            f"dprag ledger {action}: {len(stores)} stores found: choose one with --table "
            "(or --ledger for the SQLite file's per-unit ledger)"
        )
    return stores[0]


def _rows(store: Store, last: int | None = None) -> tuple[list[Any], tuple[str, ...]]:
    """The store's audit rows (the last ``last`` only: an indexed read) and their fields."""
    where = str(getattr(store, "path", ""))
    if isinstance(store, DurableCorpusAccountant):
        fields: tuple[str, ...] = ("query_id", "epsilon", "delta", "time")
        rows = _naming(where, lambda: list(store.history(last=last)))
    else:
        fields = ("query_id", "unit", "cost", "time")
        rows = _naming(where, lambda: list(store.audit_log(last=last)))
    return rows, fields


def ledger_status(args: argparse.Namespace) -> int:
    """Run ``dprag ledger status``."""
    stores = _open_all(args, "status")
    views = [
        _naming(
            str(getattr(s, "path", "")),
            lambda s=s: (
                s.status()
                if isinstance(s, DurableCorpusAccountant)
                else s.status(min_cost=args.min_cost)
            ),
        )
        for s in stores
    ]
    if args.json:
        print(json.dumps([status_json(v) for v in views], indent=1))
    else:
        print("\n\n".join("\n".join(status_lines(v)) for v in views))
    if args.plot:
        if len(stores) > 1:
            raise SystemExit("dprag ledger status: --plot draws one store: choose it with --table")
        store, view = stores[0], views[0]
        rows, _ = _rows(store)
        if isinstance(store, DurableCorpusAccountant):
            plot_spend(args.plot, view.store, [(r.time, r.epsilon, "") for r in rows],
                       limit=store.total.epsilon)  # fmt: skip
        else:
            plot_spend(args.plot, view.store, [(r.time, r.cost, r.unit) for r in rows],
                       limit=None, budget_per_unit=store.budget_per_unit)  # fmt: skip
        print(f"spend over time: {args.plot}")
    return 0


def ledger_history(args: argparse.Namespace) -> int:
    """Run ``dprag ledger history``: the last ``--last`` charges, oldest first."""
    store = _one(args, "history")
    shown, fields = _rows(store, args.last or None)
    print(f"{store.label}: the last {len(shown)} rows:" if args.last else f"{store.label}:")
    for r in shown:
        amounts = "  ".join(
            f"{f}={getattr(r, f)!r}" for f in fields if f not in ("query_id", "time")
        )
        print(f"  {utc(r.time)}  {r.query_id}  {amounts}")
    return 0


def ledger_export(args: argparse.Namespace) -> int:
    """Run ``dprag ledger export``: every audit row as CSV or JSON."""
    rows, fields = _rows(_one(args, "export"))
    text = export_rows(rows, fields, args.format)
    if args.output:
        write_private(args.output, text.encode())
        print(f"{len(rows)} rows written to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def ledger_check(args: argparse.Namespace) -> int:
    """Run ``dprag ledger check``: every page of a SQLite file (``PRAGMA quick_check``) and
    every store's open checks; on PostgreSQL the open checks of every store."""
    kind, target = _target(args, "check")
    if kind == "sqlite":
        files = [target] if target is not None else _named_files(args.name, "check")
        for file in files:
            began = time.perf_counter()
            count = _naming(file, lambda file=file: _file_store(file, args).check())
            took = time.perf_counter() - began
            print(
                f"ok: {file}: every page passed the integrity check ({count} stores, {took:.2f} s)"
            )
    stores = _open_all(args, "check")
    for store in stores:
        print(f"ok: {store.label}: opened, its checks passed")
        store.close()
    return 0


def _watermark(text: str) -> float:
    """``--before``: UNIX seconds, or an ISO 8601 time with its UTC offset.

    >>> _watermark("1970-01-01T00:01:00Z"), _watermark("60")
    (60.0, 60.0)
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be UNIX seconds or an ISO 8601 time such as 2026-01-31T00:00:00Z, got {text!r}"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"needs a UTC offset (e.g. {text}Z), got {text!r}")
    return when.timestamp()


def ledger_prune(args: argparse.Namespace) -> int:
    """Run ``dprag ledger prune --before TIME`` (the PostgreSQL schema's owner, or a writer of
    the SQLite file): drop the claims and audit rows older than the new public watermark;
    their ids stay refused (kept as digests)."""
    for store in _open_all(args, "prune", writable=True):
        assert isinstance(
            store,
            (SQLiteCorpusAccountant, SQLiteLedger, PostgresCorpusAccountant, PostgresLedger),
        )
        where = str(getattr(store, "path", ""))
        pruned = _naming(where, lambda store=store: store.prune(before=args.before))
        print(
            f"pruned {pruned} query ids recorded before {utc(args.before)} from {store.label} "
            "(their reuse stays refused; totals unchanged)"
        )
        store.close()
    return 0


def ledger_move(args: argparse.Namespace) -> int:
    """Run ``dprag ledger move --to NEW`` (SQLite): the budget file and its records move
    together; stop the serving processes first."""
    kind, target = _target(args, "move")
    if kind != "sqlite":
        raise SystemExit("dprag ledger move: a PostgreSQL store stays in its database")
    files = [target] if target is not None else _named_files(args.name, "move")
    if len(files) != 1:
        raise SystemExit(f"dprag ledger move: {len(files)} files hold that name: give --sqlite")
    moved = move_file(Path(files[0]), Path(args.to), busy_timeout=_busy(args))
    names = ", ".join(f"{k} {n!r}" for k, n in moved)
    print(f"moved {files[0]} to {args.to} ({names}); open it by its name or the new path")
    return 0


def _guarded(run: Any, action: str) -> Any:
    """Turn operator errors into one line and a non-zero exit (never a traceback)."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            result: int = run(args)
        except _OPERATOR_ERRORS as exc:
            raise SystemExit(f"dprag ledger {action}: {cli_words(str(exc))}") from None
        return result

    return guarded


def _where(parser: argparse.ArgumentParser, name_help: str) -> None:
    parser.add_argument("--name", default=None, help=name_help)
    parser.add_argument("--sqlite", default=None, metavar="PATH", help="a SQLite store file")
    parser.add_argument("--dsn", default=None, help="libpq DSN (default: $DPRAG_LEDGER_DSN)")
    parser.add_argument("--table", default=None, help="table-name prefix of the store")
    parser.add_argument(
        "--schema",
        default=None,
        help=f"PostgreSQL schema of the stores (default: {DEFAULT_SCHEMA})",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="bound every wait: SQLite's locks (default 10 s); PostgreSQL's connection and "
        "each statement (default 10 s)",
    )


def add_ledger_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``ledger init|status|history|export`` on the ``dprag`` command's subparsers."""
    ledger = sub.add_parser("ledger", help="create, inspect and export budgets and ledgers")
    actions = ledger.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="create or migrate a store (as its owner)")
    _where(
        init,
        "the store's identity, one store per name on this host (default: its table); alone: "
        "kept in the per-user budget directory ($DPRAG_BUDGET_DIR, else ~/.local/share/dprag)",
    )
    init.add_argument("--budget-per-unit", type=_positive, default=None, help="per-unit epsilon")
    init.add_argument("--corpus-epsilon", type=_positive, default=None, help="corpus epsilon")
    init.add_argument("--corpus-delta", type=_delta, default=None, help="corpus delta (0: pure)")
    init.add_argument("--grant-to", default=None, help="PostgreSQL role that may charge and read")
    init.set_defaults(func=_guarded(ledger_init, "init"))
    views = {
        "status": (ledger_status, "total, spent, remaining, queries, refusals, last charge"),
        "history": (ledger_history, "the last charges"),
        "export": (ledger_export, "every audit row as CSV or JSON"),
        "check": (ledger_check, "the integrity check of every page and every store"),
        "prune": (ledger_prune, "drop ids recorded before a watermark (their reuse stays refused)"),
        "move": (ledger_move, "move a SQLite budget file and its records (serving stopped)"),
    }
    for action, (run, about) in views.items():
        view = actions.add_parser(action, help=about)
        _where(view, "the stores of this name; alone: found in the per-user budget directory")
        view.add_argument("--ledger", action="store_true", help="the SQLite per-unit ledger")
        if action == "status":
            view.add_argument("--min-cost", type=float, default=0.0,
                              help="count units with less than this left as exhausted")  # fmt: skip
            view.add_argument("--json", action="store_true", help="JSON instead of text")
            view.add_argument("--plot", default=None, metavar="FILE.png", help="spend over time")
        elif action == "history":
            view.add_argument("--last", type=_count, default=20, help="rows to show (0: all)")
        elif action == "prune":
            view.add_argument("--before", type=_watermark, required=True, metavar="TIME",
                              help="the watermark: UNIX seconds, ISO 8601 with offset")  # fmt: skip
        elif action == "move":
            view.add_argument("--to", required=True, metavar="NEW", help="the new absolute path")
        elif action == "export":
            view.add_argument("--format", choices=("csv", "json"), default="csv")
            view.add_argument("--output", default=None, help="file to write (0600)")
        view.set_defaults(func=_guarded(run, action))
    return ledger
