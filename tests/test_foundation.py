"""The core types: Budget validation, DPAnswer, the accountant, the pipeline order."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from dprag_core import (
    Budget,
    DPAnswer,
    InMemoryCorpusAccountant,
    PrivacyBudgetExhausted,
)
from dprag_core.accounting.calibration import per_token_epsilon
from dprag_core.retrieval.above import retrieve_above
from dprag_core.retrieval.documents import ScoredDocument


def test_import_is_light() -> None:
    code = (
        "import sys, dprag_core, dprag_core.pipeline;"
        "bad=[m for m in ('torch','transformers','langchain_core','llama_index.core','pytest')"
        " if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("epsilon", "delta", "name"),
    [
        (-1, 0, "epsilon"),
        (float("nan"), 0, "epsilon"),
        (float("inf"), 0, "epsilon"),
        (1, 1, "delta"),
        (1, -0.1, "delta"),
        (1, float("nan"), "delta"),
    ],
)
def test_budget_rejects_bad_values(epsilon: float, delta: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Budget(epsilon, delta)


def test_a_zero_budget_is_what_is_left_never_a_total_or_a_cost() -> None:
    """Budget(0) is an exhausted budget's remaining; every total, cost and target refuses it."""
    assert Budget(0.0).epsilon == 0.0 and not Budget(0.0).covers(Budget(1e-12))
    acc = InMemoryCorpusAccountant(Budget(1.0))
    acc.charge(Budget(1.0))
    assert acc.remaining == Budget(0.0, 0.0)
    with pytest.raises(ValueError, match=r"cost\.epsilon must be > 0"):
        acc.charge(Budget(0.0))
    with pytest.raises(ValueError, match=r"total\.epsilon must be > 0"):
        per_token_epsilon(Budget(0.0), 4)


def test_budget_adds_and_covers() -> None:
    total = Budget(1.0, 1e-6) + Budget(0.5, 1e-6)
    assert total == Budget(1.5, 2e-6)
    assert total.covers(Budget(1.5, 2e-6))
    assert not total.covers(Budget(1.6, 0))


def test_dpanswer_epsilon_of_baselines() -> None:
    assert DPAnswer("x", None, "NonRAG", uses_corpus=False).epsilon == 0.0
    assert DPAnswer("x", None, "RAG").epsilon == float("inf")
    assert DPAnswer("x", Budget(2.0), "DPSparseVote").epsilon == 2.0


def test_document_repr_hides_text() -> None:
    doc = ScoredDocument(id="d1", text="SECRET-CANARY-123", score=0.5)
    assert "SECRET" not in repr(doc)
    assert doc.unit == "d1"


def test_accountant_refuses_overspend_and_records_nothing() -> None:
    acc = InMemoryCorpusAccountant(Budget(1.0, 1e-6))
    acc.charge(Budget(0.6, 5e-7))
    with pytest.raises(PrivacyBudgetExhausted):
        acc.charge(Budget(0.6))
    assert acc.spent_epsilon == pytest.approx(0.6)
    assert acc.queries == 1


def test_accountant_is_thread_safe() -> None:
    acc = InMemoryCorpusAccountant(Budget(10.0))
    granted = []

    def worker() -> None:
        for _ in range(200):
            try:
                acc.charge(Budget(0.01))
                granted.append(1)
            except PrivacyBudgetExhausted:
                pass

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 1000
    assert acc.spent_epsilon <= 10.0 + 1e-9


def test_retrieve_above_grows_k() -> None:
    docs = [ScoredDocument(id=str(i), text="", score=1 - i / 1000) for i in range(1000)]
    calls: list[int] = []

    def retriever(question: str, k: int) -> list[ScoredDocument]:
        calls.append(k)
        return docs[:k]

    found = retrieve_above(retriever, "q", 0.8995, initial_k=8)
    assert [d.id for d in found] == [d.id for d in docs if d.score > 0.8995]
    assert calls == [8, 16, 32, 64, 128]


def test_reserved_padding_prefix_is_refused_for_real_documents() -> None:
    with pytest.raises(ValueError, match="id"):
        ScoredDocument(id="__dprag_padding__7", text="a real record", score=0.3)
    assert ScoredDocument.padding(7).is_padding
