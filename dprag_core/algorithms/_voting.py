"""Shared token loop of the voting mechanisms (VoteRAG, DPVote, DPSparseVote).

One batched prefill of the m voter prompts (+ the public prompt when the
mechanism uses it), then per token: each row's greedy token
(``session.greedy()``: m (+1) integers from the engine, never a [B, V] matrix),
the voters' vote histogram as a
:class:`~dprag_core.mechanisms.histogram.SparseCounts` (at most m non-zero
counts: O(m), whatever the vocabulary size), the mechanism's choice, and ONE
batched ``session.step(token)`` appending the chosen token to every row
(DESIGN §6). Released text is streamed as it is decoded
(:class:`~dprag_core.algorithms._decoding.IncrementalDecoder`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprag_core._validation import positive_int
from dprag_core.algorithms._decoding import IncrementalDecoder
from dprag_core.algorithms.base import StreamingMechanism, check_question
from dprag_core.budget import Budget, DPAnswer
from dprag_core.mechanisms._rng import RngLike, make_rng
from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.models.base import TokenModel
from dprag_core.models.checks import check_token_model
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.partition import partition_voters
from dprag_core.stop_reasons import BUDGET, EOS, MAX_TOKENS, NULL_TOKEN

__all__ = [
    "Choice",
    "VotingMechanism",
    "check_template",
    "check_token_model",
]


def check_template(name: str, template: object, fields: Sequence[str]) -> str:
    """Check that ``template`` is a ``str.format`` string accepting exactly ``fields``.

    >>> check_template("template", "Q: {question}", ["question"])
    'Q: {question}'
    """
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a str.format template, got {type(template).__name__}")
    try:
        template.format(**{f: "" for f in fields})
    except (KeyError, IndexError, ValueError) as err:
        allowed = ", ".join("{" + f + "}" for f in fields)
        raise ValueError(f"{name} must only use the fields {allowed}") from err
    if "{question}" not in template:
        raise ValueError(f"{name} must contain {{question}}")
    return template


@dataclass(frozen=True)
class Choice:
    """One token decision: ``token`` (None = ⊥, stop) and whether it spent budget.

    >>> Choice(None, True).token is None
    True
    """

    token: int | None
    private: bool


class VotingMechanism(StreamingMechanism):
    """Base of the token-voting mechanisms: partition, prefill, one step per token.

    Subclasses implement :meth:`_start` (fresh per-answer state) and
    :meth:`_choose` (the token rule), and set ``uses_public`` when they need the
    public (no-context) prompt as the last row. The constructor is VoteRAG's.

    >>> from dprag_core.algorithms import VoteRAG
    >>> issubclass(VoteRAG, VotingMechanism), VotingMechanism.uses_public
    (True, False)
    """

    context_template_field = "template"

    uses_public: bool = False

    def __init__(
        self,
        model: TokenModel,
        *,
        m: int,
        k: int,
        max_new_tokens: int = 64,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
    ) -> None:
        self.model = check_token_model(model)
        self.m = positive_int("m", m)
        self.k = positive_int("k", k)
        self.max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        self.template = check_template("template", template, ("context", "question"))
        self.public_template = check_template("public_template", public_template, ("question",))

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

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield text chunks as tokens are released, then the DPAnswer."""
        check_question(question)
        gen = make_rng(rng)
        voters = partition_voters(docs, m=self.m, k=self.k, rng=gen)
        session = self.model.prefill(self.prompts(question, voters))
        eos = self.model.eos_token_ids
        vocab = self.model.vocab_size
        limit = self._token_limit()
        state = self._start(gen)
        decoder = IncrementalDecoder(self.model)
        generated = private = 0
        stop = MAX_TOKENS
        while True:
            greedy = session.greedy()
            counts = SparseCounts.from_votes(greedy[: self.m], size=vocab)
            public = int(greedy[self.m]) if self.uses_public else None
            choice = self._choose(counts, public, state, gen)
            private += choice.private
            if choice.token is None:
                stop = NULL_TOKEN
                break
            if choice.token in eos:
                stop = EOS
                break
            generated += 1
            chunk = decoder.push(choice.token)
            if chunk:
                yield chunk
            if limit is not None and private >= limit:
                stop = BUDGET
                break
            if generated >= self.max_new_tokens:
                break
            session.step(choice.token)
        tail = decoder.flush()
        if tail:
            yield tail
        details = {
            "tokens_generated": generated,
            "private_tokens": private,
            "stop_reason": stop,
            "m": self.m,
            "k": self.k,
            **self._details(),
        }
        yield DPAnswer(
            text=decoder.text,
            guarantee=self._guarantee(),
            mechanism=self.name,
            details=details,
        )
