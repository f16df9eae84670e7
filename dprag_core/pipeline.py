"""Question -> charge -> retrieve -> mechanism: the framework-neutral DP RAG loop.

Adapters follow the same order: the fixed cost is charged *before* retrieval,
so a query that would overspend is refused before any work, and nothing is
released uncharged. Mechanisms with per-unit ledgers (MuRAG) charge their
ledger inside ``answer`` before they release anything.

There is no default budget (:func:`require_accountant`). A default would be
either in memory (it restarts from zero with every process, so it bounds
nothing in a deployment) or a file dprag creates on its own (a surprise on
disk, with a total nobody chose). So an app whose mechanism charges a
per-query cost is refused when it is built unless it is given a
:class:`CorpusAccountant`, and the error says how to make one. Non-private
baselines (``query_cost()`` is None) need none; MuRAG carries its per-unit
ledger. NaiveMulti is built with its accountant
(:meth:`~dprag_core.algorithms.base.Mechanism.corpus_accountant`): the app
charges that one, before retrieval like any other.

>>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator

import numpy as np

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism, check_question
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.contract import check_mechanism
from dprag_core.budget import DPAnswer
from dprag_core.errors import guarded
from dprag_core.fallback import check_public_fallback, fallback_answer, fallback_stream
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.models.base import TokenModel
from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.capabilities import has_range_search, requirement
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.scores import ScoreScale
from dprag_core.retrieval.units import top_units
from dprag_core.validation import positive_int

__all__ = [
    "CORE_SOURCES",
    "DEFAULT_MAX_QUESTION_TOKENS",
    "HOW_TO_SET_A_BUDGET",
    "PrivateRAG",
    "charge_query",
    "check_accountant",
    "check_query",
    "check_question",
    "check_source",
    "clean_documents",
    "own_accountant",
    "question_tokens",
    "require_accountant",
    "retrieve_for",
]

DEFAULT_MAX_QUESTION_TOKENS = 512
"""Longest question accepted by default, in tokens of the mechanism's model."""

_END = object()

CORE_SOURCES = (
    "FaissRetriever (FaissCorpus.as_retriever), CorpusIndex, any retriever with "
    "honours_k = True or a native above(question, tau), or HonoursK(fn) (your promise "
    "that fn(question, k) returns the store's first min(k, N) documents, best first)"
)

HOW_TO_SET_A_BUDGET = (
    'SQLiteCorpusAccountant("budget.db", total=Budget(epsilon, delta)) for a budget that '
    "survives restarts and is shared by the processes of one host, PostgresCorpusAccountant "
    "for several hosts, or InMemoryCorpusAccountant(Budget(epsilon, delta)) in a notebook "
    "or a test only"
)


def check_accountant(accountant: object, *, parameter: str = "accountant") -> CorpusAccountant:
    """``accountant`` if it is a :class:`CorpusAccountant`, else a TypeError saying how to make one.

    A bare ``Budget`` is refused too: turning it into a budget silently would
    pick a backend (in memory: per process, gone at restart) for the user.

    >>> from dprag_core.budget import Budget
    >>> check_accountant(Budget(1.0), parameter="budget")
    Traceback (most recent call last):
    ...
    TypeError: budget must be a CorpusAccountant, got Budget: pass budget=SQLiteCorpusAccountant(...
    """
    if not isinstance(accountant, CorpusAccountant):
        raise TypeError(
            f"{parameter} must be a CorpusAccountant, got {type(accountant).__name__}: pass "
            f"{parameter}={HOW_TO_SET_A_BUDGET}"
        )
    return accountant


