"""The seal through the core entry point: D and D + x look the same but for the DP answer.

Issue 36's cases 1, 5 and 6 on neighbouring corpora (tests/seal_support.py),
through ``PrivateRAG`` with the in-memory and the SQLite ledger, answered and
streamed; the adapters' own paths are tests/langchain/test_lc_seal.py and
tests/llamaindex/test_li_seal.py. Each ``test_*_on_d_and_d_plus_x`` failed on
the code before issue 36 (checked on main at 21887b1): the reused id was
refused on D + x only, the store's error left as ``LedgerUnavailable`` quoting
x on D + x and as a ``PrivateDataError`` naming ``ValueError`` on D, and the
documents' ids reached ``details``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from query_support import murag
from seal_support import (
    FIXED_FAILURE,
    QUESTION,
    TAU,
    FailsByCorpus,
    IdsInDetails,
    Observation,
    answer_fields,
    error_by_corpus,
    observed,
    rows,
)
from toy_mechanisms import ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.accounting.ledger import InMemoryLedger, Ledger, SQLiteLedger
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument


def corpus(with_x: bool) -> list[ScoredDocument]:
    """D (scores 0.1, below τ) or D + x (x scores 0.9), best first."""
    docs = [ScoredDocument(f"d-{u}", t, 0.9 if "Zora" in t else 0.1, u) for u, t in rows(with_x)]
    return sorted(docs, key=lambda d: -d.score)


def store(with_x: bool) -> HonoursK:
    docs = corpus(with_x)
    return HonoursK(lambda question, k: docs[:k])


def ledger(kind: str, tmp_path: Path) -> Ledger:
    if kind == "memory":
        return InMemoryLedger(budget_per_unit=10.0)
    return SQLiteLedger(tmp_path / f"{uuid.uuid4().hex}.db", budget_per_unit=10.0, create=True)


def ask(app: PrivateRAG, mode: str, **kw: Any) -> dict[str, Any]:
    """One query answered or streamed: its public fields (the text, a DP release, left out)."""
    if mode == "answer":
        return answer_fields(app.answer(QUESTION, **kw))
    *_, last = app.stream(QUESTION, **kw)
    assert isinstance(last, DPAnswer)
    return answer_fields(last)


def budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(100.0, 0.5))


MODES = ["answer", "stream"]
LEDGERS = ["memory", "sqlite"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", LEDGERS)
def test_a_reused_query_id_is_refused_alike_on_d_and_d_plus_x(
    kind: str, mode: str, tmp_path: Path
) -> None:
    """Case 1: MuRAG recorded an id only with a non-empty charge, so a reused id was refused
    exactly when x (above τ) was in the corpus. The id is now claimed before the section."""

    def scenario(with_x: bool) -> tuple[Observation, Observation]:
        app = PrivateRAG(murag(ledger(kind, tmp_path), tau=TAU), store(with_x))
        first = observed(lambda: ask(app, mode, query_id="client-key-1"))
        again = observed(lambda: ask(app, mode, query_id="client-key-1"))
        return first, again

    on_d, on_dx = scenario(False), scenario(True)
    assert on_d == on_dx
    assert on_d[0][0] == "released" and on_d[1][:2] == ("raised", "QueryIdReused")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["store", "mechanism"])
def test_an_errors_class_and_message_are_alike_on_d_and_d_plus_x(where: str, mode: str) -> None:
    """Case 5: dprag's own error classes (``LedgerUnavailable`` here) left the section as
    themselves, message (and x's text) included; any other class was withheld, by name."""

    def scenario(with_x: bool) -> Observation:
        docs = corpus(with_x)
        mechanism: ToyMechanism = ToyMechanism(k=2)
        if where == "mechanism":
            mechanism, source = FailsByCorpus(k=2), store(with_x)
        else:

            def raising(question: str, k: int) -> list[ScoredDocument]:
                raise error_by_corpus(docs)

            source = HonoursK(raising)
        app = PrivateRAG(mechanism, source, accountant=budget())
        return observed(lambda: ask(app, mode))

    assert scenario(False) == scenario(True) == FIXED_FAILURE


@pytest.mark.parametrize("mode", MODES)
def test_private_details_are_refused_alike_on_d_and_d_plus_x(mode: str) -> None:
    """Case 6: ``check_answer`` ran in tests only, so a detail holding the documents' ids
    reached the caller; every release is checked now, and refused as the fixed failure."""

    def scenario(with_x: bool) -> Observation:
        app = PrivateRAG(IdsInDetails(k=2), store(with_x), accountant=budget())
        return observed(lambda: ask(app, mode))

    assert scenario(False) == scenario(True) == FIXED_FAILURE


def test_the_release_half_of_the_contract_is_checked_before_any_charge() -> None:
    """Case 6: both candidate routes, or an undeclared template, are refused when built."""

    class BothRoutes(ToyMechanism):
        def min_score(self) -> float:
            return 0.0

    class UndeclaredTemplate(ToyMechanism):
        def __init__(self, *, k: int = 4) -> None:
            super().__init__(k=k)
            self.summary_template = "Sum up: {notes}\nQ: {question}"

    spent = budget()
    with pytest.raises(ValueError, match="two routes"):
        PrivateRAG(BothRoutes(), store(True), accountant=spent)
    with pytest.raises(ValueError, match=r"\.summary_template .* not declared"):
        PrivateRAG(UndeclaredTemplate(), store(True), accountant=spent)
    assert spent.queries == 0
