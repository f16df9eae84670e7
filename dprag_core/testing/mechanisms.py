"""Pytest suites a mechanism subclasses: its contract, its exact law, a worst-case audit.

Subclass a suite in a test module under a name pytest collects (``Test...``),
fill in what it asks for, and every test of the suite runs on your mechanism
(``docs/new-mechanism.md`` walks through one):

- :class:`MechanismContract`: a :class:`~dprag_core.algorithms.base.Mechanism`
  keeps the contract (:func:`~dprag_core.algorithms.contract.conformance`), its
  docstring states its claim (ε, δ, sensitivity, neighbouring relation), an app
  charges it before retrieval (a per-unit ledger: before the first release),
  refuses an overspend and a bad question spending nothing, and a bad,
  misspelt or malformed argument is refused when it is built. You give
  ``build(**changes)``.
- :class:`WorstCaseAudit`: the statistical audit
  (:func:`~dprag_core.audit.audit_epsilon`) on your worst-case neighbouring
  pair stays within the claimed (ε, δ), and the same audit catches a broken
  variant (the mutation hook :meth:`PrivacyClaim.mutant`), so the audit can fail.
- :class:`ExactLaw`: where the output law is computable, the samples follow it
  (a chi-square goodness-of-fit test at fixed seeds), the same test rejects
  the mutant's samples, and the exact privacy loss of the law on the pair is
  within (ε, δ).

:class:`WorstCaseAudit` and :class:`ExactLaw` audit any randomised function,
not only a whole :class:`~dprag_core.algorithms.base.Mechanism` (a noise
sampler, a selection step): you give the pair, a vectorised ``sample`` and the
mechanism and its mutant, as anything ``sample`` can run. Both suites draw each
side's outputs once per class, at fixed seeds, and share them.

>>> import numpy as np
>>> class TestCoin(WorstCaseAudit[float, int]):
...     epsilon = float(np.log(3))  # randomized response: the truth with probability 3/4
...     def mechanism(self): return 0.75
...     def mutant(self): return 0.9  # more truthful than the claim allows
...     def pair(self): return 0, 1
...     def sample(self, keep, bit, trials, rng):
...         return np.where(rng.random(trials) < keep, bit, 1 - bit)
>>> suite = TestCoin()
>>> suite.test_the_audit_stays_within_the_claim()
>>> suite.test_the_audit_catches_the_mutant()
"""

from __future__ import annotations

try:
    import pytest
except ImportError as error:  # pragma: no cover - the extra ships it
    raise ImportError("dprag_core.testing needs pytest: pip install 'dprag[testing]'") from error

import inspect
import math
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from dprag_core.accounting.accountant import CorpusAccountant, InMemoryCorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.contract import conformance
from dprag_core.answers import DPAnswer
from dprag_core.audit import AuditResult, audit_epsilon
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PrivateDataError
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

__all__ = [
    "CLAIM_PARTS",
    "ExactLaw",
    "MechanismContract",
    "PrivacyClaim",
    "WorstCaseAudit",
    "ask",
    "chi_square_pvalue",
    "exact_loss",
    "missing_claim",
]

M = TypeVar("M")
X = TypeVar("X")

CLAIM_PARTS: Mapping[str, str] = {
    "epsilon": r"epsilon|ε",
    "delta": r"delta|δ|\bpure\b",
    "sensitivity": r"sensitiv",
    "neighbouring relation": r"\badd(s|ing|ed)?\b.{0,40}\bremov|neighbou?r|substitut",
}
"""What a private mechanism's docstring states, each with the pattern that finds it."""

MALFORMED = "Notes: {ctx}\nQ: {question}"
"""A template with a field no mechanism declares: refused when the mechanism is built."""


def ask(
    mechanism: Mechanism, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
) -> DPAnswer:
    """``mechanism``'s answer to ``question`` over ``docs``: the one way the kit calls it.

    Use it in your own ``sample`` too, so your tests follow the mechanism API.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
    >>> ask(NonRAG(Api()), "Capital of France?", []).text
    'Paris'
    """
    return mechanism.answer(question, docs, rng=rng)


