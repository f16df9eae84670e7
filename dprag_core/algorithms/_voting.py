"""Shared token loop of the voting mechanisms (VoteRAG, DPVote, DPSparseVote).

One batched prefill of the m voter prompts (+ the public prompt when the
mechanism uses it), then per token: each row's greedy token
(``session.greedy()``: m (+1) integers from the engine, never a [B, V] matrix),
the voters' vote histogram as a
:class:`~dprag_core.mechanisms.histogram.SparseCounts` (at most m non-zero
counts: O(m), whatever the vocabulary size), the mechanism's choice, and ONE
batched ``session.step(token)`` appending the chosen token to every row
(docs/design.md §6). Released text is streamed as it is decoded
(:class:`~dprag_core.algorithms._decoding.IncrementalDecoder`).

With ``unit="word"`` a decision is a word instead of a token
(:mod:`~dprag_core.algorithms._words`): each row's next word comes from one
``session.lookahead`` (each row's own greedy continuation, the session left as it
was), the voters' words are counted, the mechanism's rule chooses one, and its
tokens are appended to every row with one ``session.extend``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import numpy as np

from dprag_core.algorithms._decoding import IncrementalDecoder
from dprag_core.algorithms._words import UNITS, Word, WordSplitter, word_ballot
from dprag_core.algorithms.base import (
    CONTEXT_FIELDS,
    QUESTION_FIELDS,
    PublicModel,
    StreamingMechanism,
    Templates,
    check_template,
)
from dprag_core.answers import DPAnswer, answer_source
from dprag_core.budget import Budget
from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import LookaheadSession, TokenModel, TokenSession
from dprag_core.models.checks import check_lookahead_model, check_token_model
from dprag_core.models.envelope import check_answer_room
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.partition import partition_voters
from dprag_core.stop_reasons import BUDGET, EOS, MAX_TOKENS, NULL_TOKEN
from dprag_core.validation import positive_int

__all__ = [
    "Choice",
    "Unit",
    "VotingMechanism",
    "check_token_model",
]


Unit = Literal["token", "word"]


@dataclass(frozen=True)
class Choice:
    """One decision: ``token`` (the chosen entry of the histogram; None = ⊥, stop) and
    whether it spent budget.

    >>> Choice(None, True).token is None
    True
    """

    token: int | None
    private: bool


class VotingMechanism(StreamingMechanism):
    """Base of the voting mechanisms: partition, prefill, one decision per token or word.

    Subclasses implement :meth:`_start` (fresh per-answer state) and
    :meth:`_choose` (the decision rule over a vote histogram), and set
    ``uses_public`` when they need the public (no-context) prompt as the last row.
    The constructor is VoteRAG's; ``unit="word"`` votes per word (its tokens at
    most ``max_word_tokens``; the model's sessions must implement
    :class:`~dprag_core.models.base.LookaheadSession`, checked here).

    >>> from dprag_core.algorithms import VoteRAG
    >>> issubclass(VoteRAG, VotingMechanism), VotingMechanism.uses_public
    (True, False)
    >>> VoteRAG(model, m=10, k=1, unit="word").answer(question, docs)  # doctest: +SKIP
    """

    context_template_field = "template"
    templates: ClassVar[Templates] = {
        "template": CONTEXT_FIELDS,
        "public_template": QUESTION_FIELDS,
    }

    uses_public: bool = False

    def public_model(self) -> PublicModel:
        """The voters' model with ``public_template``, ``max_new_tokens`` long."""
        return PublicModel(self.model, self.public_template, self.max_new_tokens)

    def __init__(
        self,
        model: TokenModel,
        *,
        m: int,
        k: int,
        max_new_tokens: int = 64,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
        unit: Unit = "token",
        max_word_tokens: int = 8,
    ) -> None:
        self.model = check_token_model(model)
        self.m = positive_int("m", m)
        self.k = positive_int("k", k)
        self.max_new_tokens = check_answer_room(self.model, max_new_tokens)
        self.template = check_template("template", template, ("context", "question"))
        self.public_template = check_template("public_template", public_template, ("question",))
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        self.unit: Unit = unit
        self.max_word_tokens = positive_int("max_word_tokens", max_word_tokens)
        self._words: WordSplitter | None = None
        if unit == "word":
            check_lookahead_model(self.model)
            self._words = WordSplitter(self.model, max_tokens=self.max_word_tokens)

    def _unit_repr(self) -> str:
        """``, unit='word', max_word_tokens=N`` for word units ('' for tokens), for reprs."""
        if self.unit == "token":
            return ""
        return f", unit='word', max_word_tokens={self.max_word_tokens}"

    def candidates_needed(self) -> int:
        """Exactly m*k candidates (padded by the partition when fewer come back)."""
        return self.m * self.k

    def _token_limit(self) -> int | None:
        """The most private tokens one answer may spend (None: unlimited)."""
        return None

    def _guarantee(self) -> Budget | None:
        return self.query_cost()

    def _details(self) -> Mapping[str, Any]:
        return {}

    def _start(self, rng: np.random.Generator) -> Any:
        return None

    def _from_documents(self, choice: Choice) -> bool:
        """Whether a decision that released text was made from the voters' documents.

        A private (DP) decision was; DPSparseVote's free decision released the
        public prediction (the model alone). VoteRAG's votes are all the voters'.
        """
        return choice.private

    def _choose(
        self,
        counts: SparseCounts,
        public: int | None,
        state: Any,
        rng: np.random.Generator,
    ) -> Choice:
        raise NotImplementedError

    def prompts(self, question: str, voters: Sequence[Sequence[ScoredDocument]]) -> list[str]:
        """The voter prompts (one per voter), then the public prompt if used."""
        rows = [
            self.template.format(context=join_context([d.text for d in v]), question=question)
            for v in voters
        ]
        if self.uses_public:
            rows.append(self.public_template.format(question=question))
        return rows

    def _ballot(
        self, session: TokenSession, room: int
    ) -> tuple[SparseCounts, int | None, Callable[[int, bool], Word | None]]:
        """One decision's histogram, the public entry, and the tokens of a chosen entry.

        Tokens: the rows' greedy tokens over the vocabulary (``room`` unused). Words:
        each row's next word, at most ``room`` tokens (what max_new_tokens leaves).
        """
        if self._words is None:
            greedy = session.greedy()
            counts = SparseCounts.from_votes(greedy[: self.m], size=self.model.vocab_size)
            public = int(greedy[self.m]) if self.uses_public else None
            return counts, public, lambda token, private: (token,)
        n = min(self._words.max_tokens, room)
        rows = (
            cast(LookaheadSession, session).lookahead(n, stop=self._words.complete)
            if n > 1
            else session.greedy()[:, None]
        )
        words = [self._words.word(row) for row in rows]
        ballot = word_ballot(
            words[: self.m], public=words[self.m] if self.uses_public else None, m=self.m
        )
        return (
            ballot.counts,
            ballot.public,
            lambda index, private: ballot.chosen(index, private=private),
        )

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield text chunks as tokens are released, then the DPAnswer."""
        query = as_query(query, rng=rng)
        gen = query.rng
        voters = partition_voters(docs, m=self.m, k=self.k, rng=gen)
        session = self.model.prefill(self.prompts(query.question, voters))
        eos = self.model.eos_token_ids
        limit = self._token_limit()
        state = self._start(gen)
        decoder = IncrementalDecoder(self.model)
        generated = private = private_tokens = 0
        from_documents = False  # some released text was decided by the voters
        stop = MAX_TOKENS
        while True:
            counts, public, unit_of = self._ballot(session, self.max_new_tokens - generated)
            choice = self._choose(counts, public, state, gen)
            private += choice.private
            unit = None if choice.token is None else unit_of(choice.token, choice.private)
            # a private end decision counts as one private token, like a private token
            private_tokens += choice.private * (1 if unit is None or unit[0] in eos else len(unit))
            if unit is None:
                stop = NULL_TOKEN
                break
            if unit[0] in eos:
                stop = EOS
                break
            from_documents |= self._from_documents(choice)
            generated += len(unit)
            for token in unit:
                chunk = decoder.push(token)
                if chunk:
                    yield chunk
            if limit is not None and private >= limit:
                stop = BUDGET
                break
            if generated >= self.max_new_tokens:
                break
            if self._words is None:
                session.step(unit[0])
            else:
                cast(LookaheadSession, session).extend(unit)
        tail = decoder.flush()
        if tail:
            yield tail
        details = {
            "tokens_generated": generated,
            "private_tokens": private_tokens,
            **({"private_words": private} if self.unit == "word" else {}),
            "stop_reason": stop,
            "answer_source": answer_source(decoder.text, from_documents=from_documents),
            "m": self.m,
            "k": self.k,
            "unit": self.unit,
            **self._details(),
        }
        yield DPAnswer(
            text=decoder.text,
            guarantee=self._guarantee(),
            mechanism=self.name,
            details=details,
        )
