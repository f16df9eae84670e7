"""NonRAG, RAG, VoteRAG: prompts, non-private answers, streaming, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from fake_token_model import FakeTokenModel

from dprag_core import Budget, InMemoryCorpusAccountant, PrivateRAG
from dprag_core.algorithms import RAG, NonRAG, VoteRAG
from dprag_core.retrieval import ScoredDocument


def _docs(n: int) -> list[ScoredDocument]:
    return [ScoredDocument(id=f"d{i}", text=f"fact {i}", score=1.0 - i / 10) for i in range(n)]


def test_nonrag_uses_no_documents() -> None:
    fake = FakeTokenModel([("Context", "from docs"), ("", "from memory")])
    mech = NonRAG(fake)
    answer = mech.answer("Who?", _docs(3))
    assert answer.text == "from memory"
    assert answer.guarantee is None and not answer.uses_corpus and answer.epsilon == 0.0
    assert mech.candidates_needed() == 0 and mech.query_cost() is None
    assert fake.prompts == [["Question: Who?\nAnswer:"]]


def test_rag_puts_top_k_in_context() -> None:
    fake = FakeTokenModel([("fact 0", "yes")])
    mech = RAG(fake, k=2)
    answer = mech.answer("Who?", _docs(5))
    assert answer.text == "yes" and answer.guarantee is None and answer.epsilon == float("inf")
    (prompt,) = fake.prompts[0]
    assert "fact 0" in prompt and "fact 1" in prompt and "fact 2" not in prompt
    assert mech.candidates_needed() == 2


def test_vote_rag_majority() -> None:
    docs = [
        ScoredDocument(id=f"d{i}", text="alpha" if i < 3 else "beta", score=1.0) for i in range(5)
    ]
    fake = FakeTokenModel([("alpha", "AAA"), ("beta", "BBB")])
    answer = VoteRAG(fake, m=5, k=1).answer("Which?", docs, rng=0)
    assert answer.text == "AAA"
    assert answer.guarantee is None and answer.details["private_tokens"] == 0
    assert len(fake.prompts[0]) == 5  # no public row


def test_streaming_baselines_join_to_answer() -> None:
    fake = FakeTokenModel([("", "naïve 😀")])
    items = list(NonRAG(fake).stream("Who?", []))
    assert "".join(i for i in items[:-1] if isinstance(i, str)) == items[-1].text == "naïve 😀"


def test_text_model_backend(tiny_text_model: Any) -> None:
    a = RAG(tiny_text_model, k=1, max_new_tokens=4).answer("Who?", _docs(2))
    expected = tiny_text_model.generate(
        ["Context:\nfact 0\n\nQuestion: Who?\nAnswer:"], max_new_tokens=4
    )
    assert a.text == expected[0]


def test_vote_rag_one_voter_equals_rag(tiny_token_model: Any) -> None:
    docs = _docs(1)
    vote = VoteRAG(tiny_token_model, m=1, k=1, max_new_tokens=5).answer("Who?", docs, rng=0)
    rag = RAG(tiny_token_model, k=1, max_new_tokens=5).answer("Who?", docs)
    assert vote.text == rag.text


def test_pipeline_runs_baselines_without_charging() -> None:
    fake = FakeTokenModel([("", "ok")])
    acc = InMemoryCorpusAccountant(total=Budget(1.0))
    rag = PrivateRAG(NonRAG(fake), lambda q, k: _docs(k), accountant=acc)
    assert rag.answer("Who?").text == "ok"
    assert acc.spent_epsilon == 0.0


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda m: RAG(m, k=0), ValueError, "k must be an integer >= 1"),
        (lambda m: VoteRAG(m, m=0, k=1), ValueError, "m must be an integer >= 1"),
        (lambda m: NonRAG(m, max_new_tokens=0), ValueError, "max_new_tokens"),
        (lambda m: NonRAG(m, template="{context}"), ValueError, "template must only use"),
        (lambda m: NonRAG(object()), TypeError, "TokenModel or a TextModel"),
        (lambda m: VoteRAG(object(), m=1, k=1), TypeError, "TokenModel"),
    ],
)
def test_bad_input(build: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build(FakeTokenModel([]))


def test_bad_question() -> None:
    with pytest.raises(ValueError, match="question"):
        NonRAG(FakeTokenModel([])).answer("", [])
