"""Answer-level voting: each voter writes its whole answer, one decision picks the answer.

Token- and word-level voting (DPVote, DPSparseVote) need a model's next-token
choices and spend a private decision per token or word; chat models answer in
sentences whose wording voters do not share, and hosted APIs give no tokens at
all. Here each voter — one disjoint group of records, as in DPVote
(:func:`~dprag_core.retrieval.partition.partition_voters`: the top m·k
candidates split by a uniformly random permutation that keeps units together) —
writes its whole answer with the app's model (:class:`~dprag_core.models.base.TextModel`:
text only, all m prompts in one ``generate`` call, which each engine batches),
the answer is mapped by a *public* function to a canonical key
(:func:`~dprag_core.algorithms.answer_keys.answer_key`: case, punctuation,
articles, filler and the question's own words removed; a voter that does not
know abstains), and **one** selection over the keys releases the winning key or
nothing:

- :class:`DPAnswerVote`: LimitedDomain (Durfee & Rogers 2019) over the keys,
  (ε, δ)-DP; the released text is :func:`~dprag_core.algorithms.answer_keys.render_key`
  of the key, a public function of it — never a voter's own wording.
- :class:`AnswerVote`: the non-private counterpart, the most frequent key.

**Voter failure.** A voter whose prompt the model refuses (a hosted API's
content filter refusing one record, a timeout after the model's own retries)
abstains instead of failing the query (``voter_errors="abstain"``, the default):
the m prompts go through :func:`~dprag_core.models.outcomes.generate_each`, one
fixed request schedule whatever any prompt's outcome (one call for dprag's
wrappers and engines, which report each prompt's outcome; one call per prompt
for any other model), and a prompt that failed, or returned something other
than one string, abstains. Nothing is ever sent again. That keeps each voter's
key a function of its own records, provided a failure is either decided by its
prompt alone (a content filter) or independent of the prompts (a transient
error): then neither whether a query fails nor what it sends depends on the
corpus. ``voter_errors="raise"`` sends the m prompts in one ``generate`` call
and lets the model's error through instead (the adapters re-raise it without
its message), for debugging a model that fails on every call — with
``"abstain"`` such a model releases nothing, every time.

**Off-topic records.** ``record_filter=`` (a public predicate
``keep(question, record_text)``, e.g.
:func:`~dprag_core.algorithms.record_filters.mentions_subject`) makes the voters
read only records the predicate keeps: a voter holding a record of another
disease then casts no vote for that disease's drug. With a filter the mechanism
asks for a deeper pool, ``filter_depth``·m·k candidates
(:meth:`~_AnswerVoting.candidates_needed`; ``filter_depth`` defaults to
:data:`DEFAULT_FILTER_DEPTH`), judges each of them alone, keeps the first m·k
kept ones in the store's rank order and partitions those: a fact whose records
rank below the top m·k, behind records of other subjects, still reaches the
voters. A voter left with no kept record (fewer than m·k kept: padding)
abstains, and its prompt is still sent (with no context), so that what the
model is asked does not depend on the corpus. The predicate reads the question
and one record, so the kept list changes between neighbouring corpora as a
top-n list does, and one unit still moves at most one vote
(:class:`DPAnswerVote`).

**Cost per answer**: m voter completions of at most ``max_new_tokens`` tokens
each (in process, one batched generation; on a server, one request of m
prompts, which the server runs in parallel slots; through a LangChain or
LlamaIndex model, m concurrent requests; a model of your own, m calls). No
public answer is generated; the selection itself is O(m).

>>> class Reader:  # answers with the record it is given
...     def generate(self, prompts, *, max_new_tokens=64):
...         return [p.split("Context:\\n")[1].split("\\n")[0] for p in prompts]
>>> docs = [ScoredDocument(f"d{i}", "Metformin.", 0.9, unit=f"u{i}") for i in range(20)]
>>> mech = DPAnswerVote(Reader(), m=20, k=1, epsilon=5.0, delta=1e-4)
>>> result = mech.answer("Which drug treats Snurfosis?", docs, rng=0)
>>> result.text, result.details["answer_source"], result.details["stop_reason"]
('Metformin', 'documents', 'answer')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from dprag_core.algorithms._words import word_ballot
from dprag_core.algorithms.answer_keys import AnswerKey, answer_key, render_key
from dprag_core.algorithms.base import (
    CONTEXT_FIELDS,
    QUESTION_FIELDS,
    Mechanism,
    PublicModel,
    Templates,
    check_template,
)
from dprag_core.algorithms.record_filters import RecordFilter
from dprag_core.answers import DOCUMENTS, NOTHING, DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.limited_domain import BOTTOM
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.sparse_vote import vote_select
from dprag_core.models.base import TextModel
from dprag_core.models.checks import check_text_model
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES, keep_last_bytes
from dprag_core.models.outcomes import generate_each
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.partition import partition_voters
from dprag_core.stop_reasons import ANSWER, NULL_TOKEN
from dprag_core.validation import positive_finite, positive_int, probability

__all__ = ["DEFAULT_FILTER_DEPTH", "VOTER_ERRORS", "AnswerVote", "DPAnswerVote", "VoterErrors"]

VoterErrors = Literal["abstain", "raise"]
VOTER_ERRORS: tuple[VoterErrors, ...] = ("abstain", "raise")

DEFAULT_FILTER_DEPTH = 4
"""``filter_depth`` when a ``record_filter`` is given and no depth is: the filter reads
the top 4·m·k candidates to find m·k it keeps (docs/evaluation.md, "Off-topic records")."""


class _AnswerVoting(Mechanism):
    """Shared steps of AnswerVote and DPAnswerVote: voters, their answers, their keys."""

    context_template_field = "template"
    templates: ClassVar[Templates] = {
        "template": CONTEXT_FIELDS,
        "public_template": QUESTION_FIELDS,
    }

    def __init__(
        self,
        model: TextModel,
        *,
        m: int,
        k: int,
        max_new_tokens: int = 32,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
        key: AnswerKey = answer_key,
        voter_errors: VoterErrors = "abstain",
        record_filter: RecordFilter | None = None,
        filter_depth: int | None = None,
    ) -> None:
        self.model = check_text_model(model)
        self.m = positive_int("m", m)
        self.k = positive_int("k", k)
        self.max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
        self.template = check_template("template", template, CONTEXT_FIELDS)
        self.public_template = check_template("public_template", public_template, QUESTION_FIELDS)
        self.key = _check_key(key)
        if voter_errors not in VOTER_ERRORS:
            raise ValueError(f"voter_errors must be one of {VOTER_ERRORS}, got {voter_errors!r}")
        self.voter_errors: VoterErrors = voter_errors
        self.filter_depth = _check_depth(filter_depth, record_filter)
        self.record_filter = None if record_filter is None else _check_filter(record_filter)

    def candidates_needed(self) -> int:
        """``filter_depth``·m·k candidates: m·k without a ``record_filter`` (depth 1).

        >>> class Api:
        ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
        >>> AnswerVote(Api(), m=40, k=1).candidates_needed()
        40
        >>> AnswerVote(Api(), m=40, k=1, record_filter=lambda q, t: True).candidates_needed()
        160
        """
        return self.filter_depth * self.m * self.k

    def public_model(self) -> PublicModel:
        """The voters' model with ``public_template``, ``max_new_tokens`` long (the fallback's)."""
        return PublicModel(self.model, self.public_template, self.max_new_tokens)

    def _generate(self, prompts: list[str]) -> list[str | None]:
        """One completion per prompt; None for a voter whose call failed (module docstring)."""
        if self.voter_errors == "raise":
            return _checked(
                self.model.generate(prompts, max_new_tokens=self.max_new_tokens), prompts
            )
        return generate_each(self.model, prompts, max_new_tokens=self.max_new_tokens)

    def keys(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> list[str]:
        """The voters' keys, abstentions left out (private: pass them only to a selection).

        The voters' records are :meth:`kept` (the first m·k candidates, or with a
        ``record_filter`` the first m·k it keeps of the first ``filter_depth``·m·k),
        partitioned by :func:`~dprag_core.retrieval.partition.partition_voters`.
        Voters with no record (padding: fewer than m·k were kept) are prompted like
        the others, so the model sees m prompts whatever the corpus holds, but abstain.
        """
        voters = partition_voters(self.kept(question, docs), m=self.m, k=self.k, rng=rng)
        real = [[d for d in voter if not d.is_padding] for voter in voters]
        prompts = [
            self.template.format(context=join_context([d.text for d in v]), question=question)
            for v in real
        ]
        answers = self._generate(prompts)
        keys = [
            self._key(answer, question) if chunks and answer is not None else None
            for chunks, answer in zip(real, answers, strict=True)
        ]
        return [key for key in keys if key]

    def kept(self, question: str, docs: Sequence[ScoredDocument]) -> list[ScoredDocument]:
        """The voters' records: the first m·k of the first :meth:`candidates_needed`
        candidates that :meth:`_keeps` keeps, in the order given (the store's rank).

        Every candidate of that pool is judged, alone, even once m·k are kept, so
        the filter's work is bounded by public numbers (``filter_depth``·m·k
        records, ``DEFAULT_PROMPT_BYTES`` of each) and does not stop where the
        corpus says.

        >>> class Api:
        ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
        >>> mech = AnswerVote(Api(), m=2, k=1, record_filter=lambda q, t: "x" in t,
        ...                   filter_depth=2)
        >>> docs = [ScoredDocument(f"d{i}", t, 0.9, unit=f"u{i}")
        ...         for i, t in enumerate(["a", "x1", "b", "x2", "x3"])]
        >>> [d.id for d in mech.kept("Q?", docs)]  # d4 is outside the pool of 2·2·1
        ['d1', 'd3']
        """
        pool = docs[: self.candidates_needed()]
        judged = [d for d in pool if self._keeps(question, d)]
        return judged[: self.m * self.k]

    def _keeps(self, question: str, doc: ScoredDocument) -> bool:
        """Whether a voter reads ``doc``: a real document ``record_filter`` keeps (one
        that fails on it is not kept).

        The filter reads the record's last ``DEFAULT_PROMPT_BYTES`` bytes
        (:mod:`dprag_core.models.envelope`), no more than a prompt of the default
        envelope holds of it, so its work is bounded by a public number, not by
        the record's length.
        """
        if doc.is_padding:
            return False
        if self.record_filter is None:
            return True
        try:
            text = keep_last_bytes(doc.text, DEFAULT_PROMPT_BYTES)
            return self.record_filter(question, text) is True
        except Exception:
            return False

    def _key(self, answer: str, question: str) -> str | None:
        """The voter's key; a key map that fails or returns no string on it: it abstains."""
        try:
            key = self.key(answer, question)
        except Exception:
            return None
        return key if isinstance(key, str) else None

    def _answer(self, key: str | None, guarantee: Budget | None) -> DPAnswer:
        text = "" if key is None else render_key(key)
        details: dict[str, Any] = {
            "stop_reason": NULL_TOKEN if key is None else ANSWER,
            "answer_source": NOTHING if key is None else DOCUMENTS,
            "m": self.m,
            "k": self.k,
            "unit": "answer",
            **self._details(),
        }
        return DPAnswer(text, guarantee, self.name, details)

    def _details(self) -> dict[str, Any]:
        return {}


