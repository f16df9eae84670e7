"""The mechanism contract (dprag_core.algorithms.contract), over the shared table.

Every concrete mechanism of dprag_core has a case in tests/mechanism_table.py,
and each case runs through the kit's contract suite
(:class:`dprag_core.testing.mechanisms.MechanismContract`, one ``TestContract<name>``
class per case): the conformance helper on the tiny models, its claim in its
docstring, the charge before retrieval, a misspelt keyword and a malformed
template refused when built. Mutation tests: the helper fails on each broken variant.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from mechanism_table import CASES, Case, Models, dprag_cases, mechanism_classes
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import NonRAG
from dprag_core.algorithms.base import DetailKind, Mechanism, MechanismWrapper, PublicModel
from dprag_core.algorithms.contract import (
    PUBLIC_DETAILS,
    check_answer,
    check_mechanism,
    conformance,
)
from dprag_core.answers import ANSWER_SOURCES, DPAnswer
from dprag_core.budget import Budget
from dprag_core.events import END_FIELDS
from dprag_core.mechanisms.rng import RngLike
from dprag_core.mechanisms.sparse_vector import AboveThreshold, AboveThresholdBatch
from dprag_core.mechanisms.sparse_vote import SparseVoteRule
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval import DPThreshold
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.testing.mechanisms import MechanismContract

QUESTION = "Which treatment did Alice Martin receive?"
DOCS = [
    ScoredDocument(f"d{i}", f"Patient {i % 5} was treated with aspirin.", 0.9 - i / 10, f"u{i % 5}")
    for i in range(12)
]
MALFORMED = "Notes: {ctx}\nQ: {question}"  # issue 28: accepted when built, failed after the charge


@pytest.fixture
def models(tiny_token_model: Any, tiny_text_model: Any) -> Models:
    return Models(token=lambda: tiny_token_model, text=tiny_text_model)


def test_every_mechanism_of_dprag_core_is_in_the_table() -> None:
    found = mechanism_classes()
    assert {c.__name__ for c in found} >= {"DPSparseVote", "DPKSA", "MuRAG", "NaiveMulti"}
    assert found <= {c.kind for c in CASES}


def test_the_guide_example_runs() -> None:
    """docs/new-mechanism.md: its mechanism conforms, and every test of its suites passes."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "new-mechanism.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict[str, Any] = {"__name__": "guide"}
    exec(compile("\n\n".join(blocks), str(guide), "exec"), namespace)
    suites = [v for k, v in namespace.items() if k.startswith("Test") and isinstance(v, type)]
    ran = skipped = 0
    for suite in suites:
        for name in sorted(n for n in dir(suite) if n.startswith("test_")):
            try:
                getattr(suite(), name)()
                ran += 1
            except pytest.skip.Exception:
                skipped += 1
    assert len(suites) == 2 and ran + skipped == 15 and ran >= 10, (ran, skipped)


def test_end_events_report_only_public_details() -> None:
    assert set(END_FIELDS) - {"mechanism", "epsilon", "delta"} <= set(PUBLIC_DETAILS)


class TableContract(MechanismContract):
    """The kit's contract suite on one case of the table, built on the tiny models."""

    case: ClassVar[Case]

    @pytest.fixture(autouse=True)
    def _models(self, models: Models) -> None:
        self.models = models

    def build(self, **changes: Any) -> Mechanism:
        return self.case.build(self.models, **changes)

    def check(self, mechanism: Mechanism, answer: DPAnswer) -> None:
        assert mechanism.public_model() is not None  # every built-in mechanism has a model
        assert answer.details["answer_source"] in ANSWER_SOURCES  # every one says where from


BAD_VALUES: dict[str, object] = {
    "epsilon": 0.0,
    "delta": 1.0,
    "epsilon_token": float("nan"),
    "m": 0,
    "k": -1,
    "n_docs": 0,
    "max_new_tokens": 0,
    "filter_depth": 0,
}
"""A value each of these keywords refuses, when a mechanism has it (keyword-only)."""


def bad_arguments(kind: type) -> list[tuple[dict[str, object], str]]:
    """``(changes, pattern)``: each :data:`BAD_VALUES` keyword of ``kind``, refused by name."""
    names = [
        p.name
        for p in inspect.signature(kind).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in BAD_VALUES
    ]
    return [({name: BAD_VALUES[name]}, rf"\b{name} must") for name in names]