def missing_claim(kind: type) -> list[str]:
    """The parts of :data:`CLAIM_PARTS` that neither ``kind``'s docstring nor its module's states.

    >>> class Vague:  # an app's own mechanism
    ...     '''Epsilon-DP.'''
    ...     __module__ = "app"
    >>> missing_claim(Vague)
    ['delta', 'sensitivity', 'neighbouring relation']
    """
    module = sys.modules.get(kind.__module__)
    text = f"{inspect.getdoc(kind) or ''}\n{getattr(module, '__doc__', None) or ''}".lower()
    return [part for part, pattern in CLAIM_PARTS.items() if not re.search(pattern, text, re.S)]


def chi_square_pvalue(
    samples: ArrayLike, law: Mapping[Any, float], *, min_expected: float = 5.0
) -> float:
    """The chi-square goodness-of-fit p-value of ``samples`` against the discrete ``law``.

    ``law`` maps outputs to probabilities; outputs whose expected count is below
    ``min_expected``, and every output outside ``law``, are pooled into one bin
    with the remaining mass. A sample the law gives no mass gets p = 0.

    >>> rng = np.random.default_rng(0)
    >>> chi_square_pvalue(rng.integers(0, 2, 10_000), {0: 0.5, 1: 0.5}) > 1e-3
    True
    >>> chi_square_pvalue(rng.integers(0, 2, 10_000), {0: 0.6, 1: 0.4}) < 1e-6
    True
    """
    drawn = np.asarray(samples).reshape(-1)
    n = drawn.size
    values, counts = np.unique(drawn, return_counts=True)
    seen = dict(zip(values.tolist(), counts.tolist(), strict=True))
    observed: list[float] = []
    expected: list[float] = []
    for output, p in law.items():
        if p * n >= min_expected:
            observed.append(float(seen.pop(output, 0)))
            expected.append(p * n)
    rest_observed = float(n - sum(observed))
    rest_expected = max(n - sum(expected), 0.0)
    if rest_expected <= 1e-9 * n:
        if rest_observed > 0:
            return 0.0
    else:
        observed.append(rest_observed)
        expected.append(rest_expected)
    scale = n / sum(expected)  # exact totals: chisquare checks they agree
    return float(stats.chisquare(observed, [e * scale for e in expected]).pvalue)


def exact_loss(p: Mapping[Any, float], q: Mapping[Any, float], *, epsilon: float) -> float:
    """The hockey-stick divergence ``max`` over both directions of Σ_o max(0, P(o) − e^ε Q(o)).

    A law pair is (ε, δ)-indistinguishable exactly when this is ≤ δ (for δ = 0:
    every log ratio within ε).

    >>> exact_loss({0: 0.75, 1: 0.25}, {0: 0.25, 1: 0.75}, epsilon=math.log(3)) < 1e-12
    True
    >>> exact_loss({0: 1.0}, {1: 1.0}, epsilon=5.0)
    1.0
    """
    outputs = set(p) | set(q)
    factor = math.exp(epsilon)
    one = sum(max(0.0, p.get(o, 0.0) - factor * q.get(o, 0.0)) for o in outputs)
    other = sum(max(0.0, q.get(o, 0.0) - factor * p.get(o, 0.0)) for o in outputs)
    return max(one, other)


# -- the contract ------------------------------------------------------------------------------

DOCUMENTS = [
    ScoredDocument(f"d{i}", f"Patient {i % 5} was treated with aspirin.", 0.9 - i / 10, f"u{i % 5}")
    for i in range(12)
]


class _Retrieved(Exception):
    """Raised by the contract's retriever once it has read the budget."""