def _check_key(key: object) -> AnswerKey:
    """``key`` if it maps an answer and a question to a str or None (tried once, when built)."""
    if not callable(key):
        raise TypeError("key must be callable as key(answer, question) -> str | None")
    tried = key("An answer.", "A question?")
    if tried is not None and not isinstance(tried, str):
        raise TypeError(f"key must return a str or None, got {type(tried).__name__}")
    return key


def _check_depth(depth: object, record_filter: object) -> int:
    """``filter_depth`` checked: an integer >= 1 with a ``record_filter``
    (None: :data:`DEFAULT_FILTER_DEPTH`); without one only None (depth 1)."""
    if record_filter is None:
        if depth is not None:
            raise ValueError(
                "filter_depth must be None without a record_filter (it sets how deep the "
                f"filter reads: filter_depth*m*k candidates), got {depth!r}"
            )
        return 1
    return DEFAULT_FILTER_DEPTH if depth is None else positive_int("filter_depth", depth)


def _check_filter(keep: object) -> RecordFilter:
    """``keep`` if it maps a question and a record text to a bool (tried once, when built)."""
    if not callable(keep):
        raise TypeError("record_filter must be callable as record_filter(question, text) -> bool")
    tried = keep("A question?", "A record.")
    if not isinstance(tried, bool):
        raise TypeError(f"record_filter must return a bool, got {type(tried).__name__}")
    return keep


