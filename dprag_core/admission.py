"""What an app must pass when it is built, and a query before its cost is charged.

:class:`~dprag_core.pipeline.QueryRun` (behind ``PrivateRAG``, ``DPRAGChain``
and ``DPQueryEngine``) and the selection steps run these checks; they are
functions of public inputs only (the app's parts, the question, the caller's
ids), so a refusal never depends on the private data and never spends budget.

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

>>> from dprag_core.budget import Budget
>>> check_accountant(Budget(1.0), parameter="budget")
Traceback (most recent call last):
...
TypeError: budget must be a CorpusAccountant, got Budget: pass budget=SQLiteCorpusAccountant(...
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism, check_question
from dprag_core.budget import Budget
from dprag_core.models.base import TokenModel
from dprag_core.retrieval.capabilities import requirement
from dprag_core.retrieval.scores import ScoreScale

__all__ = [
    "DEFAULT_MAX_QUESTION_TOKENS",
    "HOW_TO_SET_A_BUDGET",
    "charge",
    "charge_query",
    "check_accountant",
    "check_query",
    "check_source",
    "own_accountant",
    "question_tokens",
    "require_accountant",
]

DEFAULT_MAX_QUESTION_TOKENS = 512
"""Longest question accepted by default, in tokens of the mechanism's model."""

HOW_TO_SET_A_BUDGET = (
    'SQLiteCorpusAccountant(name="<corpus>", total=Budget(epsilon, delta), create=True) for '
    "a budget that survives restarts, is found by its name from any folder and is shared by "
    "the processes of one host, "
    "PostgresCorpusAccountant "
    "for several hosts, or InMemoryCorpusAccountant(Budget(epsilon, delta)) in a notebook "
    "or a test only"
)


def check_accountant(accountant: object, *, parameter: str = "accountant") -> CorpusAccountant:
    """``accountant`` if it is a :class:`CorpusAccountant`, else a TypeError saying how to make one.

    A bare ``Budget`` is refused too: turning it into a budget silently would
    pick a backend (in memory: per process, gone at restart) for the user.
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
    ...     def answer(self, query, docs, *, rng=None): ...
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
    """Everything about a question that can be checked before its budget is charged.

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
    mechanism: Mechanism,
    retriever: object,
    *,
    qualifying: str,
    name: str | None = None,
    scale: ScoreScale | None = None,
) -> None:
    """Refuse, when an app is built, a retriever that cannot give ``mechanism`` its candidates.

    Never checked at query time: whether a store capped its answer depends on
    the data. ``qualifying`` names the sources that do qualify, and ``name`` the
    source (default: its type), for the error. The source's public score range
    (``scale``, default the source's own ``scale`` attribute, a
    :class:`~dprag_core.retrieval.scores.ScoreScale`), when known, must hold the
    mechanism's ``min_score()``
    (:meth:`~dprag_core.retrieval.scores.ScoreScale.check_threshold`): else
    every query would be charged and then select nothing or fail.

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
    scale = scale if scale is not None else getattr(retriever, "scale", None)
    if tau is not None and scale is not None:
        if not isinstance(scale, ScoreScale):
            raise TypeError(f"{name}.scale must be a ScoreScale, got {type(scale).__name__}")
        scale.check_threshold(tau, parameter="the mechanism's min_score()")


def charge(accountant: CorpusAccountant, cost: Budget, *, query_id: str | None) -> bool:
    """Charge ``cost`` under ``query_id``; True when the accountant took it as a retry.

    The accountant records the charge atomically or raises
    (``PrivacyBudgetExhausted`` when it does not fit, ``LedgerOutcomeUnknown``
    when the store may or may not have recorded it). Its receipt: ``True`` (or
    ``None``, from an accountant that reports none) for a new charge, ``False``
    for the retry of a charge under this id that the same accountant left in
    doubt, which records nothing new. Any other reuse of a recorded id is the
    accountant's to refuse: an id buys at most one release
    (:mod:`dprag_core.query_ids`). ``None`` lets the accountant pick a fresh id.

    >>> from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    >>> charge(InMemoryCorpusAccountant(Budget(1.0)), Budget(0.5), query_id="q1")
    False
    """
    record: Callable[..., object] = accountant.charge
    return record(cost, query_id=query_id) is False


def charge_query(
    mechanism: Mechanism, accountant: CorpusAccountant | None, *, query_id: str | None = None
) -> bool:
    """Charge the mechanism's fixed per-query cost (:func:`charge`); True for an accepted retry.

    A mechanism built with its own accountant (NaiveMulti) is charged to that
    one only: ``accountant`` must be None or that same object, else a
    ValueError before anything is charged (an app whose accountant was
    replaced after it was built cannot bypass the mechanism's cap). Nothing is
    charged (False) for a mechanism without a fixed cost. ``query_id`` names
    this query's charge (:mod:`dprag_core.query_ids`); ``None`` lets the
    accountant give the charge a fresh id.
    """
    cost = mechanism.query_cost()
    bound = own_accountant(mechanism, accountant)
    target = accountant if bound is None else bound
    if target is None or cost is None:
        return False
    return charge(target, cost, query_id=query_id)
