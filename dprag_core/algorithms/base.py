"""The mechanism contract shared by every algorithm and adapter (DESIGN §3).

A mechanism turns a question plus retrieved candidates into a :class:`DPAnswer`.
Adapters and :class:`dprag_core.pipeline.PrivateRAG` ask it how many candidates
it needs, charge its fixed per-query cost *before* retrieval, then call
:meth:`Mechanism.answer` (or :meth:`Mechanism.stream`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.budget import Budget, DPAnswer
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import TextModel, TokenModel
from dprag_core.retrieval.documents import ScoredDocument

__all__ = ["Mechanism", "PublicModel", "StreamingMechanism", "check_question"]


@dataclass(frozen=True)
class PublicModel:
    """What a mechanism's public answer (the question alone, no document) is made with.

    ``model`` is the model the mechanism generates with, ``template`` its
    no-context prompt (``{question}`` only) and ``max_new_tokens`` its answer
    length. :meth:`Mechanism.public_model` returns it.

    >>> PublicModel(model=None, template="Q: {question}", max_new_tokens=8).max_new_tokens
    8
    """

    model: TokenModel | TextModel
    template: str
    max_new_tokens: int


def check_question(question: object) -> str:
    """A question must be a non-empty string of valid Unicode (its text is never echoed).

    A lone surrogate (``chr(0xD800)``) cannot be encoded for a tokenizer or a
    model API: it is refused here, before anything is charged.

    >>> check_question("Who treats headache?")
    'Who treats headache?'
    >>> check_question("Who" + chr(0xD800))
    Traceback (most recent call last):
    ...
    ValueError: question must be valid Unicode text: it contains a lone surrogate
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "question must be valid Unicode text: it contains a lone surrogate"
        ) from None
    return question


class Mechanism(ABC):
    """Base class of all answer mechanisms (DP and non-private baselines).

    Subclasses set :attr:`name` and implement :meth:`answer`; token-level ones
    override :meth:`stream` to yield text as each token is released.
    """

    name: str = "Mechanism"
    context_template_field: ClassVar[str | None] = None
    """The attribute holding the prompt built from documents (``{context}``,
    ``{question}``), replaced by :func:`~dprag_core.algorithms.templates.with_context_template`;
    None for a mechanism that builds no such prompt."""

    def candidates_needed(self) -> int | None:
        """How many top candidates to retrieve; ``None`` = every one above :meth:`min_score`."""
        return None

    def min_score(self) -> float | None:
        """Public score threshold for ``candidates_needed() is None`` retrieval (MuRAG)."""
        return None

    def query_cost(self) -> Budget | None:
        """The fixed corpus-level guarantee of one query, charged before retrieval.

        ``None`` for non-private baselines and for mechanisms that charge a
        per-unit ledger themselves (MuRAG), which then refuse inside ``answer``
        before releasing anything.
        """
        return None

    def public_model(self) -> PublicModel | None:
        """The model, no-context prompt and answer length of this mechanism's public answer.

        Used by the opt-in public fallback (:mod:`dprag_core.fallback`) and, for
        a :class:`~dprag_core.models.base.TokenModel`, to count a question's
        tokens (:func:`~dprag_core.pipeline.question_tokens`). ``None`` (the
        default): the mechanism has no model of its own. Mechanisms that generate
        override it; wrappers (MuRAG, MuRAG-Ada, NaiveMulti) return their
        ``inner``'s.
        """
        return None

    def corpus_accountant(self) -> CorpusAccountant | None:
        """The corpus budget this mechanism was built with, or None (the default).

        A mechanism bound to its own :class:`CorpusAccountant` (NaiveMulti)
        returns it: the pipeline and the adapters charge :meth:`query_cost` to it
        before retrieval, as they charge the app's ``accountant`` for the others
        (:func:`~dprag_core.pipeline.require_accountant`).
        """
        return None

    @abstractmethod
    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Answer ``question`` from ``docs``."""

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield released text chunks, then the final :class:`DPAnswer` last."""
        result = self.answer(question, docs, rng=rng)
        if result.text:
            yield result.text
        yield result

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class StreamingMechanism(Mechanism):
    """A mechanism that generates by streaming: :meth:`answer` is the last item of :meth:`stream`.

    Subclasses implement :meth:`stream` only (text chunks, then one
    :class:`DPAnswer` last), so that both entry points release exactly the same.

    >>> class Echo(StreamingMechanism):
    ...     def stream(self, question, docs, *, rng=None):
    ...         yield question
    ...         yield DPAnswer(question, None, "Echo")
    >>> Echo().answer("hi", []).text
    'hi'
    """

    @abstractmethod
    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield released text chunks, then the final :class:`DPAnswer` last."""

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Run :meth:`stream` to the end and return its :class:`DPAnswer`."""
        result: DPAnswer | None = None
        for item in self.stream(question, docs, rng=rng):
            if isinstance(item, DPAnswer):
                result = item
        if result is None:
            raise RuntimeError(f"{self.name}.stream ended without a DPAnswer")
        return result