class _Counting:
    """A retriever that returns nothing and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, question: str, k: int) -> list[ScoredDocument]:
        self.calls += 1
        return []


class MechanismContract(ABC):
    """The contract of a :class:`~dprag_core.algorithms.base.Mechanism`, as an app relies on it.

    Give :meth:`build` (your mechanism, built small, with ``changes`` applied to
    its keyword arguments); set ``private = False`` for a non-private baseline,
    ``bad_arguments`` to ``(changes, message pattern)`` pairs that must be
    refused when built, and override :meth:`documents` or ``question`` when your
    mechanism needs others. An app is :class:`~dprag_core.pipeline.PrivateRAG`.
    """

    question: ClassVar[str] = "Which treatment did Alice Martin receive?"
    private: ClassVar[bool] = True
    bad_arguments: ClassVar[Sequence[tuple[Mapping[str, object], str]]] = ()

    @abstractmethod
    def build(self, **changes: Any) -> Mechanism:
        """The mechanism under test, built small, with ``changes`` to its keyword arguments."""

    def documents(self) -> list[ScoredDocument]:
        """The candidates the store returns, best first (default: 12 chunks of 5 units)."""
        return list(DOCUMENTS)

    def _app(
        self, mechanism: Mechanism, retrieve: Any, accountant: CorpusAccountant | None
    ) -> PrivateRAG:
        return PrivateRAG(mechanism, HonoursK(retrieve), accountant=accountant)

    def _budget(self, mechanism: Mechanism, total: Budget) -> CorpusAccountant | None:
        """A fresh corpus budget, or None when the mechanism brings its own."""
        return (
            None if mechanism.corpus_accountant() is not None else InMemoryCorpusAccountant(total)
        )

    def test_it_keeps_the_contract(self) -> None:
        mechanism = self.build()
        answer = conformance(mechanism, self.question, self.documents(), rng=0)
        assert answer.mechanism == mechanism.name
        assert (answer.guarantee is not None) == self.private, (
            "a private mechanism's answer states its guarantee; a baseline's is None"
        )
        self.check(mechanism, answer)

    def check(self, mechanism: Mechanism, answer: DPAnswer) -> None:
        """More checks of your own on a conforming answer (override; by default: none)."""
        del mechanism, answer

    def test_its_docstring_states_its_claim(self) -> None:
        if not self.private:
            pytest.skip("a non-private baseline claims nothing")
        missing = missing_claim(type(self.build()))
        assert not missing, f"the docstring (class or module) does not state: {', '.join(missing)}"

    def test_it_is_charged_before_retrieval(self) -> None:
        mechanism = self.build()
        cost = mechanism.query_cost()
        if cost is None:
            pytest.skip("no per-query cost (a baseline, or a per-unit ledger: tested below)")
        accountant = self._budget(mechanism, Budget(1000.0, 0.5))
        charged = accountant or mechanism.corpus_accountant()
        assert charged is not None
        before = (charged.spent_epsilon, charged.spent_delta)
        seen: list[tuple[float, float]] = []

        def retrieve(question: str, k: int) -> list[ScoredDocument]:
            seen.append((charged.spent_epsilon, charged.spent_delta))
            raise _Retrieved

        with pytest.raises(PrivateDataError):
            self._app(mechanism, retrieve, accountant).answer(self.question, rng=0)
        assert seen, "the app never retrieved"
        assert seen[0] == pytest.approx((before[0] + cost.epsilon, before[1] + cost.delta))

    def test_its_units_are_charged_before_the_first_release(self) -> None:
        mechanism = self.build()
        ledger = mechanism.unit_ledger()
        if ledger is None:
            pytest.skip("no per-unit ledger")
        before = ledger.total_spent()
        docs = self.documents()
        app = self._app(mechanism, lambda q, k: docs[:k], None)
        stream = iter(app.stream(self.question, rng=0))
        next(stream)  # the first release: a chunk, or the answer
        assert ledger.total_spent() > before, "a release left before its units were charged"
        for _ in stream:
            pass

    def test_an_overspend_is_refused_before_retrieval(self) -> None:
        mechanism = self.build()
        cost = mechanism.query_cost()
        if cost is None or mechanism.corpus_accountant() is not None:
            pytest.skip("no per-query cost charged to a budget the test chooses")
        accountant = InMemoryCorpusAccountant(Budget(cost.epsilon / 2, 0.5))
        calls = _Counting()
        app = self._app(mechanism, calls, accountant)
        with pytest.raises(PrivacyBudgetExhausted):
            app.answer(self.question, rng=0)
        assert (
            calls.calls == 0 and accountant.spent_epsilon == 0.0 and accountant.spent_delta == 0.0
        )

    def test_a_bad_question_is_refused_spending_nothing(self) -> None:
        mechanism = self.build()
        accountant = self._budget(mechanism, Budget(1000.0, 0.5))
        charged = accountant or mechanism.corpus_accountant()
        ledger = mechanism.unit_ledger()
        spent = ledger.total_spent() if ledger is not None else 0.0
        calls = _Counting()
        app = self._app(mechanism, calls, accountant)
        for bad in ("", "   ", None, b"bytes", "\ud800"):
            with pytest.raises((TypeError, ValueError), match="question"):
                app.answer(bad, rng=0)  # type: ignore[arg-type]
        assert calls.calls == 0, "a refused question reached the retriever"
        if charged is not None:
            assert (charged.spent_epsilon, charged.spent_delta) == (0.0, 0.0)
        if ledger is not None:
            assert ledger.total_spent() == spent

    def test_bad_arguments_are_refused_when_built(self) -> None:
        if not self.bad_arguments:
            pytest.skip("no bad_arguments given")
        for changes, message in self.bad_arguments:
            with pytest.raises((TypeError, ValueError), match=message):
                self.build(**changes)

    def test_a_misspelt_keyword_is_refused_naming_the_right_one(self) -> None:
        kind = type(self.build())
        parameters = inspect.signature(kind).parameters.values()
        keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
        for keyword in keywords:
            typo = keyword + keyword[-1]  # "epsilon_token" -> "epsilon_tokenn"
            with pytest.raises(TypeError) as info:
                self.build(**{typo: 1})
            assert str(info.value) == (
                f"{kind.__name__} got an unknown keyword argument {typo!r}; "
                f"did you mean {keyword!r}?"
            )

    def test_its_templates_are_checked_when_built(self) -> None:
        templates = type(self.build()).templates
        if not templates:
            pytest.skip("no templates")
        for parameter, fields in templates.items():
            with pytest.raises(ValueError, match=f"^{parameter} must only use the fields") as info:
                self.build(**{parameter: MALFORMED})
            assert all("{" + f + "}" in str(info.value) for f in fields)
            if "context" in fields:
                with pytest.raises(ValueError, match=f"^{parameter} must contain {{context}}"):
                    self.build(**{parameter: "Q: {question}"})


# -- the claim, audited and computed ------------------------------------------------------------

Which = Literal["mechanism", "mutant"]
_DRAWN: dict[tuple[type, Which, int], NDArray[Any]] = {}


class PrivacyClaim(ABC, Generic[M, X]):
    """A claimed (``epsilon``, ``delta``), a worst-case pair, and a mechanism and its mutant.

    Give :meth:`mechanism`, :meth:`mutant` (a deliberately broken variant that
    the suites must catch: a test that cannot fail is a defect), :meth:`pair`
    (D and D', neighbouring inputs where the claim is tightest) and
    :meth:`sample` (``trials`` discrete outputs of a mechanism on one input,
    drawn with ``rng``; bin continuous outputs first). ``trials`` and ``seed``
    fix the draws.
    """

    epsilon: ClassVar[float]
    delta: ClassVar[float] = 0.0
    trials: ClassVar[int] = 20_000
    seed: ClassVar[int] = 0

    @abstractmethod
    def mechanism(self) -> M:
        """The mechanism under test (anything :meth:`sample` runs)."""

    @abstractmethod
    def mutant(self) -> M:
        """A broken variant the suites must catch (e.g. noise for a smaller sensitivity)."""

    @abstractmethod
    def pair(self) -> tuple[X, X]:
        """The worst-case neighbouring inputs (D, D')."""

    @abstractmethod
    def sample(self, mechanism: M, data: X, trials: int, rng: np.random.Generator) -> ArrayLike:
        """``trials`` discrete outputs (a 1-D array) of ``mechanism`` on ``data``."""

    def drawn(self, which: Which, side: int) -> NDArray[Any]:
        """The outputs of the mechanism (or its mutant) on D (``side=0``) or D' (``1``).

        Drawn once per class at fixed seeds, and shared by the suites' tests.
        """
        key = (type(self), which, side)
        if key not in _DRAWN:
            if any(k[0] is not type(self) for k in _DRAWN):
                _DRAWN.clear()  # one class's draws at a time
            rng = np.random.default_rng([self.seed, ("mechanism", "mutant").index(which), side])
            subject = self.mechanism() if which == "mechanism" else self.mutant()
            outputs = np.asarray(self.sample(subject, self.pair()[side], self.trials, rng))
            assert outputs.shape == (self.trials,), f"sample must return {self.trials} outputs"
            _DRAWN[key] = outputs
        return _DRAWN[key]


class WorstCaseAudit(PrivacyClaim[M, X]):
    """The audit on the worst-case pair stays within the claim; on the mutant it exceeds it.

    ``confidence`` is the audit's (:func:`~dprag_core.audit.audit_epsilon`);
    ``power`` > 0 also asserts the bound exceeds ``power · epsilon`` (a tight pair).
    """

    confidence: ClassVar[float] = 0.95
    power: ClassVar[float] = 0.0

    def audit(self, which: Which) -> AuditResult:
        """The audit of the mechanism's (or the mutant's) draws on the pair."""
        return audit_epsilon(
            self.drawn(which, 0), self.drawn(which, 1), delta=self.delta, confidence=self.confidence
        )

    def test_the_audit_stays_within_the_claim(self) -> None:
        result = self.audit("mechanism")
        assert result.epsilon_lower_bound <= self.epsilon, result
        assert result.epsilon_lower_bound >= self.power * self.epsilon, (
            f"the pair is not tight: {result.epsilon_lower_bound} < {self.power} x {self.epsilon}"
        )

    def test_the_audit_catches_the_mutant(self) -> None:
        result = self.audit("mutant")
        assert result.epsilon_lower_bound > self.epsilon, (
            f"the audit does not catch the mutant: {result}"
        )


class ExactLaw(PrivacyClaim[M, X]):
    """The samples follow the exact output law, which is within the claim on the pair.

    Give :meth:`law`. An output law of infinite support may be given on a window
    of outputs: the rest is pooled into one bin, and the privacy check covers the
    window. ``significance`` is the goodness-of-fit test's level.
    """

    significance: ClassVar[float] = 1e-3

    @abstractmethod
    def law(self, mechanism: M, data: X) -> Mapping[Any, float]:
        """``{output: probability}`` of ``mechanism`` on ``data``, computed exactly."""

    def test_the_law_is_a_distribution(self) -> None:
        for data in self.pair():
            law = self.law(self.mechanism(), data)
            assert all(math.isfinite(p) and p >= 0 for p in law.values()), law
            assert 0 < sum(law.values()) <= 1 + 1e-9, sum(law.values())

    def test_the_samples_follow_the_law(self) -> None:
        for side, data in enumerate(self.pair()):
            pvalue = chi_square_pvalue(
                self.drawn("mechanism", side), self.law(self.mechanism(), data)
            )
            assert pvalue > self.significance, f"side {side}: p = {pvalue}"

    def test_the_law_test_rejects_the_mutant(self) -> None:
        pvalues = [
            chi_square_pvalue(self.drawn("mutant", side), self.law(self.mechanism(), data))
            for side, data in enumerate(self.pair())
        ]
        assert min(pvalues) < self.significance, f"the mutant follows the law: p = {pvalues}"

    def test_the_exact_loss_stays_within_the_claim(self) -> None:
        d, d_prime = (self.law(self.mechanism(), data) for data in self.pair())
        loss = exact_loss(d, d_prime, epsilon=self.epsilon)
        assert loss <= self.delta + 1e-12, f"exact delta at epsilon={self.epsilon}: {loss}"