def require_accountant(
    mechanism: Mechanism, accountant: object, *, parameter: str = "accountant"
) -> CorpusAccountant | None:
    """``accountant``, checked: required when ``mechanism`` charges a per-query cost.

    Raises a TypeError for anything but a :class:`CorpusAccountant` or None
    (:func:`check_accountant`), and a ValueError naming ``parameter`` when a
    DP mechanism has no budget. A mechanism built with its own accountant
    (``mechanism.corpus_accountant()``, NaiveMulti) gets that one: ``accountant``
    must then be None or the same object, else a ValueError.

    >>> from dprag_core.budget import Budget
    >>> class Costly(Mechanism):
    ...     def query_cost(self): return Budget(1.0)
    ...     def answer(self, question, docs, *, rng=None): ...
    >>> require_accountant(Costly(), None)
    Traceback (most recent call last):
    ...
    ValueError: Mechanism charges a corpus budget on every query: pass accountant=...
    """
    given = None if accountant is None else check_accountant(accountant, parameter=parameter)
    bound = own_accountant(mechanism, given, parameter=parameter)
    if bound is not None:
        return bound
    if given is None and mechanism.query_cost() is not None:
        raise ValueError(
            f"{mechanism.name} charges a corpus budget on every query: pass "
            f"{parameter}={HOW_TO_SET_A_BUDGET}"
        )
    return given


def own_accountant(
    mechanism: Mechanism, given: CorpusAccountant | None, *, parameter: str = "accountant"
) -> CorpusAccountant | None:
    """The accountant ``mechanism`` was built with (NaiveMulti), if any; refuses any other.

    ``given`` must then be None or that same object, else a ValueError naming
    ``parameter``: such a mechanism's cap holds only on its own accountant.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> own_accountant(NonRAG(Api()), None) is None
    True
    """
    bound = mechanism.corpus_accountant()
    if bound is not None and given is not None and given is not bound:
        raise ValueError(
            f"{mechanism.name} is charged to the accountant it was built with: pass "
            f"{parameter}=None or that same accountant"
        )
    return bound


def question_tokens(mechanism: Mechanism, question: str) -> int:
    """The length of ``question`` in tokens of ``mechanism``'s model.

    Exact for mechanisms over a :class:`TokenModel` (the ``encode`` of
    ``mechanism.public_model().model``). A text model (an API behind LangChain
    or LlamaIndex) exposes no tokenizer, nor does a mechanism without a model,
    so for those it is an estimate: one token per 4 UTF-8 bytes, rounded up.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> question_tokens(NonRAG(Api()), "abcdefgh")
    2
    """
    public = mechanism.public_model()
    if public is not None and isinstance(public.model, TokenModel):
        return len(public.model.encode(question))
    return math.ceil(len(question.encode("utf-8")) / 4)


def check_query(mechanism: Mechanism, question: object, *, max_question_tokens: int) -> str:
    """Everything about a query that can be checked before its budget is charged.

    ``question`` must be a non-empty string of valid Unicode, at most
    ``max_question_tokens`` long (:func:`question_tokens`): a very long
    question costs minutes and gigabytes in a voting mechanism's prefill.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> check_query(NonRAG(Api()), "x" * 40, max_question_tokens=5)
    Traceback (most recent call last):
    ...
    ValueError: question is 10 tokens long, more than max_question_tokens=5
    """
    text = check_question(question)
    n = question_tokens(mechanism, text)
    if n > max_question_tokens:
        raise ValueError(
            f"question is {n} tokens long, more than max_question_tokens={max_question_tokens}"
        )
    return text


def check_source(
    mechanism: Mechanism, retriever: object, *, qualifying: str, name: str | None = None
) -> None:
    """Refuse, when an app is built, a retriever that cannot give ``mechanism`` its candidates.

    Never checked at query time: whether a store capped its answer depends on
    the data. ``qualifying`` names the sources that do qualify, and ``name`` the
    source (default: its type), for the error. A source that declares its
    public score range (``source.scale``, a
    :class:`~dprag_core.retrieval.scores.ScoreScale`) must have the mechanism's
    ``min_score()`` inside it (:meth:`~dprag_core.retrieval.scores.ScoreScale.check_threshold`):
    else every query would be charged and then select nothing or fail.

    >>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
    >>> check_source(NonRAG(model), lambda q, k: [], qualifying="...")  # doctest: +SKIP
    """
    needed = mechanism.candidates_needed()
    if needed is None and mechanism.min_score() is None:
        raise ValueError(f"{mechanism.name} asks for neither a candidate count nor a min_score")
    name = name or type(retriever).__name__
    lacking = requirement(needed, retriever)
    if lacking is not None:
        raise ValueError(
            f"{mechanism.name} needs {lacking}; {name} does not "
            f"declare it. Sources that qualify: {qualifying}"
        )
    tau = mechanism.min_score()
    scale = getattr(retriever, "scale", None)
    if tau is not None and scale is not None:
        if not isinstance(scale, ScoreScale):
            raise TypeError(f"{name}.scale must be a ScoreScale, got {type(scale).__name__}")
        scale.check_threshold(tau, parameter="the mechanism's min_score()")


