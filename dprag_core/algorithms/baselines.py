"""Non-private baselines (Koga et al. §IV): NonRAG, RAG and VoteRAG.

- ``NonRAG``: the question alone (no documents; epsilon 0, ``uses_corpus=False``).
- ``RAG``: the top-k documents in one prompt, greedy decoding (not private).
- ``VoteRAG``: DPVote's voters, but each token is the plain majority vote (not
  private; the upper bound of the DP voting mechanisms for the same m, k).

They return ``DPAnswer`` with ``guarantee=None`` and have no query cost;
``details["stop_reason"]`` is ``"eos"`` or ``"max_tokens"`` on a token model,
``"text_model"`` on a text model (:mod:`dprag_core.stop_reasons`);
``details["answer_source"]`` is ``"model"`` for NonRAG and ``"documents"`` for
RAG and VoteRAG (not DP: their epsilon is infinite), ``"none"`` when empty.
NonRAG and RAG accept a :class:`~dprag_core.models.base.TokenModel` (streamed
token by token) or a :class:`~dprag_core.models.base.TextModel`.

A model that refuses a prompt holding documents (a content filter, a timeout)
makes it an empty answer, never a failed query: RAG reads a text model through
:func:`~dprag_core.models.outcomes.generate_each` (one call, its failure the
prompt's abstain), and a served model's session ends a refused row
(:mod:`~dprag_core.models.openai_compat`); VoteRAG's refused voters vote for the
end. Whether a query fails then never depends on the documents (their answers
are not private; what else a caller sees is).

>>> NonRAG(model).answer("Who treats headache?", []).epsilon  # doctest: +SKIP
0.0
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from dprag_core.algorithms._decoding import IncrementalDecoder
from dprag_core.algorithms._voting import Choice, VotingMechanism
from dprag_core.algorithms.base import (
    CONTEXT_FIELDS,
    QUESTION_FIELDS,
    PublicModel,
    StreamingMechanism,
    Templates,
    check_template,
)
from dprag_core.answers import DPAnswer, answer_source
from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import TextModel, TokenModel
from dprag_core.models.checks import callback_attributes, check_text_model, framework_of
from dprag_core.models.outcomes import generate_each
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import EOS, MAX_TOKENS, TEXT_MODEL
from dprag_core.validation import positive_int

__all__ = ["RAG", "NonRAG", "VoteRAG"]


def _check_model(model: object) -> TokenModel | TextModel:
    if framework_of(model) is not None or callback_attributes(model):
        return check_text_model(model)  # refused, with the fix
    if not isinstance(model, (TokenModel, TextModel)):
        raise TypeError(f"model must be a TokenModel or a TextModel, got {type(model).__name__}")
    return model


def _greedy_stream(
    model: TokenModel, prompt: str, max_new_tokens: int, parts: list[str]
) -> Generator[str, None, str]:
    """Greedy decoding of one prompt on the cached engine (one token id per step).

    Yields text chunks (also appended to ``parts``) and returns the stop reason.
    """
    session = model.prefill([prompt])
    decoder = IncrementalDecoder(model)
    stop = MAX_TOKENS
    for t in range(max_new_tokens):
        token = int(session.greedy()[0])
        if token in model.eos_token_ids:
            stop = EOS
            break
        chunk = decoder.push(token)
        if chunk:
            parts.append(chunk)
            yield chunk
        if t + 1 < max_new_tokens:
            session.step(token)
    tail = decoder.flush()
    if tail:
        parts.append(tail)
        yield tail
    return stop


class _SinglePrompt(StreamingMechanism):
    """One prompt, greedy: shared by NonRAG and RAG."""

    uses_corpus = True

    def __init__(
        self, model: TokenModel | TextModel, *, max_new_tokens: int, template: str
    ) -> None:
        self.model = _check_model(model)
        self.max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        self.template = template

    def _prompt(self, question: str, docs: Sequence[ScoredDocument]) -> str:
        raise NotImplementedError

    def public_model(self) -> PublicModel:
        """The model with the no-context prompt, ``max_new_tokens`` long (NonRAG: its own)."""
        template = NO_CONTEXT_TEMPLATE if self.uses_corpus else self.template
        return PublicModel(self.model, template, self.max_new_tokens)

    def _answer(self, text: str, stop: str) -> DPAnswer:
        source = answer_source(text, from_documents=self.uses_corpus)
        return DPAnswer(
            text=text,
            guarantee=None,
            mechanism=self.name,
            details={"stop_reason": stop, "answer_source": source},
            uses_corpus=self.uses_corpus,
        )

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield text chunks as they are generated, then the DPAnswer."""
        prompt = self._prompt(as_query(query, rng=rng).question, docs)
        if isinstance(self.model, TokenModel):
            parts: list[str] = []
            stop = yield from _greedy_stream(self.model, prompt, self.max_new_tokens, parts)
            yield self._answer("".join(parts), stop)
            return
        if self.uses_corpus:  # the prompt holds documents: a refused one is an empty answer
            (out,) = generate_each(self.model, [prompt], max_new_tokens=self.max_new_tokens)
            text = out or ""
        else:  # the question alone: a failure is public
            text = self.model.generate([prompt], max_new_tokens=self.max_new_tokens)[0]
        if text:
            yield text
        yield self._answer(text, TEXT_MODEL)


