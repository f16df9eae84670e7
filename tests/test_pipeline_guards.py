"""PrivateRAG in a deployment: a budget always on, checks before the charge, errors data-free.

Each test below failed on the code before issue 14: a DP app ran without any
budget, ``rng='seed'`` / a lone surrogate / a long question failed only after
the charge, non-document retriever results and surrogates in documents made a
charged query fail, and the core loop passed a retriever's or a model's
exception (message and frames) through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fake_token_model import FakeTokenModel
from private_frames import reachable_text
from toy_mechanisms import ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.accounting.stores.errors import (
    LedgerOutcomeUnknown,
    LedgerUnavailable,
    QueryIdReused,
)
from dprag_core.algorithms.base import PublicModel
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PRIVATE_FAILURE, PrivateDataError, reveal_private_errors
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

SECRET = "qx81canary-lorenzo"
DOCS = [ScoredDocument(f"d{i}", f"record {i}: code {SECRET}", 0.9 - i / 10) for i in range(4)]


@HonoursK
def retriever(question: str, k: int) -> list[Any]:
    return list(DOCS[:k])


def acc() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(100.0, 0.5))


class Seen(ToyMechanism):
    """Records the documents it is given."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        self.docs = list(docs)
        return super().answer(question, docs, rng=rng)


def _over_byte_tokens(mechanism: Seen) -> Seen:
    """``mechanism`` stating a TokenModel whose tokens are bytes (its questions are counted so)."""
    model = FakeTokenModel([("", "ab")])
    mechanism.public_model = lambda: PublicModel(model, "{question}", 4)  # type: ignore[method-assign]
    return mechanism


class Failing(ToyMechanism):
    """Fails quoting its documents, holding them in its frame."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        prompts = [f"Context: {d.text}" for d in docs]
        raise ValueError(f"model rejected {prompts}")


def test_a_dp_mechanism_needs_a_budget() -> None:
    with pytest.raises(ValueError, match=r'SQLiteCorpusAccountant\(name="<corpus>"'):
        PrivateRAG(ToyMechanism(), retriever)
    with pytest.raises(TypeError, match="accountant must be a CorpusAccountant, got Budget"):
        PrivateRAG(ToyMechanism(), retriever, accountant=Budget(5.0))  # type: ignore[arg-type]
    # not DP: no budget needed (its answers carry epsilon = inf)
    model = FakeTokenModel([("", "ab")])
    assert PrivateRAG(NonRAG(model, max_new_tokens=2), retriever).answer("Who?").text


@pytest.mark.parametrize(
    ("question", "rng", "error"),
    [
        ("Who?", "seed", TypeError),
        ("Who" + chr(0xD800) + "?", None, ValueError),
        ("Who? " * 400, None, ValueError),
    ],
    ids=["rng", "surrogate", "long"],
)
def test_checks_come_before_the_charge(question: str, rng: Any, error: type) -> None:
    budget = acc()
    mechanism = _over_byte_tokens(Seen())
    app = PrivateRAG(mechanism, retriever, accountant=budget, max_question_tokens=256)
    with pytest.raises(error):
        app.answer(question, rng=rng)
    with pytest.raises(error):
        list(app.stream(question, rng=rng))
    assert budget.queries == 0


def test_max_question_tokens_counts_model_tokens() -> None:
    mechanism = _over_byte_tokens(Seen())
    app = PrivateRAG(mechanism, retriever, accountant=acc(), max_question_tokens=8)
    assert app.answer("12345678").text
    with pytest.raises(ValueError, match="9 tokens long, more than max_question_tokens=8"):
        app.answer("123456789")
    with pytest.raises(ValueError, match="max_question_tokens must be an integer >= 1"):
        PrivateRAG(mechanism, retriever, accountant=acc(), max_question_tokens=0)


def test_retrieved_junk_and_surrogates_are_treated_alike() -> None:
    """After the charge nothing data-dependent may fail: junk skipped, surrogates replaced."""

    @HonoursK
    def messy(question: str, k: int) -> list[Any]:
        bad = ScoredDocument("s", "bad " + chr(0xDC00) + " text", 0.95)
        return [bad, "not a document", None, *DOCS[: k - 3]]

    mechanism = Seen(k=4)
    PrivateRAG(mechanism, messy, accountant=acc()).answer("Who?")
    # junk keeps its rank slot as a placeholder (so "fewer than k" still means exhausted)
    assert [d.id for d in mechanism.docs if not d.is_padding] == ["s", "d0", "d1", "d2"]
    assert mechanism.docs[0].text == "bad \ufffd text"


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_failures_leave_nothing_private(mode: str) -> None:
    @HonoursK
    def failing_retriever(question: str, k: int) -> list[Any]:
        docs = list(DOCS)
        raise RuntimeError(f"store error on {docs[0].text}")

    for app in (
        PrivateRAG(Failing(), retriever, accountant=acc()),
        PrivateRAG(ToyMechanism(), failing_retriever, accountant=acc()),
    ):
        with pytest.raises(PrivateDataError) as info:
            app.answer("Who?") if mode == "answer" else list(app.stream("Who?"))
        assert info.value.__cause__ is None and info.value.__context__ is None
        seen = reachable_text(info.value)
        assert SECRET not in seen and "ScoredDocument(" not in seen


def test_the_detector_sees_the_original_error() -> None:
    """Positive control, and the data owner's debug switch: the original error, unchanged."""
    app = PrivateRAG(Failing(), retriever, accountant=acc())
    with reveal_private_errors(), pytest.raises(ValueError) as info:
        app.answer("Who?")
    assert SECRET in str(info.value) and SECRET in reachable_text(info.value)
    with pytest.raises(PrivateDataError):  # off again outside the block
        app.answer("Who?")


def test_a_mechanism_asking_for_nothing_is_refused_when_built() -> None:
    """Neither a count nor a min_score: refused before any charge, not at query time."""

    class Nothing(ToyMechanism):
        def candidates_needed(self) -> int | None:
            return None

    accountant = acc()
    with pytest.raises(ValueError, match="neither a candidate count nor a min_score"):
        PrivateRAG(Nothing(), retriever, accountant=accountant)
    assert accountant.spent_epsilon == 0


class _ForeignPublic(RuntimeError):
    """Another library's error that declares the attribute dprag's store errors once used."""

    public_message = True


class _Raising(ToyMechanism):
    """Raises ``error(docs)``: an error built from the documents it was given."""

    def __init__(self, error: Callable[[Sequence[ScoredDocument]], Exception]) -> None:
        super().__init__()
        self.error = error

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        raise self.error(docs)


@pytest.mark.parametrize(
    "kind",
    [LedgerUnavailable, LedgerOutcomeUnknown, QueryIdReused, PrivacyBudgetExhausted,
     _ForeignPublic, KeyError],
    ids=lambda kind: kind.__name__,
)  # fmt: skip
def test_nothing_raised_inside_leaves_as_itself(kind: type[Exception]) -> None:
    """Issue 36 case 5: errors are public by where they are raised, never by their class.

    On the code before, dprag's own store errors and ``PrivacyBudgetExhausted``
    left a private section as themselves, message included.
    """
    raising = _Raising(lambda docs: kind(f"store error on {docs[0].text}"))
    with pytest.raises(PrivateDataError) as info:
        PrivateRAG(raising, retriever, accountant=acc()).answer("Who?")
    assert type(info.value) is PrivateDataError and str(info.value) == PRIVATE_FAILURE
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert SECRET not in reachable_text(info.value) and kind.__name__ not in str(info.value)
