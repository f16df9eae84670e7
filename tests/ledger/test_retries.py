"""A query id buys at most one release: retries after an unknown outcome, and only those.

An outcome is made unknown the way it happens in production: on PostgreSQL
the loopback proxy cuts the reply after the server committed (or drops the
request, which never arrives); on SQLite the acknowledgement of a
committed transaction is lost (the store's commit step raises
``LedgerOutcomeUnknown`` after the commit, as a failing ``COMMIT`` does).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ledger_support import dsn_with, needs_postgres
from tcp_proxy import Proxy

from dprag_core.accounting import PostgresCorpusAccountant, SQLiteCorpusAccountant
from dprag_core.accounting.corpus_durable import DurableCorpusAccountant
from dprag_core.accounting.ledger import (
    Ledger,
    LedgerOutcomeUnknown,
    PostgresLedger,
    PostgresTimeouts,
    SQLiteLedger,
    charge_active,
)
from dprag_core.accounting.stores import sqlite as sqlite_store
from dprag_core.budget import Budget

FAST = PostgresTimeouts(connect=5, statement=1.0, lock=0.5, idle_in_transaction=5)
SECRET_ID = "q-7f3a-private-looking-id"

Opener = Callable[..., Any]
Fault = Callable[[], Any]


@contextlib.contextmanager
def _lost_sqlite_ack(monkeypatch: pytest.MonkeyPatch, *, skip: int = 0) -> Iterator[None]:
    """The next charge (after ``skip`` more) commits, and then its caller hears
    ``LedgerOutcomeUnknown``."""
    real = sqlite_store.SQLiteStore.write
    left = [skip]

    @contextlib.contextmanager
    def write(
        self: sqlite_store.SQLiteStore, *, charge: bool = False, durable: bool = True
    ) -> Iterator[Any]:
        with real(self, charge=charge, durable=durable) as conn:
            yield conn
        if charge and left[0]:
            left[0] -= 1
        elif charge:
            monkeypatch.setattr(sqlite_store.SQLiteStore, "write", real)
            raise LedgerOutcomeUnknown("the acknowledgement was lost (test)")

    monkeypatch.setattr(sqlite_store.SQLiteStore, "write", write)
    yield


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_postgres])]
)
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Opener, Callable[[str], contextlib.AbstractContextManager[None]]]]:
    """(kind, open(kind_of_store, **kw), fault(mode)): a context in which the next charge's
    outcome is unknown; mode "after" (it was recorded) or "before" (it never arrived)."""
    if request.param == "sqlite":
        path = tmp_path / "b.db"

        def open_sqlite(what: str, *, create: bool = False, direct: bool = False) -> Any:
            if what == "corpus":
                return SQLiteCorpusAccountant(path, total=Budget(1.0), create=create)
            return SQLiteLedger(path, budget_per_unit=1.0, create=create)

        def sqlite_fault(mode: str) -> contextlib.AbstractContextManager[None]:
            if mode == "after":
                return _lost_sqlite_ack(monkeypatch)
            pytest.skip("a SQLite charge that never arrives fails before BEGIN: no unknown outcome")

        yield "sqlite", open_sqlite, sqlite_fault
        return
    table = request.getfixturevalue("table")
    proxy: Proxy = request.getfixturevalue("proxy")
    via_proxy = dsn_with(host="127.0.0.1", port=proxy.port)

    def open_pg(what: str, *, create: bool = False, direct: bool = False) -> Any:
        dsn = dsn_with() if direct else via_proxy
        if what == "corpus":
            return PostgresCorpusAccountant(
                dsn, total=Budget(1.0), table=f"{table}_c", timeouts=FAST, create=create
            )
        return PostgresLedger(dsn, budget_per_unit=1.0, table=table, timeouts=FAST, create=create)

    @contextlib.contextmanager
    def pg_fault(mode: str) -> Iterator[None]:
        proxy.mode = "cut" if mode == "after" else "drop"
        try:
            yield
        finally:
            proxy.mode = "forward"
            time.sleep(0.2)

    yield "postgres", open_pg, pg_fault
    from ledger_support import drop_postgres_tables

    drop_postgres_tables(f"{table}_c")


def _charge(store: Any, qid: str) -> Any:
    if isinstance(store, DurableCorpusAccountant):
        return store.charge(Budget(0.25), query_id=qid)
    return store.charge(qid, ["a", "b"], 0.25)


def _spent(store: Any) -> float:
    if isinstance(store, DurableCorpusAccountant):
        return store.spent_epsilon
    assert isinstance(store, Ledger)
    return store.total_spent()


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_a_retry_after_an_unknown_outcome_is_charged_once_and_says_so(
    backend: tuple[str, Opener, Any], what: str
) -> None:
    _, open_store, fault = backend
    store = open_store(what, create=True)
    with fault("after"), pytest.raises(LedgerOutcomeUnknown):
        _charge(store, SECRET_ID)
    result = _charge(store, SECRET_ID)  # the retry finds it recorded: no new charge
    if what == "corpus":
        assert result is False
    else:
        assert result.granted and result.retry
    direct = open_store(what, direct=True)
    assert _spent(direct) == (0.25 if what == "corpus" else 0.5)
    with pytest.raises(ValueError, match="query_id") as again:  # and only once
        _charge(store, SECRET_ID)
    assert SECRET_ID not in str(again.value)
    assert _spent(direct) == (0.25 if what == "corpus" else 0.5)


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_an_unknown_outcome_that_was_not_recorded_is_charged_by_the_retry(
    backend: tuple[str, Opener, Any], what: str
) -> None:
    _, open_store, fault = backend
    store = open_store(what, create=True)
    _charge(store, "warm-up")  # this thread's connection is up
    with fault("before"), pytest.raises(LedgerOutcomeUnknown):
        _charge(store, SECRET_ID)
    result = _charge(store, SECRET_ID)
    assert result is True if what == "corpus" else (result.granted and not result.retry)
    assert _spent(open_store(what, direct=True)) == (0.5 if what == "corpus" else 1.0)


@pytest.mark.parametrize("what", ["corpus", "ledger"])
def test_reusing_a_recorded_id_is_refused_everywhere_else(
    backend: tuple[str, Opener, Any], what: str
) -> None:
    """After a granted charge, from another object (another process), after a restart,
    and even from another object than the one whose outcome was unknown."""
    _, open_store, fault = backend
    store = open_store(what, create=True)
    granted, unknown = "qid-g-91x", "qid-u-73y"
    _charge(store, granted)
    with fault("after"), pytest.raises(LedgerOutcomeUnknown):
        _charge(store, unknown)
    spent = _spent(open_store(what, direct=True))
    for qid, who in (
        (granted, store),  # after its own granted charge
        (granted, open_store(what)),  # another process, or after a restart
        (unknown, open_store(what)),  # not the object that saw the unknown outcome
    ):
        with pytest.raises(ValueError, match="query_id") as refused:
            _charge(who, qid)
        assert qid not in str(refused.value)
    assert _spent(open_store(what, direct=True)) == spent


def test_a_claim_in_doubt_is_accepted_once_more_on_the_same_object(
    backend: tuple[str, Opener, Any],
) -> None:
    _, open_store, fault = backend
    store = open_store("ledger", create=True)
    with fault("after"), pytest.raises(LedgerOutcomeUnknown):
        store.claim(SECRET_ID)
    assert store.claim(SECRET_ID) is False  # recorded by the attempt in doubt: the retry
    with pytest.raises(ValueError, match="query_id"):  # and only once
        store.claim(SECRET_ID)
    with pytest.raises(ValueError, match="query_id"):  # never from another object
        open_store("ledger").claim(SECRET_ID)


def test_charge_active_retries_exactly_the_units_whose_outcome_was_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = SQLiteLedger(tmp_path / "l.db", budget_per_unit=1.0, create=True)
    led.charge("spend-b", ["b"], 1.0)  # b cannot pay: charge_active drops it, then charges a, c
    with _lost_sqlite_ack(monkeypatch, skip=1), pytest.raises(LedgerOutcomeUnknown):
        charge_active(led, "q", ["a", "b", "c"], 0.5)
    assert led.unknown_charge("q") == ["a", "c"]
    assert charge_active(led, "q", ["a", "b", "c"], 0.5) == ["a", "c"]  # the same query again
    assert led.unknown_charge("q") is None
    assert led.remaining(["a", "b", "c"]) == {"a": 0.5, "b": 0.0, "c": 0.5}
    with pytest.raises(ValueError, match="query_id"):
        charge_active(led, "q", ["a", "c"], 0.5)


def test_the_in_memory_accountant_keeps_the_same_rule() -> None:
    from dprag_core.accounting import InMemoryCorpusAccountant

    acc = InMemoryCorpusAccountant(Budget(1.0))
    assert acc.charge(Budget(0.25), query_id="q1") is True
    with pytest.raises(ValueError, match="query_id"):
        acc.charge(Budget(0.25), query_id="q1")
    assert acc.queries == 1
