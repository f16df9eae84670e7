"""Every dprag mechanism, built small for the adapter tests.

The canary test is parametrised over :data:`CASES` (:class:`toy_mechanisms.Case`),
in the modes each case lists.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from toy_mechanisms import Case, ToyMechanism

from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget


class Models:
    """What a case may build on: a token model (tiny HF, loaded on first use) and a text
    model (a LlamaIndex LLM through LlamaIndexTextModel)."""

    def __init__(self, token: Callable[[], Any], text: Any) -> None:
        self._token = token
        self.text = text

    @property
    def token(self) -> Any:
        return self._token()


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
    from dprag_core.accounting.accountant import InMemoryCorpusAccountant
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
    return mod.NaiveMulti(inner, accountant=InMemoryCorpusAccountant(Budget(100.0)))


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
