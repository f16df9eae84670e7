"""DPICL end to end on the scripted fake TokenModel and on a tiny HF model."""

from __future__ import annotations

from typing import Any

import pytest
from fake_token_model import FakeTokenModel

from dprag_core import (
    Budget,
    DPAnswer,
    InMemoryCorpusAccountant,
    PrivacyBudgetExhausted,
    PrivateRAG,
)
from dprag_core.algorithms.icl import DPICL
from dprag_core.prompts import NO_CONTEXT_TEMPLATE
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

QUESTION = "Which drug treats Flumplenaxism?"


def _docs(
    n: int, text: str = "Flumplenaxism is treated with Gleeblorazine."
) -> list[ScoredDocument]:
    return [ScoredDocument(id=f"d{i}", text=text, score=0.9 - i / 1000) for i in range(n)]


def _model() -> FakeTokenModel:
    return FakeTokenModel([("Gleeblorazine", "Gleeb"), ("", "xy")])


def test_consensus_answer_one_session_and_eos() -> None:
    model = _model()
    mech = DPICL(model, epsilon=200.0, delta=1e-6, max_new_tokens=8, bounds=(0.0, 1.0), k=30)
    result = mech.answer(QUESTION, _docs(30), rng=0)
    assert result.text == "Gleeb"
    assert len(model.sessions) == 1  # ONE session holding every row
    rows = model.prompts[0]
    assert rows[-1] == NO_CONTEXT_TEMPLATE.format(question=QUESTION)
    assert 20 <= len(rows) - 1 <= 40
    assert model.steps == 5  # one step per released token; EOS ends generation
    assert result.details == {
        "tokens": 5,
        "max_new_tokens": 8,
        "stopped_at_eos": True,
        "private_tokens": 5,
        "stop_reason": "eos",
        "answer_source": "documents",
    }
    assert result.guarantee == mech.query_cost()  # all 8 tokens charged despite EOS at 6


def test_stream_yields_tokens_then_answer() -> None:
    mech = DPICL(_model(), epsilon=200.0, max_new_tokens=8, bounds=(0.0, 1.0), k=30)
    items = list(mech.stream(QUESTION, _docs(30), rng=1))
    *chunks, last = items
    assert isinstance(last, DPAnswer) and all(isinstance(c, str) for c in chunks)
    assert len(chunks) == 5 and "".join(chunks) == last.text  # type: ignore[arg-type]


def test_empty_selection_is_public_only() -> None:
    model = _model()
    mech = DPICL(model, epsilon=4.0, max_new_tokens=3, bounds=(0.0, 1.0), k=2)
    result = mech.answer(QUESTION, [], rng=2)
    assert model.prompts == [[NO_CONTEXT_TEMPLATE.format(question=QUESTION)]]
    assert result.guarantee == mech.query_cost()
    assert "Gleeb" not in result.text


def test_one_row_per_privacy_unit() -> None:
    docs = [
        ScoredDocument(id="a1", text="Gleeblorazine part one", score=0.9, unit="alice"),
        ScoredDocument(id="a2", text="part two", score=0.8, unit="alice"),
        ScoredDocument(id="b1", text="Gleeblorazine", score=0.85, unit="bob"),
    ]
    model = _model()
    DPICL(model, epsilon=500.0, max_new_tokens=2, bounds=(0.0, 1.0), k=2).answer(
        QUESTION, docs, rng=3
    )
    rows = model.prompts[0]
    assert len(rows) == 3 and "Gleeblorazine part one\npart two" in rows[0]


def test_theta_default_is_public_prior_at_temperature_one() -> None:
    mech = DPICL(_model(), epsilon=2.0, max_new_tokens=4, clip=0.5)
    assert mech.theta == pytest.approx(2 * 0.5 / mech.parameters.epsilon_token)
    assert DPICL(_model(), epsilon=2.0, theta=3.0).theta == 3.0


def test_retrieval_contract_and_cost() -> None:
    mech = DPICL(_model(), epsilon=3.0, delta=1e-5, max_new_tokens=16, bounds=(0.2, 1.0))
    assert mech.candidates_needed() is None and mech.min_score() == 0.2
    cost = mech.query_cost()
    assert cost.epsilon <= 3.0 and cost.delta <= 1e-5
    assert mech.parameters.selection_epsilon == pytest.approx(0.3)
    assert "Gleeb" not in repr(mech)


def test_pipeline_retrieves_above_lower_bound_and_refuses_overspend() -> None:
    docs = [*_docs(10), ScoredDocument(id="low", text="Gleeblorazine", score=0.1)]
    asked: list[int] = []

    def retriever(question: str, k: int) -> list[ScoredDocument]:
        asked.append(k)
        return docs[:k]

    model = _model()
    mech = DPICL(model, epsilon=2.0, max_new_tokens=4, bounds=(0.5, 1.0), k=5)
    rag = PrivateRAG(
        mech, HonoursK(retriever), accountant=InMemoryCorpusAccountant(Budget(3.0, 1e-5))
    )
    rag.answer(QUESTION, rng=4)
    assert asked == [32]  # retrieve_above from the public lower bound (store exhausted)
    assert len(model.prompts[0]) <= 11  # the 0.1 document is below the public bound
    with pytest.raises(PrivacyBudgetExhausted):
        rag.answer(QUESTION, rng=5)
    assert len(model.sessions) == 1


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        DPICL(_model(), epsilon=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        DPICL(_model(), epsilon=1.0, max_new_tokens=0)
    with pytest.raises(ValueError, match="selection_share"):
        DPICL(_model(), epsilon=1.0, selection_share=1.0)
    with pytest.raises(ValueError, match="clip"):
        DPICL(_model(), epsilon=1.0, clip=-1.0)
    with pytest.raises(ValueError, match="bounds"):
        DPICL(_model(), epsilon=1.0, bounds=(1.0, 0.0))
    with pytest.raises(TypeError, match="TokenModel"):
        DPICL(object(), epsilon=1.0)  # type: ignore[arg-type]


def test_tiny_hf_model_end_to_end(tiny_token_model: Any) -> None:
    docs = [
        ScoredDocument(id=f"d{i}", text="Alice Martin was treated with aspirin.", score=0.8)
        for i in range(3)
    ]
    mech = DPICL(tiny_token_model, epsilon=8.0, max_new_tokens=4, bounds=(0.0, 1.0), k=3)
    items = list(mech.stream("Which treatment did Alice Martin receive?", docs, rng=0))
    result = items[-1]
    assert isinstance(result, DPAnswer) and isinstance(result.text, str)
    assert result.details["tokens"] <= 4 and result.guarantee == mech.query_cost()
