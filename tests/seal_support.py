"""Neighbouring corpora D and D + x, and what a caller observes of one call (issue 36).

The seal: nothing a caller observes besides the DP release tells D from D + x.
:func:`observed` records what a caller sees of one call: the exception's class
and message when it raises, else the public fields the entry point returns with
the answer (its text is the DP release, whose distribution differs by design,
and is left out). The tests run one scenario on D and on D + x through each
entry point and compare the two observations: on the code before issue 36 each
case below told them apart with certainty.

x is the document nearest to the question (it holds the question's words):
above MuRAG's τ, first in every ranking. D's documents share no word with the
question (a cosine of 0 with the tests' hashing embeddings, and a score of 0.1
for the core's retriever): below τ.

The mechanisms here are broken on purpose, each the way a case of the issue
was: :class:`IdsInDetails` releases its documents' ids as a detail (case 6),
:class:`FailsByCorpus` raises an error whose class and message depend on the
documents (case 5), and :func:`error_by_corpus` is that error, for a store
to raise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from toy_mechanisms import ToyMechanism

from dprag_core.accounting.stores.errors import LedgerUnavailable
from dprag_core.answers import DPAnswer
from dprag_core.errors import PRIVATE_FAILURE
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument

QUESTION = "Which drug does Zora Quill take?"
D_ROWS = [("p1", "Ann likes tennis and long walks."), ("p2", "Bob paints old houses in spring.")]
X_ROW = ("p3", "Which drug does Zora Quill take? Zora Quill takes quinine.")
TAU = 0.5

Observation = tuple[Any, ...]
FIXED_FAILURE: Observation = ("raised", "PrivateDataError", PRIVATE_FAILURE)
"""What a caller observes of any failure inside a private section."""


def rows(with_x: bool) -> list[tuple[str, str]]:
    """(unit, text) of D, or of D + x."""
    return [*D_ROWS, X_ROW] if with_x else list(D_ROWS)


def observed(call: Callable[[], Any]) -> Observation:
    """("raised", class name, message), or ("released", the public fields ``call`` returns)."""
    try:
        fields = call()
    except Exception as exc:  # what the caller sees of a failure is the observation
        return ("raised", type(exc).__name__, str(exc))
    return ("released", fields)


def answer_fields(answer: DPAnswer) -> dict[str, Any]:
    """A core answer's public fields, without its text (the DP release)."""
    return {
        "epsilon": answer.epsilon,
        "delta": answer.delta,
        "mechanism": answer.mechanism,
        "details": dict(answer.details),
    }


def error_by_corpus(docs: Sequence[ScoredDocument]) -> Exception:
    """A store's or a model's error that quotes the first document, of a class that depends on
    it: dprag's own ``LedgerUnavailable`` when x is there, a ``ValueError`` otherwise."""
    real = [d for d in docs if not d.is_padding]
    top = real[0].text if real else ""
    kind = LedgerUnavailable if "Zora" in top else ValueError
    return kind(f"store failed while reading {top!r}")


class FailsByCorpus(ToyMechanism):
    """Fails with an error whose class and message depend on its documents (case 5)."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        raise error_by_corpus(docs)


class IdsInDetails(ToyMechanism):
    """Releases its documents' ids as a detail: not public, refused at release (case 6)."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        answer = super().answer(question, docs, rng=rng)
        ids = ",".join(d.id for d in docs if not d.is_padding)
        return DPAnswer(answer.text, answer.guarantee, self.name, {**answer.details, "ids": ids})