class NonRAG(_SinglePrompt):
    """The question alone, no retrieval: epsilon 0 w.r.t. the corpus.

    ``candidates_needed()`` is 0, so the pipeline retrieves nothing.

    >>> NonRAG(model).candidates_needed()  # doctest: +SKIP
    0
    """

    name = "NonRAG"
    uses_corpus = False
    templates: ClassVar[Templates] = {"template": QUESTION_FIELDS}

    def __init__(
        self,
        model: TokenModel | TextModel,
        *,
        max_new_tokens: int = 64,
        template: str = NO_CONTEXT_TEMPLATE,
    ) -> None:
        super().__init__(
            model,
            max_new_tokens=max_new_tokens,
            template=check_template("template", template, QUESTION_FIELDS),
        )

    def candidates_needed(self) -> int:
        """No documents."""
        return 0

    def _prompt(self, question: str, docs: Sequence[ScoredDocument]) -> str:
        return self.template.format(question=question)

    def __repr__(self) -> str:
        return f"NonRAG(max_new_tokens={self.max_new_tokens})"


class RAG(_SinglePrompt):
    """Non-private RAG: the top-k candidates (in retrieval order) in one prompt.

    >>> RAG(model, k=5).candidates_needed()  # doctest: +SKIP
    5
    """

    context_template_field = "template"
    templates: ClassVar[Templates] = {"template": CONTEXT_FIELDS}

    name = "RAG"

    def __init__(
        self,
        model: TokenModel | TextModel,
        *,
        k: int,
        max_new_tokens: int = 64,
        template: str = RAG_TEMPLATE,
    ) -> None:
        super().__init__(
            model,
            max_new_tokens=max_new_tokens,
            template=check_template("template", template, CONTEXT_FIELDS),
        )
        self.k = positive_int("k", k)

    def candidates_needed(self) -> int:
        """The top k candidates."""
        return self.k

    def _prompt(self, question: str, docs: Sequence[ScoredDocument]) -> str:
        context = join_context([d.text for d in list(docs)[: self.k]])
        return self.template.format(context=context, question=question)

    def __repr__(self) -> str:
        return f"RAG(k={self.k}, max_new_tokens={self.max_new_tokens})"


class VoteRAG(VotingMechanism):
    """Non-private majority vote of m voters per token, or per word with ``unit="word"``
    (ties to the lower token id; words: to the lower in token-id tuple order).

    >>> VoteRAG(model, m=10, k=1).candidates_needed()  # doctest: +SKIP
    10
    """

    name = "VoteRAG"

    def _choose(
        self,
        counts: SparseCounts,
        public: int | None,
        state: Any,
        rng: np.random.Generator,
    ) -> Choice:
        # indices are sorted: argmax over the stored counts ties to the lower token id
        return Choice(int(counts.indices[np.argmax(counts.counts)]), False)

    def _from_documents(self, choice: Choice) -> bool:
        return True  # every token (word) is the voters' majority

    def __repr__(self) -> str:
        return (
            f"VoteRAG(m={self.m}, k={self.k}, max_new_tokens={self.max_new_tokens}"
            f"{self._unit_repr()})"
        )
