"""Several processes on one ledger or corpus budget: no overspend, none after kill -9.

Both tests replay the audit log: per unit, the granted charges never exceed the
budget, and they add up exactly to ``budget - remaining``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from ledger_support import (
    charge_many,
    charge_until_killed,
    claimed_ids,
    corpus_charge_many,
    corpus_charge_until_killed,
    open_corpus,
    open_ledger,
    replay,
)

from dprag_core.accounting.stores.amounts import SCALE
from dprag_core.budget import Budget

BUDGET, COST = 0.5, 0.1  # five charges per unit, in floats that do not add up exactly
WORKERS, QUERIES, POOL = 8, 500, 200
KILLS = 20

BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

pytestmark = pytest.mark.skipif(
    "fork" not in mp.get_all_start_methods(), reason="needs the fork start method (POSIX)"
)


def _context() -> mp.context.BaseContext:
    """Fork: workers start in milliseconds (spawn re-imports pytest's main in every child).

    The parent may hold an open ledger connection; the ledger opens a new one in
    the child because it keys connections by process id.
    """
    return mp.get_context("fork")


def _check_consistent(kind: str, target: str) -> dict[str, int]:
    with open_ledger(kind, target, BUDGET) as led:
        log = list(led.audit_log())
        spent = replay(log)
        left = led.remaining(spent)
        assert max(spent.values()) <= round(BUDGET * SCALE), "a unit was overspent"
        for unit, total in spent.items():
            assert total == round(BUDGET * SCALE) - round(left[unit] * SCALE)
        assert round(led.total_spent() * SCALE) == sum(spent.values())
        assert len({(e.query_id, e.unit) for e in log}) == len(log)
    return spent


@pytest.mark.parametrize("shared_target", BACKEND_PARAMS, indirect=True)
def test_eight_processes_never_overspend(shared_target: tuple[str, str]) -> None:
    kind, target = shared_target
    open_ledger(kind, target, BUDGET, create=True).close()  # create the schema once
    ctx = _context()
    args = [(kind, target, BUDGET, COST, w, QUERIES, POOL) for w in range(WORKERS)]
    with ctx.Pool(WORKERS) as pool:
        granted = [q for qs in pool.starmap(charge_many, args) for q in qs]
    spent = _check_consistent(kind, target)
    with open_ledger(kind, target, BUDGET) as led:
        assert {e.query_id for e in led.audit_log()} == set(granted)
    exhausted = sum(v == round(BUDGET * SCALE) for v in spent.values())
    print(
        f"{kind}: {WORKERS}x{QUERIES} queries, {len(granted)} granted, "
        f"{exhausted}/{POOL} units exhausted, max spend {max(spent.values()) / SCALE:g} "
        f"<= budget {BUDGET}: overspend 0"
    )
    assert len(granted) > 100 and exhausted > POOL // 2  # the race really happened


@pytest.mark.parametrize("shared_target", BACKEND_PARAMS, indirect=True)
def test_kill_9_mid_query_never_releases_uncharged(
    shared_target: tuple[str, str], tmp_path: Path
) -> None:
    kind, target = shared_target
    open_ledger(kind, target, BUDGET, create=True).close()
    markers = tmp_path / "released.txt"
    markers.touch()
    ctx = _context()
    rng = np.random.default_rng(0)
    for kill in range(KILLS):
        before = markers.stat().st_size
        proc = ctx.Process(
            target=charge_until_killed, args=(kind, target, BUDGET, COST, 1000 + kill, markers)
        )
        proc.start()
        deadline = time.monotonic() + 60
        while markers.stat().st_size == before and time.monotonic() < deadline:
            time.sleep(0.005)  # wait until this worker has released one answer
        time.sleep(float(rng.uniform(0, 0.03)))  # then kill it somewhere mid-query
        assert proc.pid is not None and proc.is_alive()
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        assert proc.exitcode == -signal.SIGKILL
    _check_consistent(kind, target)
    with open_ledger(kind, target, BUDGET) as led:
        charged: dict[str, set[str]] = {}
        for e in led.audit_log():
            charged.setdefault(e.query_id, set()).add(e.unit)
        # the ledger still works after twenty crashes
        assert led.charge("after-crashes", ["fresh-unit"], COST).granted
    released = [line.split() for line in markers.read_text().splitlines() if line.strip()]
    assert released, "no worker got as far as releasing an answer"
    claimed = claimed_ids(kind, target)  # the claims table itself (the audit refuses alike)
    for entry in released:
        if len(entry) == 2:  # a marker torn by the kill has fewer fields: ignore it
            qid, units = entry
            assert charged.get(qid) == set(units.split(",")), f"{qid} released uncharged"
            assert qid in claimed, f"{qid} released without its claim"
    print(f"{kind}: {KILLS} kill -9, {len(released)} released answers all charged, overspend 0")


CORPUS_TOTAL = Budget(3.0, 3e-6)  # 300 charges of COST_Q fit; far more are attempted
COST_Q = Budget(0.01, 1e-8)
CORPUS_QUERIES = 60  # per worker in the test; benchmarks/ledger.py runs 8 x 500


@pytest.mark.parametrize("shared_target", BACKEND_PARAMS, indirect=True)
def test_eight_processes_never_overspend_the_corpus_budget(
    shared_target: tuple[str, str],
) -> None:
    kind, target = shared_target
    open_corpus(kind, target, CORPUS_TOTAL, create=True).close()
    args = [(kind, target, CORPUS_TOTAL, COST_Q, w, CORPUS_QUERIES) for w in range(WORKERS)]
    with _context().Pool(WORKERS) as pool:
        granted = [q for qs in pool.starmap(corpus_charge_many, args) for q in qs]
    with open_corpus(kind, target, CORPUS_TOTAL) as acc:
        assert acc.queries == len(granted) == len(set(granted))
        assert round(acc.spent_epsilon * SCALE) == len(granted) * round(COST_Q.epsilon * SCALE)
        assert acc.spent_epsilon <= CORPUS_TOTAL.epsilon and acc.spent_delta <= CORPUS_TOTAL.delta
    assert len(granted) == 300  # the budget was exhausted exactly, by racing processes


@pytest.mark.parametrize("shared_target", BACKEND_PARAMS, indirect=True)
def test_kill_9_mid_query_never_releases_without_a_corpus_charge(
    shared_target: tuple[str, str], tmp_path: Path
) -> None:
    kind, target = shared_target
    total = Budget(1e5, 0.5)
    open_corpus(kind, target, total, create=True).close()
    markers = tmp_path / "released.txt"
    markers.touch()
    rng = np.random.default_rng(1)
    for kill in range(KILLS):
        before = markers.stat().st_size
        proc = _context().Process(
            target=corpus_charge_until_killed,
            args=(kind, target, total, COST_Q, 2000 + kill, str(markers)),
        )
        proc.start()
        deadline = time.monotonic() + 60
        while markers.stat().st_size == before and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(float(rng.uniform(0, 0.03)))
        assert proc.pid is not None and proc.is_alive()
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    released = [line.split() for line in markers.read_text().splitlines() if line.strip()]
    with open_corpus(kind, target, total) as acc:
        charged = acc.queries
        recorded = {r.query_id for r in acc.history()}
        for entry in released:
            if len(entry) == 2:  # a torn marker has fewer fields
                assert entry[0] in recorded, "an answer was released without a recorded charge"
                with pytest.raises(ValueError, match="query_id"):  # its id buys nothing more
                    acc.charge(COST_Q, query_id=entry[0])
        assert acc.queries == charged, "an answer was released without a recorded charge"
        assert charged >= len(released) >= KILLS
