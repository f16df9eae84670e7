"""One query id through the core entry point: the caller's, or a fresh one per query.

The id names the query's charges to the corpus budget and to MuRAG's per-unit
ledger, so a retry after ``LedgerOutcomeUnknown`` with the same id is charged
once and says so (``details["charge"] == "retry"``). Before issue 26 item 3,
``PrivateRAG`` charged with no id at all: a retry charged twice. The adapters'
own idioms are tested in tests/langchain/test_query_ids.py and
tests/llamaindex/test_li_query_ids.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from query_support import BAD_UNITS, InDoubtAccountant, PureToy, murag
from toy_mechanisms import ToyMechanism

from dprag_core import PrivateRAG
from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger, LedgerOutcomeUnknown, SQLiteLedger
from dprag_core.accounting.stores import sqlite as sqlite_store
from dprag_core.accounting.stores.amounts import MAX_ID_BYTES
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.algorithms import MuRAGAda
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.errors import PRIVATE_FAILURE, PrivateDataError
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import CHARGE_RETRY
from dprag_core.query_ids import RESERVED_ID_BYTES
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

DOCS = [ScoredDocument(f"d{i}", f"record {i}", 0.9 - i / 10) for i in range(4)]


@HonoursK
def retriever(question: str, k: int) -> list[ScoredDocument]:
    return DOCS[:k]


def _final(app: PrivateRAG, mode: str, **kw: object) -> DPAnswer:
    if mode == "answer":
        return app.answer("Who?", **kw)  # type: ignore[arg-type]
    *_, last = app.stream("Who?", **kw)  # type: ignore[arg-type]
    assert isinstance(last, DPAnswer)
    return last


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_a_retry_after_an_unknown_outcome_is_charged_once(mode: str) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    app = PrivateRAG(ToyMechanism(k=2), retriever, accountant=budget)
    with pytest.raises(LedgerOutcomeUnknown):
        _final(app, mode, query_id="req-1")
    retried = _final(app, mode, query_id="req-1")
    assert retried.details["charge"] == CHARGE_RETRY and retried.text == "2 candidates"
    assert budget.spent_epsilon == pytest.approx(1.0) and budget.queries == 1  # once, for both
    fresh = _final(app, mode, query_id="req-2")
    assert "charge" not in fresh.details  # a new charge says nothing
    assert budget.ids == ["req-1", "req-1", "req-2"] and budget.spent_epsilon == pytest.approx(2.0)


def test_without_an_id_each_query_gets_a_fresh_one() -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    budget.failed = True  # no fault this time
    app = PrivateRAG(ToyMechanism(k=2), retriever, accountant=budget)
    app.answer("Who?")
    list(app.stream("Who?"))
    assert len(budget.ids) == 2 and len(set(budget.ids)) == 2 and None not in budget.ids


@pytest.mark.parametrize("bad", [" ", "q\x00", "q" * 1025, "q" * 961, 7])
def test_a_bad_query_id_is_refused_before_the_charge(bad: object) -> None:
    budget = InDoubtAccountant(Budget(10.0, 1e-3))
    app = PrivateRAG(ToyMechanism(k=2), retriever, accountant=budget)
    with pytest.raises((ValueError, TypeError), match="query_id"):
        app.answer("Who?", query_id=bad)  # type: ignore[arg-type]
    assert budget.ids == [] and budget.spent_epsilon == 0.0


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_murag_charges_its_ledger_under_the_query_id(mode: str) -> None:
    ledger = InMemoryLedger(budget_per_unit=10.0)
    app = PrivateRAG(murag(ledger), retriever)
    answer = _final(app, mode, query_id="req-9")
    assert answer.details["query_id"] == "req-9"
    assert {e.query_id for e in ledger.audit_log()} == {"req-9"}
    assert {e.unit for e in ledger.audit_log()} == {"d0", "d1", "d2", "d3"}


@pytest.mark.parametrize("defect", sorted(BAD_UNITS))
def test_one_invalid_unit_id_never_blocks_murag(defect: str) -> None:
    """Issue 25 item 5: 0 of 20 queries answered with such a document retrieved; now 20 of 20."""
    bad = ScoredDocument("bad", "a record", 0.95, unit=BAD_UNITS[defect])

    @HonoursK
    def with_bad(question: str, k: int) -> list[ScoredDocument]:
        return [bad, *DOCS][:k]

    ledger = InMemoryLedger(budget_per_unit=100.0)
    app = PrivateRAG(murag(ledger), with_bad)
    answers = [app.answer(f"Who is {i}?") for i in range(20)]
    assert [a.text for a in answers] == ["2 candidates"] * 20  # d0, d1: the bad one dropped
    assert "bad" not in {e.unit for e in ledger.audit_log()}


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_the_longest_query_id_leaves_room_for_murag_ada_steps(mode: str) -> None:
    """A caller id of the longest length still names every step: ``<id>/bin0``, ``<id>/rag``."""
    ledger = InMemoryLedger(budget_per_unit=10.0)
    ada = MuRAGAda(
        PureToy(k=2),
        ledger=ledger,
        bins=[1.0, 0.5, 0.0],
        epsilon_threshold=1.0,
        epsilon_rag=1.0,
        score_bounds=(-1, 1),
    )
    longest = "q" * (MAX_ID_BYTES - RESERVED_ID_BYTES)
    answer = _final(PrivateRAG(ada, retriever), mode, query_id=longest)
    assert answer.details["query_id"] == longest
    assert {e.query_id for e in ledger.audit_log()} >= {f"{longest}/bin0", f"{longest}/rag"}


@contextlib.contextmanager
def _lost_ack(monkeypatch: pytest.MonkeyPatch, *, skip: int) -> Iterator[None]:
    """After ``skip`` more durable writes, the next one commits and its caller hears
    ``LedgerOutcomeUnknown`` (once)."""
    real = sqlite_store.SQLiteStore.write
    left = [skip]

    @contextlib.contextmanager
    def lost_ack(
        self: sqlite_store.SQLiteStore, *, charge: bool = False, durable: bool = True
    ) -> Iterator[Any]:
        with real(self, charge=charge, durable=durable) as conn:
            yield conn
        if charge and left[0]:
            left[0] -= 1
        elif charge:
            monkeypatch.setattr(sqlite_store.SQLiteStore, "write", real)
            raise LedgerOutcomeUnknown("the acknowledgement was lost (test)")

    monkeypatch.setattr(sqlite_store.SQLiteStore, "write", lost_ack)
    yield


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_a_ledger_in_doubt_inside_murag_is_the_fixed_failure_and_a_retry_is_charged_once(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-unit charge runs inside the private section: its error leaves as the fixed
    failure (before issue 36 it left as itself), and the retry with the same id is charged once.
    """
    ledger = SQLiteLedger(tmp_path / "l.db", budget_per_unit=10.0, create=True)
    app = PrivateRAG(murag(ledger), retriever)
    # the claim (public) passes, the charge is in doubt
    with _lost_ack(monkeypatch, skip=1), pytest.raises(PrivateDataError) as caught:
        _final(app, mode, query_id="req-5")
    assert str(caught.value) == PRIVATE_FAILURE
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    retried = _final(app, mode, query_id="req-5")
    assert retried.text == "2 candidates" and retried.details["charge"] == CHARGE_RETRY
    assert [e.unit for e in ledger.audit_log()] == ["d0", "d1", "d2", "d3"]  # charged once
    assert ledger.remaining(["d0"]) == {"d0": pytest.approx(9.0)}
    with pytest.raises(QueryIdReused):  # released: the id is spent
        _final(app, mode, query_id="req-5")


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_a_claim_in_doubt_is_public_and_its_retry_is_accepted(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is written before the private section: its error leaves as itself."""
    ledger = SQLiteLedger(tmp_path / "l.db", budget_per_unit=10.0, create=True)
    app = PrivateRAG(murag(ledger), retriever)
    with _lost_ack(monkeypatch, skip=0), pytest.raises(LedgerOutcomeUnknown, match="lost"):
        _final(app, mode, query_id="req-6")
    assert _final(app, mode, query_id="req-6").details["charge"] == CHARGE_RETRY
    assert len(list(ledger.audit_log())) == 4


def test_a_retry_after_a_failure_inside_reuses_murag_adas_step_charges() -> None:
    """MuRAG-Ada charges several step ids; a model failing after them leaves them charged, and
    the retry (accepted by the app, which saw the query fail) reuses them: never charged twice.
    """
    ledger = InMemoryLedger(budget_per_unit=10.0)
    inner = _FailingOnce(k=2)
    ada = MuRAGAda(inner, ledger=ledger, bins=[1.0, 0.5, 0.0], epsilon_threshold=1.0,
                   epsilon_rag=1.0, score_bounds=(-1, 1))  # fmt: skip
    app = PrivateRAG(ada, retriever)
    with pytest.raises(PrivateDataError):
        app.answer("Who?", query_id="req-7", rng=0)
    charged = sorted((e.query_id, e.unit) for e in ledger.audit_log())
    answer = app.answer("Who?", query_id="req-7", rng=0)
    assert answer.details["charge"] == CHARGE_RETRY and answer.text == "2 candidates"
    assert sorted((e.query_id, e.unit) for e in ledger.audit_log()) == charged  # nothing new
    with pytest.raises(QueryIdReused):
        app.answer("Who?", query_id="req-7")


class _FailsOnce(ToyMechanism):
    """Fails on its first call, after the charges (a model endpoint going away), then answers."""

    failed = False

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        if not self.failed:
            self.failed = True
            raise ConnectionError(f"endpoint lost while reading {docs[0].text}")
        return super().answer(question, docs, rng=rng)


class _FailingOnce(_FailsOnce, PureToy):
    """:class:`_FailsOnce` as MuRAG's pure-DP inner mechanism."""


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_a_fixed_cost_query_that_failed_inside_is_retried_without_a_second_charge(
    mode: str,
) -> None:
    budget = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    app = PrivateRAG(_FailsOnce(), retriever, accountant=budget)
    with pytest.raises(PrivateDataError):
        _final(app, mode, query_id="req-8")
    retried = _final(app, mode, query_id="req-8")
    assert retried.details["charge"] == CHARGE_RETRY and budget.queries == 1
    with pytest.raises(QueryIdReused):
        _final(app, mode, query_id="req-8")


def test_a_stream_that_released_a_chunk_is_not_retried() -> None:
    """A failure after a chunk left: that chunk was a release, so the id is spent."""

    class BreaksMidway(ToyMechanism):
        __module__ = "dprag_core.algorithms"  # streamed live, as dprag's own mechanisms are

        def stream(
            self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
        ) -> Iterator[str | DPAnswer]:
            yield "2"
            raise ConnectionError("endpoint lost")

    budget = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    app = PrivateRAG(BreaksMidway(), retriever, accountant=budget)
    with pytest.raises(PrivateDataError):
        list(app.stream("Who?", query_id="req-9"))
    with pytest.raises(QueryIdReused):
        app.answer("Who?", query_id="req-9")
