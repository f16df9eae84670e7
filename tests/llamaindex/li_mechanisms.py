"""Every dprag mechanism that exists in the tree, built small for the adapter tests.

A case whose module has not landed is skipped with its reason; the canary test
is parametrised over :data:`CASES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget, DPAnswer
from dprag_core.mechanisms._rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument


class ToyMechanism(Mechanism):
    """A stand-in: counts its candidates, costs (1, 1e-6), streams word by word."""

    name = "Toy"

    def __init__(self, *, k: int = 4) -> None:
        self.k = k

    def candidates_needed(self) -> int:
        return self.k

    def query_cost(self) -> Budget:
        return Budget(1.0, 1e-6)

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        real = [d for d in docs if not d.is_padding]
        return DPAnswer(f"{len(real)} candidates", self.query_cost(), self.name, {"n": len(real)})

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        result = self.answer(question, docs, rng=rng)
        for i, word in enumerate(result.text.split(" ")):
            yield word if i == 0 else " " + word
        yield result


class LeakyMechanism(ToyMechanism):
    """Deliberately broken: answers with its documents' text (the canary must see it)."""

    name = "Leaky"

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        return DPAnswer(" ".join(d.text for d in docs), self.query_cost(), self.name)


class Models:
    """What a case may build on: a token model (tiny HF, loaded on first use) and a text
    model (a LlamaIndex LLM through LlamaIndexTextModel)."""

    def __init__(self, token: Callable[[], Any], text: Any) -> None:
        self._token = token
        self.text = text

    @property
    def token(self) -> Any:
        return self._token()


@dataclass(frozen=True)
class Case:
    name: str
    module: str
    build: Callable[[Any, Models], Mechanism]
    private: bool = True  # False for the non-private baselines
    modes: tuple[str, ...] = ("query", "stream")  # the async paths: on a few cases


ALL_MODES = ("query", "stream", "aquery", "astream")
BASE = "dprag_core.algorithms.baselines"
VOTE = "dprag_core.algorithms.dpvote"
KSA = "dprag_core.algorithms.ksa"
MURAG = "dprag_core.algorithms.murag"
SMALL = {"max_new_tokens": 4}
DP = {"epsilon": 5.0, "delta": 1e-4}

CASES: list[Case] = [
    Case("Toy", "dprag_core.algorithms.base", lambda mod, m: ToyMechanism(), modes=ALL_MODES),
    Case("NonRAG", BASE, lambda mod, m: mod.NonRAG(m.token, **SMALL), private=False),
    Case("RAG", BASE, lambda mod, m: mod.RAG(m.text, k=3, **SMALL), private=False),
    Case("VoteRAG", BASE, lambda mod, m: mod.VoteRAG(m.token, m=2, k=2, **SMALL), private=False),
    Case(
        "DPVote",
        VOTE,
        lambda mod, m: mod.DPVote(m.token, m=3, k=2, epsilon_token=1.0, **DP, **SMALL),
    ),
    Case(
        "DPSparseVote",
        VOTE,
        lambda mod, m: mod.DPSparseVote(m.token, m=3, k=2, epsilon_token=1.0, **DP, **SMALL),
        modes=ALL_MODES,
    ),
    Case("DPKSA", KSA, lambda mod, m: mod.DPKSA(m.text, n_docs=8, **DP), modes=ALL_MODES),
    Case("KSA", KSA, lambda mod, m: mod.KSA(m.text, n_docs=8), private=False),
    Case("DPICL", "dprag_core.algorithms.icl", lambda mod, m: mod.DPICL(m.token, **DP, **SMALL)),
    Case("MuRAG", MURAG, lambda mod, m: _multi(mod, m, "MuRAG"), modes=ALL_MODES),
    Case("MuRAGAda", MURAG, lambda mod, m: _multi(mod, m, "MuRAGAda")),
    Case("NaiveMulti", MURAG, lambda mod, m: _multi(mod, m, "NaiveMulti")),
]


def _multi(mod: Any, m: Models, which: str) -> Mechanism:
    """The multi-query wrappers around MuRAG's pure DPSparseVote (exponential selection)."""
    from dprag_core.accounting.accountant import CorpusAccountant
    from dprag_core.accounting.ledger import InMemoryLedger
    from dprag_core.algorithms.dpvote import DPSparseVote

    inner = DPSparseVote(
        m.token, m=3, k=2, epsilon=2.0, delta=0.0, epsilon_token=1.0,
        selection="exponential", **SMALL,
    )  # fmt: skip
    ledger = InMemoryLedger(budget_per_unit=100.0)
    if which == "MuRAG":
        return mod.MuRAG(inner, ledger=ledger, tau=0.1, epsilon_query=2.0)
    if which == "MuRAGAda":
        return mod.MuRAGAda(
            inner, ledger=ledger, bins=[1.0, 0.5, 0.2, 0.0], epsilon_threshold=1.0, epsilon_rag=2.0
        )
    return mod.NaiveMulti(inner, accountant=CorpusAccountant(Budget(100.0)))


def mechanism_classes() -> set[str]:
    """Names of the concrete public Mechanism classes in dprag_core.algorithms."""
    import pkgutil

    import dprag_core.algorithms as algorithms

    names = set()
    for info in pkgutil.iter_modules(algorithms.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"dprag_core.algorithms.{info.name}")
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, Mechanism)
                and obj is not Mechanism
                and not name.startswith("_")
                and obj.__module__ == module.__name__
                and not getattr(obj, "__abstractmethods__", None)
            ):
                names.add(name)
    return names


def case_modes() -> list[tuple[Case, str]]:
    """(case, mode) pairs for the canary."""
    return [(c, mode) for c in CASES for mode in c.modes]


def build(case: Case, models: Models) -> Mechanism:
    """The case's mechanism, or skip when its module is not in the tree yet."""
    try:
        mod = importlib.import_module(case.module)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{case.module} not in the tree: {exc}")
    return case.build(mod, models)