def charge_query(
    mechanism: Mechanism, accountant: CorpusAccountant | None, *, query_id: str | None = None
) -> None:
    """Charge the mechanism's fixed per-query cost; raises PrivacyBudgetExhausted first.

    A mechanism built with its own accountant (NaiveMulti) is charged to that
    one only: ``accountant`` must be None or that same object, else a
    ValueError before anything is charged (an app whose accountant was
    replaced after it was built cannot bypass the mechanism's cap).
    ``query_id`` names this query's charge (a durable accountant records it
    once, so a retry with the same id after an unknown outcome is safe);
    ``None`` lets the accountant give the charge a fresh id.
    """
    cost = mechanism.query_cost()
    bound = own_accountant(mechanism, accountant)
    target = accountant if bound is None else bound
    if target is not None and cost is not None:
        target.charge(cost, query_id=query_id)


def clean_documents(docs: Iterable[object]) -> list[ScoredDocument]:
    """The retrieved candidates a mechanism may read: treated alike whatever the data.

    Retrieval runs after the charge, so what it returns must not make a query
    fail in a data-dependent way: anything that is not a
    :class:`ScoredDocument` becomes a placeholder (it keeps its slot in the
    store's ranking, so "fewer than k came back" still means "exhausted", and
    is never a candidate), and a lone surrogate in a text (which no tokenizer or
    model API accepts) becomes U+FFFD.

    >>> docs = clean_documents([ScoredDocument("a", "x" + chr(0xD800), 0.5), "not a document"])
    >>> [(d.text, d.is_padding) for d in docs]
    [('x\ufffd', False), ('', True)]
    """
    cleaned = []
    for slot, doc in enumerate(docs):
        if not isinstance(doc, ScoredDocument):
            cleaned.append(ScoredDocument.padding(slot))
            continue
        try:
            doc.text.encode("utf-8")
        except UnicodeEncodeError:
            text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in doc.text)
            doc = dataclasses.replace(doc, text=text)
        cleaned.append(doc)
    return cleaned


def retrieve_for(mechanism: Mechanism, retriever: Retriever, question: str) -> list[ScoredDocument]:
    """Retrieve what ``mechanism`` asks for (the retriever was checked by :func:`check_source`).

    A count n means the first n *privacy units* of the store's ranking, each by
    its first chunk (:func:`~dprag_core.retrieval.units.top_units`): one added
    unit then substitutes at most one unit, as the voting proofs need. ``None``
    means every chunk above the mechanism's public ``min_score`` (MuRAG,
    DP-ICL): a threshold keeps each chunk on its own merit, so one added unit
    adds only its own chunks; a retriever with its own range search
    (``retriever.above(question, tau)``, e.g. FAISS ``range_search``) is used
    directly, otherwise its k-honouring query grows until it has returned
    everything above the threshold (:func:`~dprag_core.retrieval.above.retrieve_above`).
    What comes back goes through :func:`clean_documents` first; placeholders
    for unusable documents never reach the mechanism.
    """
    n = mechanism.candidates_needed()

    def cleaned(q: str, k: int) -> list[ScoredDocument]:
        return clean_documents(retriever(q, k))

    if n is not None:
        return top_units(cleaned, question, n) if n > 0 else []
    tau = mechanism.min_score()
    assert tau is not None  # refused when the app was built (check_source)
    if has_range_search(retriever):
        found = clean_documents(retriever.above(question, tau))  # type: ignore[attr-defined]
        return [d for d in found if not d.is_padding and d.score > tau]
    return retrieve_above(cleaned, question, tau)