for _case in dprag_cases():
    _name = "TestContract" + _case.name.replace("-", "")
    _body = {"case": _case, "private": _case.private, "bad_arguments": bad_arguments(_case.kind)}
    globals()[_name] = type(_name, (TableContract,), _body)


def test_misspelt_keywords_on_selectors_and_rules() -> None:
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: DPThreshold(epsilon=1.0, bound=(0.0, 1.0)), "bounds"),
        (lambda: AboveThreshold(threshold=0.0, epsilom=1.0), "epsilon"),
        (lambda: AboveThresholdBatch(threshold=0.0, epsilon=1.0, run=2), "runs"),
        (
            lambda: SparseVoteRule(
                epsilon_token=1.0, delta_token=0.0, treshold=1.0, m=2, selection="exponential"
            ),
            "threshold",
        ),
    ]
    for build, hint in cases:
        with pytest.raises(TypeError, match=f"did you mean '{hint}'"):
            build()


def test_a_template_broken_after_build_is_refused_by_the_app_before_any_charge(
    models: Models,
) -> None:
    """The app re-checks the contract when built: the issue's DPKSA never gets charged."""
    ksa = next(c for c in CASES if c.name == "DPKSA").build(models)
    ksa.response_template = MALFORMED  # type: ignore[attr-defined]
    budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    with pytest.raises(ValueError, match="response_template must only use the fields"):
        PrivateRAG(ksa, HonoursK(lambda q, k: DOCS[:k]), accountant=budget)
    assert budget.spent_epsilon == 0.0 and budget.queries == 0


# -- mutation tests: each rule of the contract fails on a broken variant -------------------


class Api:
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return ["aspirin"] * len(prompts)


class Answering(ToyMechanism):
    """A conforming toy: states a stop reason and nothing else."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        return DPAnswer("aspirin", self.query_cost(), self.name, {"stop_reason": "eos"})


def _variant(**methods: Any) -> Mechanism:
    """An :class:`Answering` whose methods (or attributes) are replaced by ``methods``."""
    return type("Broken", (Answering,), methods)()


class Hidden(Answering):
    """Holds a mechanism without saying it is a wrapper (public_model is not forwarded)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = NonRAG(Api())


class Forgetful(MechanismWrapper):
    """A wrapper that hides its inner's model."""

    def __init__(self) -> None:
        self.inner = NonRAG(Api())

    def candidates_needed(self) -> int:
        return 0

    def public_model(self) -> None:
        return None

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        yield from self.inner.stream(question, docs, rng=rng)


STATIC_BREAKS: list[tuple[str, Callable[[], Mechanism], str]] = [
    ("neither", lambda: _variant(candidates_needed=lambda self: None), "neither a candidate"),
    ("negative count", lambda: _variant(candidates_needed=lambda self: -1), "int >= 0"),
    ("bool count", lambda: _variant(candidates_needed=lambda self: True), "int >= 0"),
    ("nan min_score", lambda: _variant(min_score=lambda self: float("nan")), "finite number"),
    ("float cost", lambda: _variant(query_cost=lambda self: 1.0), "must return a Budget"),
    (
        "accountant without cost",
        lambda: _variant(
            query_cost=lambda self: None,
            corpus_accountant=lambda self: InMemoryCorpusAccountant(Budget(1.0)),
        ),
        "no query_cost",
    ),
    (
        "public model template",
        lambda: _variant(public_model=lambda self: PublicModel(Api(), "{context}", 4)),
        r"public_model\(\).template must only use the fields \{question\}",
    ),
    (
        "public model length",
        lambda: _variant(public_model=lambda self: PublicModel(Api(), "{question}", 0)),
        "max_new_tokens must be an int >= 1",
    ),
    (
        "public model without a model",
        lambda: _variant(public_model=lambda self: PublicModel(object(), "{question}", 4)),
        "TokenModel or a TextModel",
    ),
    (
        "undeclared context template",
        lambda: _variant(context_template_field="prompt"),
        "must be one of its templates",
    ),
    (
        "unknown detail kind",
        lambda: _variant(public_details={"n": "integer"}),
        "must be one of",
    ),
    ("empty name", lambda: _variant(name=" "), "name must be a non-empty str"),
    ("duck-typed wrapper", Hidden, "is not a MechanismWrapper"),
    ("wrapper hiding its model", Forgetful, r"public_model\(\) must be its inner's"),
]


