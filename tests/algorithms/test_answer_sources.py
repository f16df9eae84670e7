"""Every mechanism says where its answer came from: ``details["answer_source"]``.

``documents`` when some released text was decided from the retrieved records,
``model`` when all of it came from the model alone (a public prediction, a
zero-shot answer, the public fallback, NonRAG), ``none`` when the answer is empty
(dprag_core.answers.answer_source). The scripted token model makes each case
certain: the voters read "Context" and answer one thing, the public prompt
another (or the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fake_token_model import FakeTokenModel

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import (
    DPICL,
    DPKSA,
    KSA,
    RAG,
    DPSparseVote,
    DPVote,
    MuRAG,
    NonRAG,
    VoteRAG,
)
from dprag_core.budget import Budget
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import shown_text

DOCS = [ScoredDocument(f"d{i}", "aspirin", 0.9 - i / 100, unit=f"u{i}") for i in range(8)]
VOTERS = {"m": 8, "k": 1, "max_new_tokens": 12}


def agreeing(public: str) -> FakeTokenModel:
    """Voters (prompts with "Context") answer "aspirin"; the public prompt ``public``."""
    return FakeTokenModel([("Context", "aspirin"), ("", public)])


def source(mechanism: Any, docs: Sequence[ScoredDocument] = DOCS) -> tuple[str, str]:
    answer = mechanism.answer("Which drug?", docs, rng=0)
    return answer.text, answer.details["answer_source"]


@pytest.mark.parametrize("unit", ["token", "word"])
def test_sparse_vote_free_text_is_the_models(unit: str) -> None:
    """The public prediction agrees with the voters: every token free, zero private words:
    the text is the model's own (it would have said it without the records)."""
    mech = DPSparseVote(
        agreeing("aspirin"), epsilon=50.0, delta=1e-4, epsilon_token=10.0, unit=unit, **VOTERS
    )
    answer = mech.answer("Which drug?", DOCS, rng=0)
    assert answer.details["private_tokens"] == 0
    assert (answer.text, answer.details["answer_source"]) == ("aspirin", "model")
    assert shown_text(answer.text, answer.details).endswith(
        "(from the model alone, not the records)"
    )


@pytest.mark.parametrize("unit", ["token", "word"])
def test_sparse_vote_private_text_is_the_documents(unit: str) -> None:
    mech = DPSparseVote(
        agreeing("ibuprofen"), epsilon=400.0, delta=1e-4, epsilon_token=40.0, unit=unit, **VOTERS
    )
    answer = mech.answer("Which drug?", DOCS, rng=0)
    assert answer.details["private_tokens"] > 0
    assert (answer.text[:3], answer.details["answer_source"]) == ("asp", "documents")


def test_a_private_stop_after_free_text_is_still_the_models() -> None:
    """Free frame, then a private decision that releases ⊥ (no text): the words are the
    model's; the private decision released none of them."""
    model = FakeTokenModel([("Context", "the x"), ("", "the y")])
    # SVT at ε_token/2 = 4 lets "the" (8 votes, threshold 4) through and stops at " y" (0);
    # LimitedDomain's bar at δ = 1e-12 (about 16 votes) is far above " x"'s 8: ⊥
    mech = DPSparseVote(model, epsilon=8.0, delta=1e-12, epsilon_token=8.0, unit="word", **VOTERS)
    answer = mech.answer("Which drug?", DOCS, rng=0)
    assert answer.text == "the" and answer.details["private_tokens"] >= 1
    assert answer.details["answer_source"] == "model"


def test_vote_and_baselines() -> None:
    model = agreeing("ibuprofen")
    vote = DPVote(model, epsilon=400.0, delta=1e-4, epsilon_token=40.0, **VOTERS)
    assert source(vote)[1] == "documents"
    assert source(VoteRAG(model, **VOTERS))[1] == "documents"
    assert source(RAG(model, k=2, max_new_tokens=12)) == ("aspirin", "documents")
    assert source(NonRAG(model, max_new_tokens=12), []) == ("ibuprofen", "model")
    silent = DPVote(model, epsilon=0.5, delta=1e-4, epsilon_token=0.5, **VOTERS)
    assert source(silent) == ("", "none")


def test_dp_icl_tokens_are_decided_over_the_documents() -> None:
    mech = DPICL(agreeing("ibuprofen"), epsilon=400.0, delta=1e-4, max_new_tokens=3)
    text, where = source(mech)
    assert where == ("documents" if text.strip() else "none")


class Keywords:
    """A text model: responses name "aspirin"; the final answer repeats its prompt's last line."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return ["It is aspirin." if "Context" in p else p.strip().splitlines()[0] for p in prompts]


def test_keyword_answers() -> None:
    docs = [ScoredDocument(f"d{i}", "aspirin", 0.9, unit=f"u{i}") for i in range(40)]
    passed = DPKSA(Keywords(), epsilon=20.0, n_docs=40).answer("Which drug?", docs, rng=0)
    assert passed.details["ptr_passed"] and passed.details["answer_source"] == "documents"
    failed = DPKSA(Keywords(), epsilon=0.1, n_docs=40).answer("Which drug?", docs[:2], rng=0)
    assert not failed.details["ptr_passed"] and failed.details["answer_source"] == "model"
    assert KSA(Keywords(), n_docs=40).answer("Which drug?", docs).details["answer_source"] == (
        "documents"
    )


def test_murag_carries_its_inner_source_and_the_fallback_is_the_models() -> None:
    inner = DPSparseVote(
        agreeing("ibuprofen"),
        epsilon=50.0,
        delta=0.0,
        epsilon_token=10.0,
        selection="exponential",
        **VOTERS,
    )
    murag = MuRAG(inner, ledger=InMemoryLedger(budget_per_unit=100.0), tau=-0.5, epsilon_query=50.0)
    answer = murag.answer("Which drug?", DOCS, rng=0)
    assert (
        answer.details["answer_source"]
        == inner.answer("Which drug?", DOCS, rng=0).details["answer_source"]
    )
    silent = DPVote(agreeing("paris"), epsilon=0.5, delta=1e-4, epsilon_token=0.5, **VOTERS)
    app = PrivateRAG(
        silent,
        HonoursK(lambda question, k: DOCS[:k]),
        accountant=InMemoryCorpusAccountant(Budget(10.0, 1e-3)),
        public_fallback=True,
    )
    answer = app.answer("Capital?", rng=0)
    assert (answer.text, answer.details["public_fallback"]) == ("paris", True)
    assert answer.details["answer_source"] == "model"