class PrivateRAG:
    """A DP RAG app in three parts: a retriever, a mechanism and a corpus budget.

    ``retriever(question, k)`` returns scored candidates, best first, and
    declares what it promises (:mod:`~dprag_core.retrieval.capabilities`): a
    top-n mechanism needs ``honours_k``, a threshold mechanism a native range
    search or ``honours_k``; any other retriever is refused here, with a
    ``ValueError`` naming the sources that qualify. ``accountant`` holds the
    corpus-level budget that each query's fixed cost is charged against before
    retrieval; it is required for every mechanism
    with a per-query cost (:func:`require_accountant`). ``max_question_tokens``
    bounds the question's length (:func:`check_query`). The question, the
    ``rng`` and the budget are checked before anything is charged; a failure
    after that (retrieval, generation) raises a data-free
    :class:`~dprag_core.errors.PrivateDataError`. ``public_fallback=True``
    (off by default) answers a query whose DP answer released nothing with the
    mechanism's model on the question alone, marked
    ``details["public_fallback"]`` (no extra privacy cost:
    :mod:`dprag_core.fallback`); a :class:`NonRAG` picks another model or prompt.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> rag = PrivateRAG(NonRAG(Api()), lambda q, k: [])
    >>> rag.answer("Who?", rng="seed")
    Traceback (most recent call last):
    ...
    TypeError: rng must be a numpy Generator, an int seed or None, got str
    """

    def __init__(
        self,
        mechanism: Mechanism,
        retriever: Retriever,
        *,
        accountant: CorpusAccountant | None = None,
        max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
        public_fallback: bool | NonRAG = False,
    ) -> None:
        check_mechanism(mechanism)
        if not callable(retriever):
            raise TypeError("retriever must be callable as retriever(question, k)")
        check_source(mechanism, retriever, qualifying=CORE_SOURCES)
        self.accountant = require_accountant(mechanism, accountant)
        self.mechanism = mechanism
        self.retriever = retriever
        self.max_question_tokens = positive_int("max_question_tokens", max_question_tokens)
        self.public_fallback = check_public_fallback(public_fallback, mechanism)

    def _start(self, question: object, rng: RngLike) -> tuple[str, np.random.Generator]:
        text = check_query(self.mechanism, question, max_question_tokens=self.max_question_tokens)
        generator = make_rng(rng)
        charge_query(self.mechanism, self.accountant)
        return text, generator

    def _retrieve(self, question: str) -> list[ScoredDocument]:
        name = getattr(self.retriever, "__name__", type(self.retriever).__name__)
        return guarded(
            "retrieval", name, lambda: retrieve_for(self.mechanism, self.retriever, question)
        )

    def _private_answer(self, question: str, rng: np.random.Generator) -> DPAnswer:
        answer = self.mechanism.answer(question, self._retrieve(question), rng=rng)
        return fallback_answer(answer, self.public_fallback, question)

    def _private_stream(self, question: str, rng: np.random.Generator) -> Iterator[str | DPAnswer]:
        items = self.mechanism.stream(question, self._retrieve(question), rng=rng)
        return fallback_stream(items, self.public_fallback, question)

    def answer(self, question: str, *, rng: RngLike = None) -> DPAnswer:
        """Check, charge, retrieve and answer one question."""
        text, generator = self._start(question, rng)
        name = self.mechanism.name
        return guarded("generation", name, lambda: self._private_answer(text, generator))

    def stream(self, question: str, *, rng: RngLike = None) -> Iterator[str | DPAnswer]:
        """Like :meth:`answer`, yielding released text chunks then the DPAnswer."""
        text, generator = self._start(question, rng)
        name = self.mechanism.name
        # only the mechanism's own generator holds the documents; it is closed on failure
        items = guarded("generation", name, lambda: self._private_stream(text, generator))
        while (item := guarded("generation", name, lambda: next(items, _END))) is not _END:
            yield item  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"PrivateRAG(mechanism={self.mechanism!r}, accountant={self.accountant!r})"
