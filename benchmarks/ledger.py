"""Ledgers and corpus budgets under load and kill -9: latency, overspend, uncharged releases.

Measured side by side in one run:

1. Per-unit ledger latency of one query's writes, its claim (before its
   private section) and its charge (inside it), together (median, p99, worst;
   slowest open; the claim and the charge alone beside them), two ways side
   by side on each backend: the claim as the apps make it (``claim``
   column ``seen``: ``claim(durable=False)``, committed without waiting for
   the disk and made durable by the charge's own flush, then ``settle()``,
   free after a charge: one durable commit per query) and the claim durable
   on its own (``durable``: ``claim()``, two durable commits per query, the
   previous path), with the ratio durable / seen. Backends: SQLite (the
   default: writers queued on a sidecar flock, each commit's WAL fsync'd
   after the queue is released: group commit), SQLite with the fsync inside
   the queue (``synchronous=FULL``, an earlier behaviour), SQLite with
   SQLite's busy handler alone (the one before) and PostgreSQL, with 1
   process and with ``--procs`` processes x ``--charges`` queries charging
   ``--units`` overlapping units each; the targets (at 8 processes: SQLite
   p99 <= 50 ms and PostgreSQL median <= 5 ms with 10 units, PostgreSQL
   median <= 10 ms with 100) and the machine's ``uptime`` (its load
   average) are printed with them. ``--rounds R`` measures each row R
   times (the two claim ways in turn, their order swapped each round) and
   sums up with the medians of the rounds; ``--no-variants`` leaves out the
   two earlier SQLite commit paths; ``--alternate`` runs the two claim ways
   in one run, query by query in turn (the processes out of step), so both
   see the same load at the same moments (the queries/s are then the run's);
   ``--latency-only`` stops after this part.
2. The durable corpus budget (SQLiteCorpusAccountant, PostgresCorpusAccountant):
   ``--procs`` processes x ``--charges`` charges racing for one budget that
   fits a quarter of them; overspend must be 0 and exactly the budget granted.
3. ``--kills`` kill -9 of a worker mid-query (ledger and corpus budget): every
   released answer must have its charge recorded.
4. PostgreSQL: how long a charge waits behind a row that an idle transaction
   holds, with the default timeouts (it raises ``LedgerUnavailable``).

``--cpu N`` instead measures, at 1 process, the CPU time of N queries (each a claim
seen at once, a charge of ``--units`` units and a settle, as the apps make them): the
client's (``time.process_time``) and, on PostgreSQL, its server process's (user + system
time from ``/proc``, when the server runs on this host and its files are readable), per
query, with the median latency; ``--no-sqlite`` leaves SQLite out.

``--operator N`` instead measures the operator's views at N recorded queries
of ``--units`` units each, on both backends (the stores filled by bulk SQL):
opening a store (with its integrity check), ``status``, the last 20 rows
(``history --last 20``), SQLite's full ``check`` and ``prune``, and the file's
size, each the median of 5 reads.

    .venv/bin/python benchmarks/ledger.py [--charges 500] [--units 100] [--procs 8] [--kills 20]
    .venv/bin/python benchmarks/ledger.py --latency-only --no-variants --alternate --units 10
    .venv/bin/python benchmarks/ledger.py --operator 1000000 --units 10
    .venv/bin/python benchmarks/ledger.py --cpu 2000 --units 10

PostgreSQL: uses $DPRAG_TEST_POSTGRES_DSN, else starts a throwaway server with
scripts/postgres_for_tests.sh; ``--no-postgres`` skips it; the stores go to the
schema ``dprag``. ``--quick`` runs a small configuration (tests). Figures
taken while other work runs are noisy: ``uptime`` is printed at the start and
at the end of every run.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import multiprocessing as mp
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger import (
    Ledger,
    LedgerUnavailable,
    PostgresLedger,
    PostgresTimeouts,
    SQLiteLedger,
)
from dprag_core.accounting.stores import sqlite as sqlite_store
from dprag_core.accounting.stores.pgtrust import DEFAULT_SCHEMA
from dprag_core.budget import Budget, PrivacyBudgetExhausted

ROOT = Path(__file__).resolve().parent.parent
POOL = 20_000  # units to draw from: queries overlap, as real questions do
COST = Budget(0.01, 1e-9)


def open_ledger(kind: str, target: str, *, create: bool = False) -> Ledger:
    if kind == "postgres":
        dsn, table = target.rsplit("|", 1)
        return PostgresLedger(dsn, budget_per_unit=1e5, table=table, create=create)
    if kind in ("sqlite-fsync-in-queue", "sqlite-busy-handler"):
        fsync_in_queue()  # the previous behaviour: SQLite's own fsync inside each commit
    if kind == "sqlite-busy-handler":
        sqlite_store.fcntl = None  # type: ignore[assignment]  # SQLite's busy handler alone
    return SQLiteLedger(target, budget_per_unit=1e5, create=create)


def fsync_in_queue() -> None:
    """In this (worker) process: ``synchronous=FULL``, default checkpoints, no group commit."""
    real = sqlite_store.SQLiteStore.conn
    done: set[int] = set()

    def conn(self: sqlite_store.SQLiteStore) -> Any:
        c = real(self)
        if id(c) not in done and not self.read_only:
            c.execute("PRAGMA synchronous = FULL")
            c.execute("PRAGMA wal_autocheckpoint = 1000")
            done.add(id(c))
        return c

    sqlite_store.SQLiteStore.conn = conn  # type: ignore[method-assign]
    sqlite_store.SQLiteStore._make_durable = lambda self, charge: None  # type: ignore[method-assign]


def open_corpus(
    kind: str, target: str, total: Budget, *, create: bool = False
) -> DurableCorpusAccountant:
    if kind == "postgres":
        dsn, table = target.rsplit("|", 1)
        return PostgresCorpusAccountant(dsn, total=total, table=table, create=create)
    return SQLiteCorpusAccountant(target, total=total, create=create)


def instrument() -> dict[str, list[float]]:
    """In this (worker) process: time each charge's wait for the writers' queue, its hold of
    the queue, and its fdatasync (the group commit's, after the queue is released)."""
    phases: dict[str, list[float]] = {"wait": [], "hold": [], "sync": []}
    turn, durable = sqlite_store.SQLiteStore._writer_turn, sqlite_store.SQLiteStore._make_durable

    @contextlib.contextmanager
    def timed_turn(self: sqlite_store.SQLiteStore) -> Iterator[None]:
        t0 = time.perf_counter()
        with turn(self):
            t1 = time.perf_counter()
            phases["wait"].append(t1 - t0)
            yield
        phases["hold"].append(time.perf_counter() - t1)

    def timed_durable(self: sqlite_store.SQLiteStore, charge: bool) -> None:
        t0 = time.perf_counter()
        durable(self, charge)
        phases["sync"].append(time.perf_counter() - t0)

    sqlite_store.SQLiteStore._writer_turn = timed_turn  # type: ignore[method-assign]
    sqlite_store.SQLiteStore._make_durable = timed_durable  # type: ignore[method-assign]
    return phases


CLAIMS = ("durable", "seen")
"""How a query's claim is made: durable on its own (two durable commits per query), or seen
at once and made durable by the charge (``claim(durable=False)``: what the apps do)."""


def latency_worker(
    kind: str, target: str, seed: int, charges: int, units: int, barrier: Any, claim: str = "seen"
) -> tuple[list[tuple[float, float, str]], float, dict[str, list[float]]]:
    """``claim``: one of :data:`CLAIMS`, or ``"alternate"``: query by query, in turn (the
    processes out of step), so both ways see the same machine at the same moments."""
    gen = np.random.default_rng(seed)
    phases = instrument() if kind == "sqlite" else {}
    barrier.wait()  # every process opens at once: opening is timed too
    t0 = time.perf_counter()
    with open_ledger(kind, target) as led:
        # a library without durable= (an earlier checkout, benchmarks/ledger_compare.py)
        # claims the one way it has
        can_defer = "durable" in inspect.signature(led.claim).parameters
        led.remaining(["warm-up"])
        opened = time.perf_counter() - t0
        times: list[tuple[float, float, str]] = []
        for i in range(charges):
            batch = [f"u{j}" for j in gen.choice(POOL, size=units, replace=False)]
            qid = f"s{seed}-q{i}"
            way = CLAIMS[(i + seed) % 2] if claim == "alternate" else claim
            seen = way == "seen" and can_defer
            t0 = time.perf_counter()
            if seen:  # before the query's private section, as every query does
                led.claim(qid, durable=False)
            else:
                led.claim(qid)
            t1 = time.perf_counter()
            granted = led.charge(qid, batch, 0.001).granted  # inside it, before the release
            if seen:
                led.settle()  # before the release: free, the charge's commit carried the claim
            times.append((t1 - t0, time.perf_counter() - t0, way))
            assert granted
    return times, opened, phases


def in_processes(procs: int, target: Any, args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*args[i])`` in ``procs`` forked processes; their results in order."""
    ctx = mp.get_context("fork")
    with ctx.Pool(procs) as pool:
        return pool.starmap(target, args)


def latency(
    kind: str, target: str, procs: int, charges: int, units: int, claim: str = "seen"
) -> dict[str, float]:
    """The figures of ``procs`` processes x ``charges`` queries claimed ``claim``'s way."""
    return latencies(kind, target, procs, charges, units, claim)[claim]


def latencies(
    kind: str, target: str, procs: int, charges: int, units: int, claim: str = "seen"
) -> dict[str, dict[str, float]]:
    """The figures of one run, by the way its queries were claimed (both for ``"alternate"``:
    queries/s and SQLite's phases are then the whole run's)."""
    open_ledger(kind, target, create=True).close()  # schema
    t0 = time.perf_counter()
    barrier = mp.get_context("fork").Manager().Barrier(procs)  # workers are always children:
    args = [(kind, target, s, charges, units, barrier, claim) for s in range(1, procs + 1)]
    results = in_processes(procs, latency_worker, args)  # the busy-handler switch stays there
    wall = time.perf_counter() - t0
    every = [t for times, _, _ in results for t in times]
    figures = {}
    for way in CLAIMS if claim == "alternate" else (claim,):
        pairs = np.array([(c, total) for c, total, w in every if w == way]) * 1e3
        ms, claimed = pairs[:, 1], pairs[:, 0]  # a query's claim + charge; its claim alone
        out = {
            "median": float(np.median(ms)),
            "p99": float(np.percentile(ms, 99)),
            "worst": float(ms.max()),
            "open": max(o for _, o, _ in results) * 1e3,
            "rate": len(every) / wall,
            "claim median": float(np.median(claimed)),
            "charge median": float(np.median(ms - claimed)),
        }
        for phase in ("wait", "hold", "sync") if kind == "sqlite" else ():
            part = np.array([t for _, _, p in results for t in p[phase]]) * 1e3
            out[f"{phase} median"] = float(np.median(part))
            out[f"{phase} p99"] = float(np.percentile(part, 99))
        figures[way] = out
    return figures


def corpus_worker(kind: str, target: str, total: Budget, worker: int, charges: int) -> list[str]:
    granted = []
    with open_corpus(kind, target, total) as acc:
        for i in range(charges):
            qid = f"w{worker}-q{i}"
            try:
                acc.charge(COST, query_id=qid)
            except PrivacyBudgetExhausted:
                continue
            granted.append(qid)
    return granted


def corpus_race(kind: str, target: str, procs: int, charges: int) -> tuple[int, int, float]:
    """(charges that fit, charges granted, epsilon overspend) for a racing corpus budget."""
    fit = procs * charges // 4
    total = Budget(COST.epsilon * fit, COST.delta * fit)
    open_corpus(kind, target, total, create=True).close()
    args = [(kind, target, total, w, charges) for w in range(procs)]
    granted = [q for qs in in_processes(procs, corpus_worker, args) for q in qs]
    with open_corpus(kind, target, total) as acc:
        assert acc.queries == len(granted) == len(set(granted))
        return fit, len(granted), max(acc.spent_epsilon - total.epsilon, 0.0)


def release_forever(kind: str, target: str, what: str, worker: int, markers: str) -> None:
    """Charge, 'answer', append a released marker; until killed."""
    rng = np.random.default_rng(worker)
    fd = os.open(markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    store: Any = (
        open_ledger(kind, target)
        if what == "ledger"
        else open_corpus(kind, target, Budget(1e5, 0.5))
    )
    i = 0
    while True:
        qid = f"k{worker}-q{i}"
        i += 1
        if what == "ledger":  # as the apps do: the claim seen, made durable before the release
            store.claim(qid, durable=False)
            store.charge(qid, [f"u{j}" for j in rng.choice(POOL, size=5, replace=False)], 0.001)
            store.settle()
        else:
            store.charge(COST, query_id=qid)
        time.sleep(float(rng.uniform(0, 0.002)))  # the answer is being computed
        os.write(fd, f"{qid}\n".encode())


def kill_nine(kind: str, target: str, what: str, kills: int, tmp: str) -> tuple[int, int]:
    """(answers released, released without a recorded charge) over ``kills`` kill -9s."""
    markers = Path(tmp) / f"released-{uuid.uuid4().hex}.txt"
    markers.touch()
    if what == "ledger":
        open_ledger(kind, target, create=True).close()
    else:
        open_corpus(kind, target, Budget(1e5, 0.5), create=True).close()
    rng = np.random.default_rng(0)
    ctx = mp.get_context("fork")
    for k in range(kills):
        before = markers.stat().st_size
        proc = ctx.Process(target=release_forever, args=(kind, target, what, k, str(markers)))
        proc.start()
        deadline = time.monotonic() + 60
        while markers.stat().st_size == before and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(float(rng.uniform(0, 0.03)))  # then kill it somewhere mid-query
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    released = [line for line in markers.read_text().split("\n") if line.startswith("k")]
    if what == "ledger":
        with open_ledger(kind, target) as led:
            charged = {e.query_id for e in led.audit_log()}
        return len(released), sum(q not in charged for q in released)
    with open_corpus(kind, target, Budget(1e5, 0.5)) as acc:
        charged = {r.query_id for r in acc.history()}
    return len(released), sum(q not in charged for q in released)


def lock_wait(dsn: str, table: str) -> tuple[float, str]:
    """Seconds until a charge behind a row held by an idle transaction gives up (defaults)."""
    import psycopg

    led = PostgresLedger(dsn, budget_per_unit=1.0, table=table, create=True)
    led.charge("first", ["held"], 0.1)
    with psycopg.connect(dsn) as holder:
        holder.execute(f"SELECT 1 FROM {DEFAULT_SCHEMA}.{table}_units FOR UPDATE")  # then idle
        t0 = time.perf_counter()
        try:
            led.charge("blocked", ["held"], 0.1)
            outcome = "charged"
        except LedgerUnavailable as exc:
            outcome = type(exc).__name__
        waited = time.perf_counter() - t0
    led.close()
    return waited, outcome


def uptime() -> str:
    """``uptime``'s line (the load average of the last 1, 5 and 15 minutes)."""
    try:
        return subprocess.run(["uptime"], check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


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
    parser.add_argument("--charges", type=int, default=500, help="charges per process")
    parser.add_argument("--units", type=int, default=100, help="units per ledger charge")
    parser.add_argument("--procs", type=int, default=8, help="concurrent processes")
    parser.add_argument("--kills", type=int, default=20, help="kill -9 per store")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes (tests)")
    parser.add_argument("--no-sqlite", action="store_true", help="--operator: PostgreSQL only")
    parser.add_argument("--latency-only", action="store_true", help="part 1 only")
    parser.add_argument("--rounds", type=int, default=1, help="part 1: rounds (medians)")
    parser.add_argument("--alternate", action="store_true",
                        help="part 1: the two claim ways query by query in one run")  # fmt: skip
    parser.add_argument("--no-variants", action="store_true",
                        help="part 1: without the earlier SQLite commit paths")  # fmt: skip
    parser.add_argument("--operator", type=int, default=0, metavar="N",
                        help="measure the operator's views at N queries instead")  # fmt: skip
    parser.add_argument("--cpu", type=int, default=0, metavar="N",
                        help="measure the CPU of N queries at 1 process instead")  # fmt: skip
    args = parser.parse_args()
    if args.cpu:
        dsn = "" if args.no_postgres else postgres_dsn()
        cpu_per_query(args.cpu, args.units, dsn, sqlite=not args.no_sqlite)
        return
    if args.operator:
        dsn = "" if args.no_postgres else postgres_dsn()
        operator_views(args.operator, args.units, dsn, sqlite=not args.no_sqlite)
        return
    if args.quick:
        args.charges, args.units, args.procs, args.kills = 20, 10, 3, 2

    tmp = tempfile.mkdtemp()
    kinds = ["sqlite"] + (
        [] if args.no_variants else ["sqlite-fsync-in-queue", "sqlite-busy-handler"]
    )
    print(f"uptime at the start: {uptime()}")
    tables: list[str] = []
    dsn = ""
    if not args.no_postgres:
        dsn = postgres_dsn()
        kinds.append("postgres")

    def target(kind: str) -> str:
        if kind == "postgres":
            tables.append(f"bench_{uuid.uuid4().hex[:12]}")
            return f"{dsn}|{tables[-1]}"
        return os.path.join(tmp, f"{uuid.uuid4().hex}.db")

    print(
        f"1. per-unit ledger: {args.charges} queries per process, each a claim of its id and a "
        f"charge of {args.units} units; times are claim + charge, the claim and the charge "
        "alone (medians) beside them; claim 'seen': claim(durable=False) (made durable by the "
        "charge, then settle(): what the apps do), 'durable': claim() (two durable commits)"
    )
    head = f"{'backend':<21}{'claim':>8}{'procs':>6}{'median ms':>11}{'p99 ms':>9}{'worst ms':>10}"
    print(f"{head}{'open ms':>9}{'queries/s':>11}{'claim ms':>10}{'charge ms':>11}")
    runs: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):  # the two claim ways in turn, their order swapped each round
        for kind in kinds:
            for procs in (1, args.procs):
                ways: tuple[str, ...] = ("seen",)
                if kind in ("sqlite", "postgres"):
                    ways = ("alternate",) if args.alternate else CLAIMS
                for way in ways if r % 2 == 0 else ways[::-1]:
                    got = latencies(kind, target(kind), procs, args.charges, args.units, way)
                    for claim, m in got.items():
                        runs.setdefault((kind, procs, claim), []).append(m)
                        print(
                            f"{kind:<21}{claim:>8}{procs:>6}{m['median']:>11.2f}"
                            f"{m['p99']:>9.2f}{m['worst']:>10.1f}{m['open']:>9.1f}"
                            f"{m['rate']:>11.0f}{m['claim median']:>10.2f}"
                            f"{m['charge median']:>11.2f}",
                            flush=True,
                        )
    rows = {  # each figure: the median of the rounds'
        key: {stat: float(np.median([m[stat] for m in ms])) for stat in ms[0]}
        for key, ms in runs.items()
    }
    n = args.procs
    if args.rounds > 1:
        print(f"medians of {args.rounds} rounds below")
    q = rows[("sqlite", n, "seen")]
    print(
        f"where a sqlite write's time goes at {n} processes (a claim or a charge, median / p99 "
        "ms): waiting for the "
        f"writers' queue {q['wait median']:.2f} / {q['wait p99']:.2f}, holding it "
        f"{q['hold median']:.2f} / {q['hold p99']:.2f}, fdatasync after it "
        f"{q['sync median']:.2f} / {q['sync p99']:.2f}"
    )
    if not args.no_variants:
        f, b = (rows[(k, n, "seen")] for k in ("sqlite-fsync-in-queue", "sqlite-busy-handler"))
        print(
            f"sqlite at {n} processes, group commit vs fsync in the queue: median "
            f"x{q['median'] / f['median']:.2f}, p99 x{q['p99'] / f['p99']:.2f}, queries/s "
            f"x{q['rate'] / f['rate']:.2f}; vs busy handler alone: "
            f"p99 x{q['p99'] / b['p99']:.2f}, worst x{q['worst'] / b['worst']:.2f}"
        )
    for kind in ("sqlite", "postgres")[: 1 if args.no_postgres else 2]:
        for procs in (1, n):
            old, new = rows[(kind, procs, "durable")], rows[(kind, procs, "seen")]
            print(
                f"{kind} at {procs} process(es), claim + charge, durable claim / seen claim: "
                f"median {old['median']:.2f} / {new['median']:.2f} ms "
                f"(x{old['median'] / new['median']:.2f}), p99 {old['p99']:.2f} / "
                f"{new['p99']:.2f} ms (x{old['p99'] / new['p99']:.2f}), queries/s "
                f"x{new['rate'] / old['rate']:.2f}"
            )
    pg = rows.get(("postgres", n, "seen"))
    pg_target = ""
    if pg:
        most = 10 if args.units >= 100 else 5
        met = "met" if pg["median"] <= most else "MISSED"
        pg_target = f", postgres median <= {most} ms {met} ({pg['median']:.2f})"
    verdict = "met" if q["p99"] <= 50 else "MISSED"
    print(
        f"targets at {n} processes, {args.units} units per charge, claim + charge: sqlite p99 "
        "<= 50 ms "
        f"{verdict} ({q['p99']:.1f}){pg_target} (targets for a quiet machine; postgres <= 5 ms "
        f"with 10 units, <= 10 ms with 100); uptime now: {uptime()}"
    )
    if args.latency_only:
        if tables:
            drop_tables(dsn, tables)
        print(f"\nuptime at the end: {uptime()}")
        return

    print(f"\n2. corpus budget: {args.procs} processes x {args.charges} charges on one budget")
    for kind in ("sqlite", "postgres")[: 1 if args.no_postgres else 2]:
        fit, granted, over = corpus_race(kind, target(kind), args.procs, args.charges)
        print(f"{kind:<10} {granted} granted of {fit} that fit: overspend {over:g}")

    print(f"\n3. kill -9 mid-query, {args.kills} times per store")
    for kind in ("sqlite", "postgres")[: 1 if args.no_postgres else 2]:
        for what in ("ledger", "corpus"):
            released, uncharged = kill_nine(kind, target(kind), what, args.kills, tmp)
            print(
                f"{kind:<10} {what:<7} {released} answers released, "
                f"{uncharged} without a recorded charge"
            )
    if dsn:
        waited, outcome = lock_wait(dsn, target("postgres").rsplit("|", 1)[1])
        print(
            f"\n4. postgres: a charge behind a row held by an idle transaction gave up after "
            f"{waited:.1f} s ({outcome}; lock_timeout {PostgresTimeouts().lock:g} s; "
            "nothing charged)"
        )
    if tables:
        drop_tables(dsn, tables)
    print(f"\nuptime at the end: {uptime()}")


def _median_ms(run: Any, times: int = 5) -> float:
    took = []
    for _ in range(times):
        began = time.perf_counter()
        run()
        took.append((time.perf_counter() - began) * 1e3)
    return float(np.median(took))


_SERIES = "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ? - 1)"


def backend_cpu(pid: int) -> float | None:
    """User + system CPU seconds of the process ``pid`` (a PostgreSQL server process on this
    host), None where ``/proc`` does not show it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_query(queries: int, units: int, dsn: str, *, sqlite: bool = True) -> None:
    """``--cpu``: CPU per query at 1 process, the client's and PostgreSQL's server process's."""
    print(f"uptime at the start: {uptime()}")
    print(
        f"CPU per query at 1 process, {queries} queries (a claim seen at once, a charge of "
        f"{units} units, a settle) after 50 to warm up"
    )
    tmp = tempfile.mkdtemp()
    targets = [("sqlite", os.path.join(tmp, "cpu.db"))] if sqlite else []
    table = f"bench_{uuid.uuid4().hex[:12]}"
    if dsn:
        targets.append(("postgres", f"{dsn}|{table}"))
    gen = np.random.default_rng(0)
    batches = [
        [f"u{j}" for j in gen.choice(POOL, size=units, replace=False)] for _ in range(queries + 50)
    ]
    for kind, target in targets:
        with open_ledger(kind, target, create=True) as led:
            server = None
            if isinstance(led, PostgresLedger):
                row = led._store.conn().execute("SELECT pg_backend_pid()").fetchone()
                server = None if row is None else int(row[0])

            def query(i: int, led: Ledger = led) -> None:
                led.claim(f"q{i}", durable=False)
                assert led.charge(f"q{i}", batches[i], 0.001).granted
                led.settle()

            for i in range(50):
                query(i)
            before = None if server is None else backend_cpu(server)
            client, times = time.process_time(), []
            for i in range(50, queries + 50):
                t0 = time.perf_counter()
                query(i)
                times.append(time.perf_counter() - t0)
            client = (time.process_time() - client) / queries * 1e3
            after = None if server is None else backend_cpu(server)
            line = f"{kind:<9} median {np.median(times) * 1e3:.2f} ms, client CPU {client:.3f} ms"
            if before is not None and after is not None:
                line += f", server process CPU {(after - before) / queries * 1e3:.3f} ms"
            print(line, flush=True)
    if dsn:
        drop_tables(dsn, [table])
    print(f"uptime at the end: {uptime()}")


def fill_sqlite(path: str, queries: int, units: int) -> None:
    """A corpus budget and a ledger holding ``queries`` charges of ``units`` units each."""
    import sqlite3

    SQLiteCorpusAccountant(path, total=Budget(1e6, 0.5), create=True).close()
    SQLiteLedger(path, budget_per_unit=1e6, create=True).close()
    t0 = time.time() - queries * 1e-3
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        f"{_SERIES} INSERT INTO corpus_charges SELECT 'q' || i, 1, 0, ? + i * 1e-3 FROM c",
        (queries, t0),
    )
    conn.execute("UPDATE corpus_budget SET spent_epsilon = ?, queries = ?", (queries, queries))
    conn.execute(
        f"{_SERIES} INSERT INTO audit(query_id, unit, cost, at)"
        " SELECT 'q' || (i / ?), 'u' || (i % ?), 1, ? + (i / ?) * 1e-3 FROM c",
        (queries * units, units, units, t0, units),
    )
    conn.execute(
        f"{_SERIES} INSERT INTO queries SELECT 'q' || i, ? + i * 1e-3 FROM c", (queries, t0)
    )
    conn.execute(
        f"{_SERIES} INSERT INTO units SELECT 'u' || i, 1000000000000000000 - ? FROM c",
        (units, queries),
    )
    conn.execute(
        "UPDATE meta SET value = CASE key WHEN 'spent' THEN ? ELSE ? END"
        " WHERE key IN ('spent', 'queries')",
        (queries * units, queries),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def fill_postgres(dsn: str, table: str, queries: int, units: int) -> None:
    """The same on PostgreSQL (tables ``{table}_c_*`` and ``{table}_l_*``)."""
    import psycopg

    PostgresCorpusAccountant(dsn, total=Budget(1e6, 0.5), table=f"{table}_c", create=True).close()
    PostgresLedger(dsn, budget_per_unit=1e6, table=f"{table}_l", create=True).close()
    s, t0 = DEFAULT_SCHEMA, time.time() - queries * 1e-3
    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute(
            f"INSERT INTO {s}.{table}_c_charges SELECT 'q' || i, 1, 0, %s + i * 1e-3"
            " FROM generate_series(0, %s - 1) AS i",
            (t0, queries),
        )
        conn.execute(
            f"UPDATE {s}.{table}_c_budget SET spent_epsilon = %s, queries = %s", (queries, queries)
        )
        conn.execute(
            f"INSERT INTO {s}.{table}_l_audit(query_id, unit, cost, at)"
            " SELECT 'q' || (i / %s), 'u' || (i %% %s), 1, %s + (i / %s) * 1e-3"
            " FROM generate_series(0, %s - 1) AS i",
            (units, units, t0, units, queries * units),
        )
        conn.execute(
            f"INSERT INTO {s}.{table}_l_queries SELECT 'q' || i, %s + i * 1e-3"
            " FROM generate_series(0, %s - 1) AS i",
            (t0, queries),
        )
        conn.execute(
            f"INSERT INTO {s}.{table}_l_units SELECT 'u' || i, 1000000000000000000 - %s"
            " FROM generate_series(0, %s - 1) AS i",
            (queries, units),
        )
        conn.execute(  # the kept query count, as the charges would have kept it
            f"UPDATE {s}.{table}_l_meta AS m SET value = c.n FROM (SELECT 'queries:' ||"
            " (hashtext('q' || i) & 63)::text AS k, count(*) AS n"
            " FROM generate_series(0, %s - 1) AS i GROUP BY 1) AS c WHERE m.key = c.k",
            (queries,),
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for suffix in ("c_charges", "l_audit", "l_queries", "l_units"):
            conn.execute(f"VACUUM ANALYZE {s}.{table}_{suffix}")


def operator_views(queries: int, units: int, dsn: str, *, sqlite: bool = True) -> None:
    """``--operator``: the operator's views at ``queries`` recorded queries, both backends
    (``sqlite`` False: PostgreSQL only)."""
    print(f"uptime at the start: {uptime()}")
    print(f"operator views at {queries} queries of {units} units (median of 5, ms)")
    if sqlite:
        sqlite_views(queries, units)
    if dsn:
        postgres_views(queries, units, dsn)
    print(f"uptime at the end: {uptime()}")


def sqlite_views(queries: int, units: int) -> None:
    """The SQLite lines of ``--operator``."""
    from dprag_core.accounting.stores.sqlite import SQLiteStore
    from dprag_core.cli import main as dprag

    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "records.db")
    began = time.perf_counter()
    fill_sqlite(path, queries, units)
    print(f"sqlite: filled in {time.perf_counter() - began:.0f} s, "
          f"{os.path.getsize(path) / 2**20:.0f} MiB")  # fmt: skip
    acc, led = SQLiteCorpusAccountant(path, read_only=True), SQLiteLedger(path, read_only=True)
    quiet = open(os.devnull, "w")  # noqa: SIM115 - the CLI's output, discarded
    with contextlib.redirect_stdout(quiet):
        rows = {
            "open (integrity check)": _median_ms(
                lambda: SQLiteLedger(path, read_only=True).close()
            ),
            "corpus status": _median_ms(acc.status),
            "corpus history --last 20": _median_ms(lambda: list(acc.history(last=20))),
            "ledger status": _median_ms(led.status),
            "ledger history --last 20": _median_ms(lambda: list(led.audit_log(last=20))),
            "dprag ledger status (both)": _median_ms(
                lambda: dprag(["ledger", "status", "--sqlite", path])
            ),
            "dprag ledger history --last 20": _median_ms(
                lambda: dprag(["ledger", "history", "--sqlite", path, "--ledger"])
            ),
        }
    full = _median_ms(lambda: SQLiteStore(path, busy_timeout=10, label="f").check(), times=1)
    for what, ms in rows.items():
        print(f"sqlite   {what:<32}{ms:>10.1f}")
    print(f"sqlite   {'full check (every page)':<32}{full:>10.1f}")
    writer = SQLiteLedger(path)
    began = time.perf_counter()
    pruned = writer.prune(before=time.time())
    took = time.perf_counter() - began
    writer.close()
    print(f"sqlite   prune of {pruned} query ids: {took:.1f} s; ledger status after it "
          f"{_median_ms(SQLiteLedger(path, read_only=True).status):.1f} ms")  # fmt: skip


def postgres_views(queries: int, units: int, dsn: str) -> None:
    """The PostgreSQL lines of ``--operator``."""
    table = f"op_{uuid.uuid4().hex[:10]}"
    try:
        began = time.perf_counter()
        fill_postgres(dsn, table, queries, units)
        print(f"postgres: filled in {time.perf_counter() - began:.0f} s")
        pacc = PostgresCorpusAccountant(dsn, table=f"{table}_c")
        pled = PostgresLedger(dsn, table=f"{table}_l")
        prow = {
            "open (trust checks)": _median_ms(
                lambda: PostgresLedger(dsn, table=f"{table}_l").close()
            ),
            "corpus status": _median_ms(pacc.status),
            "corpus history --last 20": _median_ms(lambda: list(pacc.history(last=20))),
            "ledger status": _median_ms(pled.status),
            "ledger history --last 20": _median_ms(lambda: list(pled.audit_log(last=20))),
        }
        for what, ms in prow.items():
            print(f"postgres {what:<32}{ms:>10.1f}")
        pacc.close()
        pled.close()
    finally:
        drop_tables(dsn, [f"{table}_c", f"{table}_l"])


def drop_tables(dsn: str, tables: list[str]) -> None:
    """Drop the benchmark's PostgreSQL tables and functions, whichever kind they were."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            for suffix in (
                "audit", "units", "meta", "store", "budget", "charges", "queries", "pruned"
            ):  # fmt: skip
                conn.execute(f"DROP TABLE IF EXISTS {DEFAULT_SCHEMA}.{table}_{suffix} CASCADE")
            for fn in ("append_only", "charge"):
                conn.execute(f"DROP FUNCTION IF EXISTS {DEFAULT_SCHEMA}.{table}_{fn} CASCADE")


if __name__ == "__main__":
    main()
