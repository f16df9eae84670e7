"""The mechanism contract, stated once and checked: what every mechanism promises the apps.

An app (:class:`~dprag_core.pipeline.PrivateRAG`, ``DPRAGChain``,
``DPQueryEngine``) orders one query as: check the question, charge the
mechanism's cost, retrieve what it asks for, run it, release its answer. That
order is the privacy invariant, and it holds only if the mechanism keeps these
rules (``docs/new-mechanism.md`` explains each, with the claim to state and the
test suites to subclass, :mod:`dprag_core.testing.mechanisms`):

1. **It asks for its candidates** by exactly one route: ``candidates_needed()``
   (an int >= 0: the store's first n privacy units) or ``min_score()`` (a
   finite public score: every chunk above it), never both.
2. **Its cost is known before the query**: ``query_cost()`` is the
   :class:`~dprag_core.budget.Budget` charged to the corpus budget before
   retrieval, or None (a non-private baseline, or a mechanism that charges its
   own per-unit ledger inside ``answer`` before releasing anything, as MuRAG,
   and returns that ledger from ``unit_ledger()``: the app claims each query's
   id there before retrieval). A mechanism built with its own accountant
   returns it from ``corpus_accountant()`` and has a ``query_cost()`` to
   charge there.
3. **It names its model**: ``public_model()`` is the
   :class:`~dprag_core.algorithms.base.PublicModel` (model, ``{question}``-only
   template, answer length) of its public answer, or None without a model.
4. **Its templates are checked when it is built**: every ``str.format``
   template is declared in ``templates`` with its fields
   (:meth:`~dprag_core.algorithms.base.Mechanism.check_templates` runs after the
   constructor); an attribute that looks like one (named ``*template``, or a
   string with a ``{question}`` or ``{context}`` field) and is not declared is
   refused, since it would be checked only at query time, after the charge;
   ``context_template_field`` names the one built from documents.
5. **It releases through one answer**: ``stream()`` yields text chunks, then
   one :class:`~dprag_core.answers.DPAnswer` last, whose text is the chunks
   joined; ``answer()`` returns the same answer for the same ``rng``.
6. **Its details are public**: ``details["stop_reason"]`` is one of
   :data:`~dprag_core.stop_reasons.STOP_REASONS`, and every key is in
   :data:`PUBLIC_DETAILS` (or the mechanism's own ``public_details``) with a
   value of its kind: a public parameter, or a post-processing of what was
   DP-released. Never a document, a score, a vote, a count of retrieved items.
7. **A wrapper says so**: a mechanism that runs another one subclasses
   :class:`~dprag_core.algorithms.base.MechanismWrapper`, which forwards
   ``public_model()``, ``corpus_accountant()`` and ``unit_ledger()`` to its
   ``inner``.

:func:`check_mechanism` checks rules 1-4 and 7 without running anything (the
apps call it when they are built); :func:`check_answer` checks rules 5-6 on an
answer, and every app runs it on every release
(:class:`~dprag_core.pipeline.QueryRun`: a release that breaks it leaves as
the one fixed failure, never as itself); :func:`conformance` runs a mechanism
once through ``stream`` and ``answer`` and checks everything (the shared test
table runs it on every mechanism of dprag_core).

>>> from dprag_core.algorithms.baselines import NonRAG
>>> class Api:  # a text model
...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
>>> conformance(NonRAG(Api()), "Capital of France?", []).details
mappingproxy({'stop_reason': 'text_model', 'answer_source': 'model'})
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, get_args

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.algorithms.base import (
    QUESTION_FIELDS,
    DetailKind,
    Mechanism,
    MechanismWrapper,
    PublicModel,
    check_template,
)
from dprag_core.answers import ANSWER_SOURCES, NOTHING, DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import TextModel, TokenModel
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import STOP_REASONS, released_nothing

__all__ = [
    "DETAIL_KINDS",
    "PUBLIC_DETAILS",
    "PublicDetail",
    "check_answer",
    "check_mechanism",
    "conformance",
    "public_vocabulary",
]

DETAIL_KINDS: tuple[DetailKind, ...] = get_args(DetailKind)
"""The kinds a ``details`` value may have."""


class PublicDetail(NamedTuple):
    """One key of the public ``details`` vocabulary: its kind, and why its value is public."""

    kind: DetailKind
    why: str


_PARAMETER = "a public parameter of the mechanism, fixed before any data is seen"
_RELEASED = "a post-processing of the DP-released answer"

PUBLIC_DETAILS: Mapping[str, PublicDetail] = {
    "stop_reason": PublicDetail("stop_reason", "why the answer ended: " + _RELEASED),
    "tokens_generated": PublicDetail("count", "released tokens: " + _RELEASED),
    "tokens": PublicDetail("count", "released tokens (DP-ICL): " + _RELEASED),
    "private_tokens": PublicDetail("count", "released tokens chosen by a DP step: " + _RELEASED),
    "private_words": PublicDetail("count", "released words chosen by a DP step: " + _RELEASED),
    "stopped_at_eos": PublicDetail("flag", "the released text ended at EOS: " + _RELEASED),
    "max_new_tokens": PublicDetail("count", _PARAMETER),
    "m": PublicDetail("count", _PARAMETER),
    "k": PublicDetail("count", _PARAMETER),
    "unit": PublicDetail("name", _PARAMETER),
    "c_max": PublicDetail("count", "the private-token limit, computed from the parameters"),
    "c_max_bound": PublicDetail("name", "the composition bound that gave c_max"),
    "epsilon_token": PublicDetail("number", _PARAMETER),
    "delta_token": PublicDetail("number", _PARAMETER),
    "selection": PublicDetail("name", _PARAMETER),
    "threshold": PublicDetail(
        "number", "SVT's threshold (a parameter) or MuRAG-Ada's released bin edge (DP output)"
    ),
    "k_hat": PublicDetail("count", "DP-KSA's k, released by FindBestK"),
    "ptr_passed": PublicDetail("flag", "DP-KSA's PTR outcome, DP-released"),
    "keywords_released": PublicDetail("count", "size of the DP-released keyword set"),
    "epsilon_bound": PublicDetail("name", "the accounting bound that certified epsilon"),
    "accounting": PublicDetail("name", "individual (per-unit ledger) or sequential"),
    "epsilon_query": PublicDetail("number", _PARAMETER),
    "per_unit_budget": PublicDetail("number", _PARAMETER),
    "max_retrievals_per_unit": PublicDetail("number", "per_unit_budget / epsilon_query"),
    "epsilon_threshold": PublicDetail("number", _PARAMETER),
    "epsilon_rag": PublicDetail("number", _PARAMETER),
    "tau": PublicDetail("number", _PARAMETER),
    "bins_visited": PublicDetail("count", "MuRAG-Ada's noisy bin walk, DP-released"),
    "inner": PublicDetail("name", "the wrapped mechanism's name"),
    "query_id": PublicDetail("name", "a random id drawn for the query's ledger charges"),
    "cumulative_epsilon": PublicDetail("number", "budget spent: a function of the query count"),
    "cumulative_delta": PublicDetail("number", "budget spent: a function of the query count"),
    "total_budget": PublicDetail("number", "the corpus budget's total, a public parameter"),
    "public_fallback": PublicDetail("flag", "set by the app from the released text alone"),
    "charge": PublicDetail(
        "name",
        "set by the app: 'retry' when the query's id was accepted as a retry, before "
        "the private section, from the caller's own id and what the budget stores answered",
    ),
    "answer_source": PublicDetail(
        "answer_source",
        "whether released text was decided from the documents or by the model alone "
        "(dprag_core.answers.answer_source): " + _RELEASED,
    ),
}
"""Every ``details`` key a dprag mechanism (or app) may release, with its kind and why it is
public. A mechanism adds its own keys in ``public_details``; nothing else may appear."""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_KIND_CHECKS: Mapping[str, Callable[[object], bool]] = {
    "count": _is_count,
    "number": _is_number,
    "flag": lambda value: isinstance(value, bool),
    "name": lambda value: isinstance(value, str),
    "stop_reason": lambda value: value in STOP_REASONS,
    "answer_source": lambda value: value in ANSWER_SOURCES,
}


def public_vocabulary(mechanism: Mechanism) -> dict[str, DetailKind]:
    """The ``details`` keys ``mechanism`` may release (a wrapper: its inner's too), with kinds.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
    >>> public_vocabulary(NonRAG(Api()))["stop_reason"]
    'stop_reason'
    """
    vocabulary: dict[str, DetailKind] = {key: d.kind for key, d in PUBLIC_DETAILS.items()}
    chain: list[Mechanism] = [mechanism]
    while isinstance(chain[-1], MechanismWrapper):
        chain.append(chain[-1].inner)
    for link in reversed(chain):
        vocabulary.update(link.public_details)
    return vocabulary


def _fail(name: str, rule: str, got: object) -> ValueError:
    return ValueError(f"{name}: {rule}, got {got!r}")


def _check_retrieval(mechanism: Mechanism) -> None:
    name = mechanism.name
    needed = mechanism.candidates_needed()
    if needed is not None and not _is_count(needed):
        raise _fail(name, "candidates_needed() must return an int >= 0 or None", needed)
    tau = mechanism.min_score()
    if tau is not None and not _is_number(tau):
        raise _fail(name, "min_score() must return a finite number or None", tau)
    if needed is None and tau is None:
        raise ValueError(f"{name} asks for neither a candidate count nor a min_score")
    if needed is not None and tau is not None:
        raise ValueError(
            f"{name} asks for its candidates by two routes (candidates_needed()={needed!r} and "
            f"min_score()={tau!r}): return None from one of them (exactly one route)"
        )


def _check_cost(mechanism: Mechanism) -> None:
    name = mechanism.name
    cost = mechanism.query_cost()
    if cost is not None and not isinstance(cost, Budget):
        raise _fail(name, "query_cost() must return a Budget or None", type(cost).__name__)
    own = mechanism.corpus_accountant()
    if own is not None and not isinstance(own, CorpusAccountant):
        raise _fail(
            name, "corpus_accountant() must return a CorpusAccountant or None", type(own).__name__
        )
    if own is not None and cost is None:
        raise ValueError(f"{name} has its own accountant but no query_cost() to charge to it")
    ledger = mechanism.unit_ledger()
    if ledger is not None and not isinstance(ledger, Ledger):
        raise _fail(name, "unit_ledger() must return a dprag Ledger or None", type(ledger).__name__)


def _check_public_model(mechanism: Mechanism) -> None:
    name = mechanism.name
    public = mechanism.public_model()
    if public is None:
        return
    if not isinstance(public, PublicModel):
        raise _fail(name, "public_model() must return a PublicModel or None", type(public).__name__)
    check_template(f"{name}.public_model().template", public.template, QUESTION_FIELDS)
    if not _is_count(public.max_new_tokens) or public.max_new_tokens < 1:
        raise _fail(
            name, "public_model().max_new_tokens must be an int >= 1", public.max_new_tokens
        )
    if not isinstance(public.model, (TokenModel, TextModel)):
        raise _fail(
            name,
            "public_model().model must be a TokenModel or a TextModel",
            type(public.model).__name__,
        )


def _template_fields(text: str) -> set[str]:
    """The replacement fields of ``text`` read as a ``str.format`` template (none if malformed).

    >>> sorted(_template_fields("Q: {question} {0}")), _template_fields("{")
    (['0', 'question'], set())
    """
    try:
        return {field for _, field, _, _ in string.Formatter().parse(text) if field}
    except ValueError:
        return set()


def _undeclared_templates(mechanism: Mechanism) -> list[str]:
    """The string attributes of ``mechanism`` that look like templates but are not declared.

    A template is named like its parameter (``*template``) or uses the prompt
    fields ``{question}``/``{context}``; instance attributes and those of its
    classes below :class:`Mechanism` are read.
    """
    declared = set(mechanism.templates)
    found: dict[str, object] = {}
    for owner in reversed(type(mechanism).__mro__):
        if issubclass(owner, Mechanism) and owner is not Mechanism:
            found.update(vars(owner))
    found.update(getattr(mechanism, "__dict__", {}))
    return sorted(
        attr
        for attr, value in found.items()
        if isinstance(value, str)
        and attr not in declared
        and not attr.startswith("__")
        and (attr.endswith("template") or _template_fields(value) & {"question", "context"})
    )


def _check_templates(mechanism: Mechanism) -> None:
    name = mechanism.name
    field = mechanism.context_template_field
    if field is not None and "context" not in mechanism.templates.get(field, ()):
        raise ValueError(
            f"{name}: context_template_field {field!r} must be one of its templates "
            "with the field {context}"
        )
    mechanism.check_templates()
    undeclared = _undeclared_templates(mechanism)
    if undeclared:
        raise ValueError(
            f"{name}: .{undeclared[0]} looks like a prompt template but is not declared in "
            f"{type(mechanism).__name__}.templates (with its fields): declare it, so that it is "
            "checked when the mechanism is built, not at query time after the charge"
        )
    for key, kind in mechanism.public_details.items():
        if kind not in DETAIL_KINDS:
            raise _fail(name, f"public_details[{key!r}] must be one of {DETAIL_KINDS}", kind)


def _check_wrapping(mechanism: Mechanism, parameter: str) -> None:
    name = mechanism.name
    if not isinstance(mechanism, MechanismWrapper):
        fields = getattr(mechanism, "__dict__", {}).items()
        held = [attr for attr, value in fields if isinstance(value, Mechanism)]
        if held:
            raise TypeError(
                f"{name} holds a mechanism in .{held[0]} but is not a MechanismWrapper: "
                "subclass dprag_core.algorithms.base.MechanismWrapper, which forwards "
                "public_model() and corpus_accountant() to its inner"
            )
        return
    inner = check_mechanism(getattr(mechanism, "inner", None), parameter=f"{parameter}.inner")
    if mechanism.context_template_field is not None:
        raise ValueError(f"{name}: a wrapper's context template is its inner's (set None)")
    if mechanism.public_model() != inner.public_model():
        raise ValueError(f"{name}: public_model() must be its inner's")
    hidden = inner.corpus_accountant()
    if hidden is not None and mechanism.corpus_accountant() is not hidden:
        raise ValueError(f"{name}: corpus_accountant() must forward its inner's accountant")
    ledger = inner.unit_ledger()
    if ledger is not None and mechanism.unit_ledger() is not ledger:
        raise ValueError(f"{name}: unit_ledger() must forward its inner's ledger")


def check_mechanism(mechanism: object, *, parameter: str = "mechanism") -> Mechanism:
    """``mechanism``, checked against the contract (module docstring, rules 1-4 and 7).

    Runs nothing and charges nothing: every app calls it when it is built, so a
    mechanism that breaks a rule is refused before its first query. Raises a
    TypeError (not a Mechanism, a wrong type) or a ValueError naming the
    mechanism and the rule.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
    >>> check_mechanism(NonRAG(Api())).name
    'NonRAG'
    >>> check_mechanism("DPSparseVote")
    Traceback (most recent call last):
    ...
    TypeError: mechanism must be a dprag Mechanism, got str
    """
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"{parameter} must be a dprag Mechanism, got {type(mechanism).__name__}")
    if not isinstance(mechanism.name, str) or not mechanism.name.strip():
        raise _fail(type(mechanism).__name__, "name must be a non-empty str", mechanism.name)
    _check_retrieval(mechanism)
    _check_cost(mechanism)
    _check_public_model(mechanism)
    _check_templates(mechanism)
    _check_wrapping(mechanism, parameter)
    return mechanism


def check_answer(mechanism: Mechanism, answer: object) -> DPAnswer:
    """``answer``, checked as a release of ``mechanism`` (module docstring, rules 5-6).

    Every app runs it on every release, inside the query's private section.

    It must be a :class:`DPAnswer` named after the mechanism, carry the
    mechanism's ``query_cost()`` as its guarantee when it has one, a known
    ``stop_reason``, and only public details of the right kind.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
    >>> leaky = DPAnswer("", None, "NonRAG", {"stop_reason": "eos", "doc_ids": "d1"})
    >>> check_answer(NonRAG(Api()), leaky)
    Traceback (most recent call last):
    ...
    ValueError: NonRAG: details['doc_ids'] is not in the public vocabulary ...
    """
    name = mechanism.name
    if not isinstance(answer, DPAnswer):
        raise _fail(name, "an answer must be a DPAnswer", type(answer).__name__)
    if answer.mechanism != name:
        raise _fail(name, "an answer must carry the mechanism's name", answer.mechanism)
    cost = mechanism.query_cost()
    if cost is not None and answer.guarantee != cost:
        raise _fail(name, f"the guarantee must be query_cost() = {cost!r}", answer.guarantee)
    if "stop_reason" not in answer.details:
        raise ValueError(f"{name}: details must hold a stop_reason")
    source = answer.details.get("answer_source")
    if source is not None and (source == NOTHING) != released_nothing(answer):
        raise _fail(name, "details['answer_source'] must be 'none' exactly when empty", source)
    vocabulary = public_vocabulary(mechanism)
    for key, value in answer.details.items():
        kind = vocabulary.get(key)
        if kind is None:
            raise ValueError(
                f"{name}: details[{key!r}] is not in the public vocabulary (PUBLIC_DETAILS); "
                f"declare it in {type(mechanism).__name__}.public_details if it is public"
            )
        if not _KIND_CHECKS[kind](value):
            raise _fail(name, f"details[{key!r}] must be a {kind}", value)
    return answer


def _released(mechanism: Mechanism, items: Iterable[object]) -> DPAnswer:
    """The DPAnswer a stream ends with, checking that only text chunks come before it."""
    seen = list(items)
    if not seen or not isinstance(seen[-1], DPAnswer):
        raise ValueError(f"{mechanism.name}: stream() must end with a DPAnswer")
    chunks = seen[:-1]
    if not all(isinstance(chunk, str) for chunk in chunks):
        raise ValueError(f"{mechanism.name}: stream() must yield text chunks before its DPAnswer")
    answer = seen[-1]
    if "".join(chunks) != answer.text:  # type: ignore[arg-type]
        raise ValueError(f"{mechanism.name}: the streamed chunks must join to the answer's text")
    return answer


def conformance(
    mechanism: Mechanism,
    question: str,
    docs: Sequence[ScoredDocument],
    *,
    rng: RngLike = 0,
) -> DPAnswer:
    """Check ``mechanism`` against the whole contract by running it once each way.

    :func:`check_mechanism`, then ``stream`` (text chunks, one DPAnswer last,
    :func:`check_answer`) and ``answer`` with the same ``rng`` (the same text).
    For tests: it calls the mechanism directly, so nothing is charged to a
    corpus budget (a per-unit ledger is charged, as in any query). Returns the
    streamed answer.
    """
    check_mechanism(mechanism)
    streamed = check_answer(
        mechanism, _released(mechanism, mechanism.stream(question, docs, rng=rng))
    )
    answered = check_answer(mechanism, mechanism.answer(question, docs, rng=rng))
    if answered.text != streamed.text:
        raise ValueError(f"{mechanism.name}: answer() and stream() must release the same text")
    return streamed
