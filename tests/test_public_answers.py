"""What every answer says publicly: its stop reason, its event payloads, the public fallback.

Every mechanism ends with a ``details["stop_reason"]`` from the public
vocabulary; an empty answer is ``""``; the event payloads carry only the
listed public fields; and the opt-in public fallback answers an empty DP
answer from the question alone (the canary below shows it never sees a
document, while the voters of the same query did).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fake_token_model import FakeTokenModel
from toy_mechanisms import ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import DPICL, DPKSA, KSA, RAG, DPSparseVote, DPVote, NonRAG, VoteRAG
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.murag import MuRAG
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.events import END_FIELDS, START_FIELDS, end_payload, start_payload
from dprag_core.fallback import check_public_fallback, public_answerer
from dprag_core.prompts import NO_CONTEXT_TEMPLATE
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import STOP_REASONS

SECRET = "zq93canary-ottoline"
QUESTION = "What?"


class Text:
    """A text model answering every prompt with the same words."""

    def __init__(self, answer: str = "alpha beta") -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.prompts.extend(prompts)
        return [self.answer] * len(prompts)


def _docs(n: int, text: str = "doc") -> list[ScoredDocument]:
    return [ScoredDocument(f"d{i}", f"{text} {i}", 1.0 - i / (2 * n)) for i in range(n)]


VOTING: dict[str, Any] = {
    "m": 4,
    "k": 1,
    "epsilon": 10.0,
    "delta": 1e-4,
    "epsilon_token": 1.0,
    "max_new_tokens": 4,
}
BUILDERS: dict[str, Callable[[], Mechanism]] = {
    "DPVote": lambda: DPVote(FakeTokenModel([("", "ab")]), **VOTING),
    "DPSparseVote": lambda: DPSparseVote(FakeTokenModel([("", "ab")]), **VOTING),
    "VoteRAG": lambda: VoteRAG(FakeTokenModel([("", "ab")]), m=2, k=1, max_new_tokens=4),
    "NonRAG-token": lambda: NonRAG(FakeTokenModel([("", "ab")]), max_new_tokens=1),
    "NonRAG-text": lambda: NonRAG(Text()),
    "RAG": lambda: RAG(Text(), k=2),
    "DPICL": lambda: DPICL(FakeTokenModel([("", "ab")]), epsilon=5.0, max_new_tokens=3),
    "DPKSA": lambda: DPKSA(Text(), epsilon=5.0, n_docs=8),
    "KSA": lambda: KSA(Text(), n_docs=8),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_every_mechanism_states_a_public_stop_reason(name: str) -> None:
    mechanism = BUILDERS[name]()
    answer = mechanism.answer(QUESTION, _docs(8), rng=0)
    assert answer.details["stop_reason"] in STOP_REASONS
    assert isinstance(answer.text, str)
    streamed = list(mechanism.stream(QUESTION, _docs(8), rng=0))
    assert isinstance(streamed[-1], DPAnswer)
    assert streamed[-1].details["stop_reason"] in STOP_REASONS


def test_stop_reasons_name_how_the_release_ended() -> None:
    assert BUILDERS["NonRAG-token"]().answer(QUESTION, []).details["stop_reason"] == "max_tokens"
    eos = NonRAG(FakeTokenModel([("", "ab")]), max_new_tokens=5).answer(QUESTION, [])
    assert (eos.text, eos.details["stop_reason"]) == ("ab", "eos")
    assert BUILDERS["RAG"]().answer(QUESTION, _docs(2)).details["stop_reason"] == "text_model"
    icl = BUILDERS["DPICL"]().answer(QUESTION, _docs(4), rng=0)
    assert icl.details["private_tokens"] == icl.details["tokens"]


def test_an_empty_answer_is_the_empty_string() -> None:
    assert DPAnswer(None, Budget(1.0), "X").text == ""  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str, got int"):
        DPAnswer(3, Budget(1.0), "X")  # type: ignore[arg-type]


def test_end_payload_carries_only_the_listed_public_fields() -> None:
    answer = DPAnswer(
        "aspirin",
        Budget(2.0, 1e-6),
        "DPSparseVote",
        {
            "stop_reason": "eos",
            "private_tokens": 3,
            "voter_counts": [SECRET],
            "prefill_seconds": 0.25,
        },
    )
    payload = end_payload(answer)
    assert tuple(payload) == END_FIELDS
    assert payload["epsilon"] == 2.0 and payload["delta"] == 1e-6
    assert payload["private_tokens"] == 3 and payload["public_fallback"] is False
    assert SECRET not in repr(payload) and "prefill_seconds" not in payload
    # a stop reason outside the vocabulary (or a non-count) is not passed on
    odd = DPAnswer("", None, "X", {"stop_reason": SECRET, "private_tokens": "7"})
    assert end_payload(odd)["stop_reason"] is None and end_payload(odd)["private_tokens"] is None


def test_start_payload_is_the_charged_cost() -> None:
    mechanism = BUILDERS["DPSparseVote"]()
    payload = start_payload(mechanism)
    assert tuple(payload) == START_FIELDS
    cost = mechanism.query_cost()
    assert cost is not None and (payload["epsilon"], payload["delta"]) == (
        cost.epsilon,
        cost.delta,
    )


# -- the public fallback ---------------------------------------------------------


def _disagreeing() -> tuple[FakeTokenModel, DPVote, list[ScoredDocument]]:
    """Every voter votes a different token, so ⊥ is released first; the public row says 'Paris'."""
    rules = [(f"tok{i} ", chr(ord("a") + i) * 5) for i in range(8)] + [("Question:", "Paris")]
    fake = FakeTokenModel(rules)
    docs = [ScoredDocument(f"d{i}", f"tok{i} {SECRET}", 1.0 - i / 10) for i in range(8)]
    mech = DPVote(fake, m=8, k=1, epsilon=10.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=8)
    return fake, mech, docs


def _rag(mech: Mechanism, docs: list[ScoredDocument], **options: Any) -> PrivateRAG:
    source = HonoursK(lambda q, k: docs[:k])
    accountant = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    return PrivateRAG(mech, source, accountant=accountant, **options)


def test_without_the_option_an_empty_dp_answer_stays_empty() -> None:
    _, mech, docs = _disagreeing()
    answer = _rag(mech, docs).answer(QUESTION, rng=3)
    assert answer.text == "" and answer.details["stop_reason"] == "null_token"
    assert "public_fallback" not in answer.details


def test_public_fallback_answers_from_the_question_alone() -> None:
    fake, mech, docs = _disagreeing()
    rag = _rag(mech, docs, public_fallback=True)
    answer = rag.answer(QUESTION, rng=3)
    assert answer.text == "Paris"
    assert answer.details["public_fallback"] is True
    assert answer.details["stop_reason"] == "null_token"  # why the DP answer was empty
    assert answer.guarantee == mech.query_cost()
    assert rag.accountant is not None and rag.accountant.spent_epsilon == answer.epsilon
    assert end_payload(answer)["public_fallback"] is True
    # canary: the voters saw the secret; the fallback's one prompt is the question alone
    voters, public = fake.prompts
    assert sum(SECRET in p for p in voters) == 8
    assert public == [NO_CONTEXT_TEMPLATE.format(question=QUESTION)]
    assert SECRET not in repr(public)


def test_public_fallback_streams_the_public_answer() -> None:
    _, mech, docs = _disagreeing()
    items = list(_rag(mech, docs, public_fallback=True).stream(QUESTION, rng=3))
    final = items[-1]
    assert isinstance(final, DPAnswer) and final.details["public_fallback"] is True
    assert "".join(i for i in items if isinstance(i, str)) == final.text == "Paris"


def test_public_fallback_is_not_taken_when_the_dp_answer_has_text() -> None:
    fake = FakeTokenModel([("", "ok")])
    mech = DPVote(fake, **{**VOTING, "m": 30, "epsilon_token": 2.0})
    answer = _rag(mech, _docs(30), public_fallback=True).answer(QUESTION, rng=0)
    assert answer.text == "ok" and "public_fallback" not in answer.details
    assert len(fake.prompts) == 1  # no second (public) session


def test_a_given_nonrag_is_the_fallback() -> None:
    _, mech, docs = _disagreeing()
    other = Text("Lyon")
    answer = _rag(mech, docs, public_fallback=NonRAG(other)).answer(QUESTION, rng=3)
    assert answer.text == "Lyon" and other.prompts == [
        NO_CONTEXT_TEMPLATE.format(question=QUESTION)
    ]


def test_public_fallback_is_checked_when_the_app_is_built() -> None:
    _, mech, docs = _disagreeing()
    with pytest.raises(TypeError, match="public_fallback must be True, False or a NonRAG"):
        _rag(mech, docs, public_fallback=RAG(Text(), k=1))
    with pytest.raises(ValueError, match=r"pass public_fallback=NonRAG\(model\)"):
        _rag(ToyMechanism(), docs, public_fallback=True)
    assert check_public_fallback(False, mech) is None


TEMPLATE = "Q: {question}\nA:"


def _sparse_vote(model: Any) -> DPSparseVote:
    pure = {**VOTING, "delta": 0.0, "selection": "exponential", "max_new_tokens": 7}
    return DPSparseVote(model, **pure, public_template=TEMPLATE)


def _murag(model: Any) -> Mechanism:
    ledger = InMemoryLedger(budget_per_unit=20.0)
    return MuRAG(_sparse_vote(model), ledger=ledger, tau=0.5, epsilon_query=10.0)


PUBLIC_MODELS: dict[str, tuple[Callable[[Any], Mechanism], int]] = {
    "DPICL": (lambda m: DPICL(m, epsilon=5.0, max_new_tokens=3, public_template=TEMPLATE), 3),
    "DPKSA": (lambda m: DPKSA(m, epsilon=5.0, zero_shot_template=TEMPLATE, answer_tokens=9), 9),
    "DPSparseVote": (_sparse_vote, 7),
    "MuRAG(DPSparseVote)": (_murag, 7),
}


@pytest.mark.parametrize("name", PUBLIC_MODELS)
def test_each_mechanism_states_its_public_model_and_length(name: str) -> None:
    build, length = PUBLIC_MODELS[name]
    model = Text() if name == "DPKSA" else FakeTokenModel([])
    mechanism = build(model)
    answerer = public_answerer(mechanism)
    own = getattr(answerer.model, "inner", answerer.model)  # a text model: in its envelope
    assert own is model and answerer.template == TEMPLATE
    assert answerer.max_new_tokens == length  # DP-ICL's own length (was 64)
    stated = mechanism.public_model()
    assert stated is not None and stated.model is answerer.model
    assert ToyMechanism().public_model() is None
