"""PostgreSQL ledger charge latency of this checkout against another, side by side.

Each round runs this checkout's ``benchmarks/ledger.py`` ``latency()`` (a
query's claim + charge) over both checkouts' libraries in turn (the order
swapped every round, so drift in the machine's load falls on both), for
``--units`` (10 and 100) units per charge at 1 and ``--procs`` processes, and
prints the median of the rounds' medians and p99s with the ratio this / other.
``--no-flush`` runs with ``synchronous_commit=off``: the charge's own cost
without the WAL flush (whose time dominates a loaded machine's figures).
``uptime`` is printed at the start and at the end.

    git archive <commit> | tar -x -C /tmp/before
    PYTHONPATH=. .venv/bin/python benchmarks/ledger_compare.py --before /tmp/before \\
        [--charges 300] [--rounds 4] [--procs 8] [--no-flush]

Uses $DPRAG_TEST_POSTGRES_DSN (else starts a throwaway server as ledger.py
does). Both checkouts' stores are dropped after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from ledger import postgres_dsn, uptime  # noqa: E402  (this folder's ledger.py)

_RUN = """
import json, sys
sys.path[:0] = [{root!r}, {bench!r}]
import ledger
print(json.dumps(ledger.latency("postgres", {target!r}, {procs}, {charges}, {units})))
"""


def run(root: Path, dsn: str, procs: int, charges: int, units: int) -> dict[str, float]:
    """This checkout's ``latency()`` over the library of the checkout at ``root``, in a fresh
    interpreter; its stores dropped."""
    import psycopg

    table = f"cmp_{uuid.uuid4().hex[:10]}"
    code = _RUN.format(
        root=str(root),
        bench=str(ROOT / "benchmarks"),  # this checkout's harness times both libraries
        target=f"{dsn}|{table}",
        procs=procs,
        charges=charges,
        units=units,
    )
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in ("dprag", "public"):  # this version's schema, and where older ones were
            for suffix in ("audit", "units", "meta", "store", "queries", "pruned"):
                conn.execute(f"DROP TABLE IF EXISTS {schema}.{table}_{suffix} CASCADE")
            for fn in ("append_only", "charge"):
                conn.execute(f"DROP FUNCTION IF EXISTS {schema}.{table}_{fn} CASCADE")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--charges", type=int, default=300, help="charges per process")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--units", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--no-flush", action="store_true", help="synchronous_commit=off")
    parser.add_argument("--quick", action="store_true", help="small sizes (tests)")
    args = parser.parse_args()
    if args.quick:
        args.charges, args.rounds, args.procs, args.units = 10, 1, 2, [10]
    from psycopg.conninfo import make_conninfo

    dsn = postgres_dsn()
    if args.no_flush:
        dsn = make_conninfo(dsn, options="-c synchronous_commit=off")
    sides = {"this": ROOT, "other": args.before.resolve()}
    print(f"uptime at the start: {uptime()}")
    runs: dict[tuple[str, int, int], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
        for units in args.units:
            for procs in (1, args.procs):
                for side, root in order:
                    m = run(root, dsn, procs, args.charges, units)
                    runs.setdefault((side, units, procs), []).append(m)
                    print(
                        f"round {r} {side:<5} units {units:>3} procs {procs}: "
                        f"median {m['median']:.3f} ms, p99 {m['p99']:.3f} ms",
                        flush=True,
                    )
    print(f"uptime at the end: {uptime()}")
    flush = "synchronous_commit=off" if args.no_flush else "every commit flushed"
    print(f"median of {args.rounds} rounds ({flush}), this / other:")
    for units in args.units:
        for procs in (1, args.procs):
            row = []
            for stat in ("median", "p99"):
                this, other = (
                    statistics.median(m[stat] for m in runs[(side, units, procs)])
                    for side in ("this", "other")
                )
                row.append(f"{stat} {other:.3f} -> {this:.3f} ms (x{this / other:.2f})")
            print(f"  units {units:>3}, procs {procs}: " + "; ".join(row))


if __name__ == "__main__":
    main()