def _checked(answers: object, prompts: Sequence[str]) -> list[str | None]:
    """``answers`` if it is one string per prompt; else a ValueError (a failed call)."""
    if not isinstance(answers, list) or len(answers) != len(prompts):
        raise ValueError("the model must return one completion per prompt")
    return [a if isinstance(a, str) else None for a in answers]


class DPAnswerVote(_AnswerVoting):
    """One (ε, δ)-DP decision per answer over m voters' whole answers (module docstring).

    Claim: (epsilon, delta)-DP w.r.t. the corpus (add/remove one privacy unit),
    for any question, any model and any public ``key``; ``query_cost()`` =
    Budget(epsilon, delta), charged before retrieval. The voters' records are the
    top m·k units, or with a ``record_filter`` the first m·k units of the top
    ``filter_depth``·m·k that the public predicate ``record_filter(question,
    record_text)`` keeps, each judged alone on its last ``DEFAULT_PROMPT_BYTES``
    bytes. One added or removed unit x changes the top-n units by one
    substitution (x in, the n-th out); judged alone, each unit's verdict is the
    same in both corpora, so the kept list gains at most x and loses at most the
    unit pushed out of the pool, and its first m·k change by at most one
    substitution (a kept unit against another, or against padding when fewer
    than m·k are kept). They are split into m voters by a uniformly random
    permutation that keeps each unit's chunks together (the pipeline hands one
    chunk per unit), so coupling the permutations, at most one voter's records
    differ; each voter's key is a function of its own records and the public
    question, template and key map (it abstains when its model call fails, under
    the condition of the module docstring, or when it holds only padding, its
    prompt sent all the same). So neighbouring corpora move at
    most one vote: one count −1 and another +1 (L∞ sensitivity 1, at most 2
    counts change, not monotone). The selection is LimitedDomain with k̄ = m,
    Δ0 = 2, Gumbel scale 2/ε and h⊥ = 2 + (2/ε)·ln(2/δ) (the (k̄+1)-th count is
    0: at most m keys), over the ballot of keys and m zero-count slots released
    as ⊥ — the word ballot's construction and proof
    (:mod:`dprag_core.algorithms._words`); the released text is a public function
    of the released key (:func:`~dprag_core.algorithms.answer_keys.render_key`).
    Proof sketch: docs/design.md §4. ``details``: the stop reason (``"answer"``
    or ``"null_token"`` for ⊥), ``answer_source`` (``"documents"`` or ``"none"``),
    m, k, ``unit="answer"`` and ``selection``; nothing per voter.

    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["Metformin"] * len(prompts)
    >>> DPAnswerVote(Api(), m=40, k=1, epsilon=5.0, delta=1e-4).query_cost()
    Budget(epsilon=5.0, delta=0.0001)
    """

    name = "DPAnswerVote"

    def __init__(
        self,
        model: TextModel,
        *,
        m: int,
        k: int,
        epsilon: float,
        delta: float,
        max_new_tokens: int = 32,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
        key: AnswerKey = answer_key,
        voter_errors: VoterErrors = "abstain",
        record_filter: RecordFilter | None = None,
        filter_depth: int | None = None,
    ) -> None:
        super().__init__(
            model,
            m=m,
            k=k,
            max_new_tokens=max_new_tokens,
            template=template,
            public_template=public_template,
            key=key,
            voter_errors=voter_errors,
            record_filter=record_filter,
            filter_depth=filter_depth,
        )
        self.epsilon = positive_finite("epsilon", epsilon)
        self.delta = probability("delta", delta, allow_zero=False)

    def query_cost(self) -> Budget:
        """The (epsilon, delta) of one answer, charged before retrieval."""
        return Budget(self.epsilon, self.delta)

    def bar(self) -> float:
        """h⊥ before noise: 2 + (2/ε)·ln(2/δ), a public function of (ε, δ).

        The top key's count plus Gumbel(2/ε) noise must beat this plus its own
        noise to be released; a count far under it releases ⊥ (an empty answer)
        almost always. ``dprag diagnose`` shows it next to the voters' agreement.

        >>> class Api:
        ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
        >>> round(DPAnswerVote(Api(), m=40, k=1, epsilon=5.0, delta=1e-4).bar(), 2)
        5.96
        """
        return 2.0 + (2.0 / self.epsilon) * math.log(2.0 / self.delta)

    def select(
        self, keys: Sequence[str], *, rng: RngLike = None, size: int = 1
    ) -> list[str | None]:
        """``size`` independent LimitedDomain choices over ``keys`` (one per voting voter).

        Each is a key, or None (⊥); :meth:`answer` makes one. The audits draw many
        at once from this very method.
        """
        ballot = word_ballot(list(keys), public=None, m=self.m)
        picks = vote_select(
            ballot.counts,
            selection="limited_domain",
            epsilon=self.epsilon,
            delta=self.delta,
            k_bar=self.m,
            size=positive_int("size", size),
            rng=make_rng(rng),
        )
        return [None if p == BOTTOM else ballot.chosen(int(p), private=True) for p in picks]

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Voters' answers → keys → one LimitedDomain choice → the rendered key, or ""."""
        query = as_query(query, rng=rng)
        gen = query.rng
        keys = self.keys(query.question, docs, rng=gen)
        return self._answer(self.select(keys, rng=gen)[0], self.query_cost())

    def _details(self) -> dict[str, Any]:
        return {"selection": "limited_domain"}

    def __repr__(self) -> str:
        return (
            f"DPAnswerVote(m={self.m}, k={self.k}, epsilon={self.epsilon}, delta={self.delta}, "
            f"max_new_tokens={self.max_new_tokens})"
        )


class AnswerVote(_AnswerVoting):
    """Non-private answer-level voting: the most frequent key of the m voters' answers
    (ties to the first in sorted order; nothing when every voter abstains).

    The upper bound of :class:`DPAnswerVote` for the same voters and keys.

    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["Metformin."] * len(prompts)
    >>> AnswerVote(Api(), m=3, k=1).answer("Which drug?", []).text  # every voter is padding
    ''
    """

    name = "AnswerVote"

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Voters' answers → keys → the most frequent key (not private)."""
        query = as_query(query, rng=rng)
        keys = self.keys(query.question, docs, rng=query.rng)
        if not keys:
            return self._answer(None, None)
        ballot = word_ballot(keys, public=None, m=self.m)
        # indices are sorted: argmax over the stored counts ties to the first key
        return self._answer(
            ballot.words[int(ballot.counts.indices[np.argmax(ballot.counts.counts)])], None
        )

    def __repr__(self) -> str:
        return f"AnswerVote(m={self.m}, k={self.k}, max_new_tokens={self.max_new_tokens})"
