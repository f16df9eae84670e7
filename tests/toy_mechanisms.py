"""Mechanism doubles shared by the core and adapter tests.

:class:`ToyMechanism` stands in for a DP mechanism (fixed cost, no model);
:class:`LeakyMechanism` is deliberately broken so that the canary tests can show
they catch a leak. Every real mechanism, built small, is in tests/mechanism_table.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from dprag_core.algorithms.base import Mechanism
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument

RELEASED = {"stop_reason": "eos"}
"""The details of every toy answer: public ones only (the app checks every release)."""


class ToyMechanism(Mechanism):
    """A stand-in: answers with its candidate count, costs (1, 1e-6), streams word by word."""

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
        return DPAnswer(f"{len(real)} candidates", self.query_cost(), self.name, RELEASED)

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        result = self.answer(question, docs, rng=rng)
        for i, word in enumerate(result.text.split(" ")):
            yield word if i == 0 else " " + word
        yield result


class AboveToy(ToyMechanism):
    """Asks for every candidate above a public score (like MuRAG, DPICL)."""

    def candidates_needed(self) -> None:
        return None

    def min_score(self) -> float:
        return 0.0


class LeakyMechanism(ToyMechanism):
    """Deliberately broken: answers with its documents' text (the canary must see it)."""

    name = "Leaky"

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        return DPAnswer(" ".join(d.text for d in docs), self.query_cost(), self.name, RELEASED)


#: Word-level voting settings with a budget large enough that agreeing voters' words
#: come out whole (one voter per document).
WORD_VOTE_ARGS: dict[str, Any] = {
    "k": 1,
    "epsilon": 40.0,
    "delta": 1e-4,
    "epsilon_token": 8.0,
    "max_new_tokens": 48,
    "unit": "word",
    "max_word_tokens": 24,
}


def word_dpvote(model: Any, **kw: Any) -> Mechanism:
    """A word-level DPVote with :data:`WORD_VOTE_ARGS`; ``kw`` overrides them."""
    from dprag_core.algorithms import DPVote

    return DPVote(model, **{**WORD_VOTE_ARGS, **kw})
