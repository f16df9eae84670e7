"""``dprag ledger init``: create or migrate a PostgreSQL ledger or corpus budget, as its owner.

Serving processes then run as a role that can only charge and read
(docs/ledgers.md): pass that role to ``--grant-to``. The DSN is read from
``--dsn`` or, to keep it out of shell history and process lists, from the
environment variable ``DPRAG_LEDGER_DSN``; it is never printed.

    DPRAG_LEDGER_DSN=postgresql://owner@db/app dprag ledger init \\
        --table dprag_ledger --budget-per-unit 10 --grant-to dprag_app
    DPRAG_LEDGER_DSN=postgresql://owner@db/app dprag ledger init \\
        --table dprag_corpus --corpus-epsilon 50 --corpus-delta 1e-5 --grant-to dprag_app

>>> import argparse
>>> sub = argparse.ArgumentParser().add_subparsers()
>>> add_ledger_command(sub).prog.endswith("ledger")
True
"""

from __future__ import annotations

import argparse
import math
import os

from dprag_core.budget import Budget

__all__ = ["add_ledger_command", "ledger_init"]


def _positive(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _delta(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def ledger_init(args: argparse.Namespace) -> int:
    """Run ``dprag ledger init`` (the schema owner's step)."""
    from dprag_core.accounting.corpus_postgres import PostgresCorpusAccountant
    from dprag_core.accounting.ledger import PostgresLedger

    dsn = args.dsn or os.environ.get("DPRAG_LEDGER_DSN", "")
    if not dsn:
        raise SystemExit("dprag ledger init: give --dsn or set DPRAG_LEDGER_DSN")
    if (args.budget_per_unit is None) == (args.corpus_epsilon is None):
        raise SystemExit(
            "dprag ledger init: give exactly one of --budget-per-unit (a per-unit ledger) "
            "and --corpus-epsilon (a corpus budget)"
        )
    if args.budget_per_unit is not None:
        table = args.table or "dprag_ledger"
        PostgresLedger.create_schema(
            dsn, budget_per_unit=args.budget_per_unit, table=table, grant_to=args.grant_to
        )
        what = f"per-unit ledger {table!r} (budget_per_unit={args.budget_per_unit:g})"
    else:
        table = args.table or "dprag_corpus"
        total = Budget(args.corpus_epsilon, args.corpus_delta)
        PostgresCorpusAccountant.create_schema(
            dsn, total=total, table=table, grant_to=args.grant_to
        )
        what = f"corpus budget {table!r} (total {total})"
    granted = f"; runtime rights granted to {args.grant_to!r}" if args.grant_to else ""
    print(f"ready: {what}{granted}")
    return 0


def add_ledger_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register ``ledger init`` on the ``dprag`` command's subparsers."""
    ledger = sub.add_parser("ledger", help="operate ledgers and corpus budgets")
    actions = ledger.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="create or migrate a PostgreSQL schema (as its owner)")
    init.add_argument("--dsn", default=None, help="libpq DSN (default: $DPRAG_LEDGER_DSN)")
    init.add_argument("--table", default=None, help="table-name prefix")
    init.add_argument("--budget-per-unit", type=_positive, default=None, help="per-unit epsilon")
    init.add_argument("--corpus-epsilon", type=_positive, default=None, help="corpus epsilon")
    init.add_argument("--corpus-delta", type=_delta, default=0.0, help="corpus delta")
    init.add_argument("--grant-to", default=None, help="role that may charge and read")
    init.set_defaults(func=ledger_init)
    return ledger
