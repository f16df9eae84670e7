"""The core's entry points raise their public errors from frames that hold no private object.

``PrivateRAG.answer`` / ``.stream`` check and record a query (a bad input, a reused id, an
exhausted budget) before anything reads the corpus, and the selection steps
(:func:`~dprag_core.pipeline.select_by_ledger`, :func:`~dprag_core.pipeline.select_above_threshold`)
claim or charge before they fetch: every frame of the traceback (an error tracker's view,
causes and contexts included) is walked for the documents' text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from private_frames import assert_sealed, reachable_text
from query_support import murag
from toy_mechanisms import ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.accounting.stores.errors import QueryIdReused
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.pipeline import select_above_threshold, select_by_ledger
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold

SECRET = "qx81canary-ottavia"
DOCS = [ScoredDocument(f"d{i}", f"record {i}: {SECRET}", 0.9 - i / 10) for i in range(4)]


@HonoursK
def retriever(question: str, k: int) -> list[ScoredDocument]:
    return list(DOCS[:k])


def _raised(call: Callable[[], Any], error: type[BaseException]) -> BaseException:
    with pytest.raises(error) as info:
        call()
    return info.value


@pytest.mark.parametrize("how", ["answer", "stream"])
def test_private_rag_public_errors(how: str) -> None:
    app = PrivateRAG(murag(InMemoryLedger(budget_per_unit=10.0), tau=0.0), retriever)

    def ask(question: str = "Who?", query_id: str | None = "q-1") -> Any:
        if how == "answer":
            return app.answer(question, query_id=query_id)
        return list(app.stream(question, query_id=query_id))

    ask()
    assert_sealed(_raised(ask, QueryIdReused), [SECRET])
    assert_sealed(_raised(lambda: ask("Who" + chr(0xD800), None), ValueError), [SECRET])
    spent = PrivateRAG(
        ToyMechanism(k=2), retriever, accountant=InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    )
    spent.answer("Who?")
    assert_sealed(_raised(lambda: spent.answer("Who?"), PrivacyBudgetExhausted), [SECRET])


def test_selection_steps_claim_and_charge_before_fetching() -> None:
    fetched: list[int] = []

    def fetch() -> list[ScoredDocument]:
        fetched.append(1)
        return list(DOCS)

    ledger = InMemoryLedger(budget_per_unit=10.0)
    select_by_ledger(fetch, ledger=ledger, tau=0.0, cost=1.0, k=2, query_id="q")
    again = lambda: select_by_ledger(fetch, ledger=ledger, tau=0.0, cost=1.0, k=2, query_id="q")  # noqa: E731
    assert_sealed(_raised(again, QueryIdReused), [SECRET])
    budget = InMemoryCorpusAccountant(Budget(1.0))
    selector = DPThreshold(epsilon=1.0, bounds=(0.0, 1.0), k=1)
    select_above_threshold(selector, budget, fetch, rng=0)
    over = lambda: select_above_threshold(selector, budget, fetch, rng=0)  # noqa: E731
    assert_sealed(_raised(over, PrivacyBudgetExhausted), [SECRET])
    assert fetched == [1, 1]  # the refused calls fetched nothing


def test_the_detector_walks_every_frame() -> None:
    """Positive control: an error raised where the documents are a local is caught."""

    def fetch_then_claim() -> None:
        found = [d for d in DOCS if d.score > 0]  # noqa: F841 (the frame's local)
        raise QueryIdReused("reused")

    assert SECRET in reachable_text(_raised(fetch_then_claim, QueryIdReused))
