"""Ledger latency: median and p99 time to charge 100 units in one query.

Measured side by side in one run, for SQLite (the default; WAL, synchronous=FULL)
and PostgreSQL, with 1 process and with 8 concurrent processes charging
overlapping units (every charge granted, so each one commits and is durable).

    .venv/bin/python benchmarks/ledger.py [--charges 300] [--units 100] [--procs 8]

PostgreSQL: uses $DPRAG_TEST_POSTGRES_DSN, else starts a throwaway server with
scripts/postgres_for_tests.sh; ``--no-postgres`` skips it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from dprag_core.accounting.ledger import Ledger, PostgresLedger, SQLiteLedger

ROOT = Path(__file__).resolve().parent.parent
POOL = 20_000  # units to draw from: queries overlap, as real questions do


def open_ledger(kind: str, target: str) -> Ledger:
    if kind == "sqlite":
        return SQLiteLedger(target, budget_per_unit=1e5)
    dsn, table = target.rsplit("|", 1)
    return PostgresLedger(dsn, budget_per_unit=1e5, table=table)


def worker(
    kind: str, target: str, seed: int, charges: int, units: int, barrier: object
) -> list[float]:
    gen = np.random.default_rng(seed)
    with open_ledger(kind, target) as led:
        led.remaining(["warm-up"])  # connect before timing
        if barrier is not None:
            barrier.wait()  # type: ignore[attr-defined]
        times = []
        for i in range(charges):
            batch = [f"u{j}" for j in gen.choice(POOL, size=units, replace=False)]
            t0 = time.perf_counter()
            granted = led.charge(f"s{seed}-q{i}", batch, 0.001).granted
            times.append(time.perf_counter() - t0)
            assert granted
    return times


def run(kind: str, target: str, procs: int, charges: int, units: int) -> tuple[float, float, float]:
    open_ledger(kind, target).close()  # schema
    t0 = time.perf_counter()
    if procs == 1:
        times = worker(kind, target, 0, charges, units, None)
    else:
        ctx = mp.get_context("fork")
        barrier = ctx.Barrier(procs)
        queue = ctx.Queue()
        per = max(1, charges // procs)

        def child(seed: int) -> None:
            queue.put(worker(kind, target, seed, per, units, barrier))

        children = [ctx.Process(target=child, args=(s,)) for s in range(1, procs + 1)]
        for c in children:
            c.start()
        times = [t for _ in children for t in queue.get()]
        for c in children:
            c.join()
    wall = time.perf_counter() - t0
    ms = np.array(times) * 1e3
    return float(np.median(ms)), float(np.percentile(ms, 99)), len(ms) / wall


def postgres_dsn() -> str:
    dsn = os.environ.get("DPRAG_TEST_POSTGRES_DSN", "")
    if dsn:
        return dsn
    out = subprocess.run(
        [str(ROOT / "scripts" / "postgres_for_tests.sh")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().split("=", 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=300, help="charges per configuration")
    parser.add_argument("--units", type=int, default=100, help="units per charge")
    parser.add_argument("--procs", type=int, default=8, help="concurrent processes")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()

    backends: list[tuple[str, str]] = []
    tmp = tempfile.mkdtemp()
    backends.append(("sqlite", os.path.join(tmp, "bench.db")))
    tables: list[str] = []
    if not args.no_postgres:
        dsn = postgres_dsn()
        backends.append(("postgres", ""))
    print(f"charge of {args.units} units per query, {args.charges} charges per configuration")
    print(f"{'backend':<10}{'procs':>6}{'median ms':>12}{'p99 ms':>10}{'charges/s':>12}")
    rows = {}
    for kind, target in backends:
        for procs in (1, args.procs):
            if kind == "postgres":
                table = f"bench_{uuid.uuid4().hex[:12]}"
                tables.append(table)
                target = f"{dsn}|{table}"
            else:
                target = os.path.join(tmp, f"bench-{procs}.db")
            med, p99, rate = run(kind, target, procs, args.charges, args.units)
            rows[(kind, procs)] = (med, p99, rate)
            print(f"{kind:<10}{procs:>6}{med:>12.2f}{p99:>10.2f}{rate:>12.0f}")
    for kind, _ in backends:
        one, many = rows[(kind, 1)], rows[(kind, args.procs)]
        print(
            f"{kind}: {args.procs} processes vs 1 — median x{many[0] / one[0]:.2f}, "
            f"throughput x{many[2] / one[2]:.2f}"
        )
    if ("postgres", 1) in rows:
        s, p = rows[("sqlite", 1)], rows[("postgres", 1)]
        print(f"postgres/sqlite median ratio (1 process): {p[0] / s[0]:.2f}")
    for table in tables:
        PostgresLedger(dsn, budget_per_unit=1e5, table=table).drop()


if __name__ == "__main__":
    main()
