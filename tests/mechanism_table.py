"""Every dprag mechanism, built small: the one table the contract test and both adapters read.

Each :class:`Case` names a mechanism class and the arguments that build it on the
tiny test models (:class:`Models`). Three suites read :data:`CASES`:

- ``tests/algorithms/test_contract.py``: every concrete :class:`Mechanism` of
  ``dprag_core`` has a case (:func:`mechanism_classes`), passes the conformance
  helper (:func:`dprag_core.algorithms.contract.conformance`), refuses a misspelt
  keyword and a malformed template;
- ``tests/langchain/test_canary.py`` and ``tests/llamaindex/test_li_canary.py``:
  the canary through every mechanism (LlamaIndex: in the ``modes`` listed).

A new mechanism gets one line here (``docs/new-mechanism.md``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import (
    DPICL,
    DPKSA,
    KSA,
    RAG,
    AnswerVote,
    DPAnswerVote,
    DPSparseVote,
    DPVote,
    MuRAG,
    MuRAGAda,
    NaiveMulti,
    NonRAG,
    VoteRAG,
)
from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget

Arguments = tuple[tuple[Any, ...], dict[str, Any]]

ALL_MODES = ("query", "stream", "aquery", "astream")
SMALL = {"max_new_tokens": 4}
DP = {"epsilon": 5.0, "delta": 1e-4}
VOTERS = {"m": 3, "k": 2, "epsilon_token": 1.0}


def even_length(question: str, text: str) -> bool:
    """A public record filter keeping about half the records (those of even length)."""
    return len(text) % 2 == 0


FILTERED = {"record_filter": even_length, "filter_depth": 2}
"""DPAnswerVote reading the first m·k records the filter keeps of the top 2·m·k."""


class Models:
    """What a case builds on: a token model (made on first use) and a text model."""

    def __init__(self, *, token: Callable[[], Any], text: Any) -> None:
        self._token = token
        self.text = text

    @property
    def token(self) -> Any:
        return self._token()


@dataclass(frozen=True)
class Case:
    """One mechanism: ``kind(*args, **kwargs)`` with ``(args, kwargs) = arguments(models)``."""

    name: str
    kind: type[Mechanism]
    arguments: Callable[[Models], Arguments]
    private: bool = True  # False for the non-private baselines
    modes: tuple[str, ...] = field(default=("query", "stream"))  # LlamaIndex's ways of asking

    def build(self, models: Models, **changes: Any) -> Mechanism:
        """The mechanism, with ``changes`` applied to its keyword arguments."""
        args, kwargs = self.arguments(models)
        return self.kind(*args, **{**kwargs, **changes})


def build(case: Case, models: Models) -> Mechanism:
    """The case's mechanism."""
    return case.build(models)


def _pure_inner(models: Models) -> DPSparseVote:
    """MuRAG's inner mechanism: the pure DPSparseVote (exponential selection, delta 0)."""
    pure = {**VOTERS, "epsilon": 2.0, "delta": 0.0, "selection": "exponential"}
    return DPSparseVote(models.token, **pure, **SMALL)


def _ledger() -> InMemoryLedger:
    return InMemoryLedger(budget_per_unit=100.0)


CASES: list[Case] = [
    Case("Toy", ToyMechanism, lambda m: ((), {}), modes=ALL_MODES),
    Case("NonRAG", NonRAG, lambda m: ((m.token,), SMALL), private=False),
    Case("RAG", RAG, lambda m: ((m.token,), {"k": 3, **SMALL}), private=False),
    Case("RAG-text", RAG, lambda m: ((m.text,), {"k": 3, **SMALL}), private=False),
    Case("VoteRAG", VoteRAG, lambda m: ((m.token,), {"m": 2, "k": 2, **SMALL}), private=False),
    Case("DPVote", DPVote, lambda m: ((m.token,), {**VOTERS, **DP, **SMALL})),
    Case(
        "DPSparseVote",
        DPSparseVote,
        lambda m: ((m.token,), {**VOTERS, **DP, **SMALL}),
        modes=ALL_MODES,
    ),
    Case("DPKSA", DPKSA, lambda m: ((m.text,), {"n_docs": 8, **DP}), modes=ALL_MODES),
    Case("KSA", KSA, lambda m: ((m.text,), {"n_docs": 8}), private=False),
    Case(
        "DPAnswerVote",
        DPAnswerVote,
        lambda m: ((m.text,), {"m": 3, "k": 2, **DP, **SMALL}),
        modes=ALL_MODES,
    ),
    Case(
        "DPAnswerVote-filtered",
        DPAnswerVote,
        lambda m: ((m.text,), {"m": 3, "k": 2, **DP, **SMALL, **FILTERED}),
        modes=ALL_MODES,
    ),
    Case("AnswerVote", AnswerVote, lambda m: ((m.text,), {"m": 3, "k": 2, **SMALL}), private=False),
    Case("DPICL", DPICL, lambda m: ((m.token,), {**DP, **SMALL})),
    Case(
        "MuRAG",
        MuRAG,
        lambda m: ((_pure_inner(m),), {"ledger": _ledger(), "tau": -0.5, "epsilon_query": 2.0}),
        modes=ALL_MODES,
    ),
    Case(
        "MuRAGAda",
        MuRAGAda,
        lambda m: (
            (_pure_inner(m),),
            {
                "ledger": _ledger(),
                "bins": [1.0, 0.5, 0.2, 0.0],
                "epsilon_threshold": 1.0,
                "epsilon_rag": 2.0,
            },
        ),
    ),
    Case(
        "NaiveMulti",
        NaiveMulti,
        lambda m: ((_pure_inner(m),), {"accountant": InMemoryCorpusAccountant(Budget(100.0))}),
    ),
]


def case_modes() -> list[tuple[Case, str]]:
    """(case, mode) pairs for the LlamaIndex canary."""
    return [(c, mode) for c in CASES for mode in c.modes]


def dprag_cases() -> list[Case]:
    """The cases of dprag_core's own mechanisms (the test doubles left out)."""
    return [c for c in CASES if c.kind.__module__.startswith("dprag_core.")]


def _public(module: str, name: str) -> bool:
    return not name.startswith("_") and not any(p.startswith("_") for p in module.split("."))


def mechanism_classes() -> set[type[Mechanism]]:
    """Every concrete public :class:`Mechanism` class defined anywhere in dprag_core (a
    test double that only names a dprag module, to stream as dprag's own, is not one)."""
    import dprag_core

    for info in pkgutil.walk_packages(dprag_core.__path__, "dprag_core."):
        importlib.import_module(info.name)
    found: set[type[Mechanism]] = set()
    stack: list[type[Mechanism]] = [Mechanism]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if (
                sub.__module__.startswith("dprag_core.")
                and getattr(sys.modules.get(sub.__module__), sub.__name__, None) is sub
                and _public(sub.__module__, sub.__name__)
                and not inspect.isabstract(sub)
            ):
                found.add(sub)
    return found