@pytest.mark.parametrize(
    ("broken", "error"), [b[1:] for b in STATIC_BREAKS], ids=[b[0] for b in STATIC_BREAKS]
)
def test_check_mechanism_refuses_each_broken_rule(
    broken: Callable[[], Mechanism], error: str
) -> None:
    check_mechanism(Answering())  # the unbroken toy conforms
    mechanism = broken()
    with pytest.raises((TypeError, ValueError), match=error):
        check_mechanism(mechanism)
    with pytest.raises((TypeError, ValueError), match=error):  # and the app refuses it
        PrivateRAG(mechanism, HonoursK(lambda q, k: []), accountant=_budget())


def _budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(10.0, 1e-3))


COST = Budget(1.0, 1e-6)
ANSWER_BREAKS: list[tuple[str, object, str]] = [
    ("not an answer", "aspirin", "must be a DPAnswer"),
    ("other name", DPAnswer("a", COST, "Other", {"stop_reason": "eos"}), "mechanism's name"),
    ("other guarantee", DPAnswer("a", Budget(2.0), "Toy", {"stop_reason": "eos"}), "query_cost"),
    ("no stop reason", DPAnswer("a", COST, "Toy", {}), "must hold a stop_reason"),
    ("unknown stop reason", DPAnswer("a", COST, "Toy", {"stop_reason": "docs"}), "stop_reason"),
    ("private key", DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "n": 3}), "vocabulary"),
    (
        "count as bool",
        DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "private_tokens": True}),
        "must be a count",
    ),
    (
        "numpy count",
        DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "k_hat": np.int64(2)}),
        "must be a count",
    ),
    (
        "infinite number",
        DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "tau": float("inf")}),
        "must be a number",
    ),
    (
        "unknown source",
        DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "answer_source": "web"}),
        "must be a answer_source",
    ),
    (
        "empty answer from documents",
        DPAnswer(" ", COST, "Toy", {"stop_reason": "eos", "answer_source": "documents"}),
        "'none' exactly when empty",
    ),
    (
        "text from nowhere",
        DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "answer_source": "none"}),
        "'none' exactly when empty",
    ),
]


@pytest.mark.parametrize(
    ("answer", "error"), [b[1:] for b in ANSWER_BREAKS], ids=[b[0] for b in ANSWER_BREAKS]
)
def test_check_answer_refuses_each_broken_release(answer: object, error: str) -> None:
    check_answer(ToyMechanism(), DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "k": 2}))
    with pytest.raises(ValueError, match=error):
        check_answer(ToyMechanism(), answer)


def test_declared_details_extend_the_vocabulary() -> None:
    class Counting(ToyMechanism):
        public_details: ClassVar[Mapping[str, DetailKind]] = {"rounds": "count"}

    check_answer(Counting(), DPAnswer("a", COST, "Toy", {"stop_reason": "eos", "rounds": 2}))


class Chunks(Answering):
    def __init__(self, *, items: list[object]) -> None:
        super().__init__()
        self.items = items

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        yield from self.items  # type: ignore[misc]


def _toy_answer(text: str) -> DPAnswer:
    return DPAnswer(text, COST, "Toy", {"stop_reason": "eos"})


GOOD = _toy_answer("aspirin")
STREAM_BREAKS: list[tuple[str, list[object], str]] = [
    ("no answer", ["aspirin"], "must end with a DPAnswer"),
    ("non-text chunk", [3, GOOD], "text chunks"),
    ("chunks disagree", ["ibuprofen", GOOD], "join to the answer's text"),
    ("answer disagrees", ["aspi", "rin", _toy_answer("aspirin!")], "join"),
    ("stream disagrees with answer", [_toy_answer("")], "same text"),
]


@pytest.mark.parametrize(
    ("items", "error"), [b[1:] for b in STREAM_BREAKS], ids=[b[0] for b in STREAM_BREAKS]
)
def test_conformance_refuses_each_broken_stream(items: list[object], error: str) -> None:
    conformance(Chunks(items=["aspi", "rin", GOOD]), QUESTION, DOCS)
    with pytest.raises(ValueError, match=error):
        conformance(Chunks(items=items), QUESTION, DOCS)
