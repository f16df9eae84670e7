"""The mechanism classes every algorithm and adapter builds on (docs/design.md §3).

A mechanism turns a question plus retrieved candidates into a :class:`DPAnswer`.
Adapters and :class:`dprag_core.pipeline.PrivateRAG` ask it how many candidates
it needs, charge its fixed per-query cost *before* retrieval, then call
:meth:`Mechanism.answer` (or :meth:`Mechanism.stream`). A wrapper
(:class:`MechanismWrapper`: MuRAG, MuRAG-Ada, NaiveMulti) runs another mechanism,
its ``inner``, and forwards what the app reads from it.

The rules a mechanism must keep are stated and checked in
:mod:`dprag_core.algorithms.contract` (``docs/new-mechanism.md``); every
constructor refuses an unknown keyword, naming the nearest valid one
(:class:`~dprag_core.validation.StrictKeywords`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import TextModel, TokenModel
from dprag_core.query_ids import Query, as_query, check_question
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import StrictKeywords

__all__ = [
    "CONTEXT_FIELDS",
    "QUESTION_FIELDS",
    "DetailKind",
    "Mechanism",
    "MechanismWrapper",
    "PublicModel",
    "StreamingMechanism",
    "Templates",
    "check_question",
    "check_template",
]

CONTEXT_FIELDS = ("context", "question")
"""The fields of a prompt built from documents (one voter's, one unit's)."""

QUESTION_FIELDS = ("question",)
"""The field of a public (no-context) prompt."""

Templates = Mapping[str, tuple[str, ...]]
"""A mechanism's template attributes and the fields each may use (:attr:`Mechanism.templates`)."""

DetailKind = Literal["count", "number", "flag", "name", "stop_reason", "answer_source"]
"""What a ``details`` value may be (:data:`~dprag_core.algorithms.contract.PUBLIC_DETAILS`):
a ``count`` (an int >= 0), a finite ``number``, a ``flag`` (a bool), a public
``name`` (a str), a ``stop_reason`` (:mod:`dprag_core.stop_reasons`) or an
``answer_source`` (:data:`~dprag_core.answers.ANSWER_SOURCES`)."""


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


_Init = TypeVar("_Init", bound=Callable[..., None])


def _then_check_templates(init: _Init) -> _Init:
    """Wrap a mechanism's ``__init__``: once the outermost constructor has run, check templates."""

    @functools.wraps(init)
    def built(self: Mechanism, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if type(self).__init__ is built:  # not a super().__init__ call: the mechanism is built
            self.check_templates()

    built.checks_templates = True  # type: ignore[attr-defined]
    return built  # type: ignore[return-value]


class Mechanism(StrictKeywords, ABC):
    """Base class of all answer mechanisms (DP and non-private baselines).

    Subclasses set :attr:`name` and implement :meth:`answer`; token-level ones
    override :meth:`stream` to yield text as each token is released. The
    contract (:func:`~dprag_core.algorithms.contract.check_mechanism`, run by
    every app when it is built) is stated in ``docs/new-mechanism.md``.
    A subclass's ``__init__`` refuses an unknown keyword:

    >>> class Top(Mechanism):
    ...     def __init__(self, *, k: int) -> None:
    ...         self.k = k
    ...     def answer(self, query, docs, *, rng=None): ...
    >>> Top(kk=3)
    Traceback (most recent call last):
    ...
    TypeError: Top got an unknown keyword argument 'kk'; did you mean 'k'?
    """

    name: str = "Mechanism"
    context_template_field: ClassVar[str | None] = None
    """The attribute holding the prompt built from documents (``{context}``,
    ``{question}``), replaced by :func:`~dprag_core.algorithms.templates.with_context_template`;
    None for a mechanism that builds no such prompt. It must be one of :attr:`templates`."""
    templates: ClassVar[Templates] = {}
    """Every ``str.format`` template attribute (named as its constructor parameter) and
    the fields it may use; ``{question}`` is always required. Checked as soon as
    the mechanism is built (:meth:`check_templates`), before anything is charged."""
    public_details: ClassVar[Mapping[str, DetailKind]] = {}
    """``details`` keys this mechanism adds to the shared public vocabulary
    (:data:`~dprag_core.algorithms.contract.PUBLIC_DETAILS`), each with its kind:
    declare only values that are public parameters or post-processings of DP outputs."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # StrictKeywords: unknown keywords refused
        own = cls.__dict__.get("__init__")
        if own is not None and not getattr(own, "checks_templates", False):
            cls.__init__ = _then_check_templates(own)  # type: ignore[method-assign]

    def check_templates(self) -> None:
        """Refuse a malformed template: a ValueError naming the parameter and its fields.

        Each of :attr:`templates` must be a ``str.format`` template using only
        its fields and containing ``{question}`` (and ``{context}`` for a prompt
        built from documents). It runs right after every mechanism's
        constructor, so that a template that would fail at query time, after
        the charge, fails when the mechanism is built.

        >>> from dprag_core.algorithms.ksa import DPKSA
        >>> class Api:
        ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
        >>> DPKSA(Api(), epsilon=2.0, response_template="Notes: {ctx}\\nQ: {question}")
        Traceback (most recent call last):
        ...
        ValueError: response_template must only use the fields {context}, {question}
        """
        for parameter, fields in self.templates.items():
            check_template(parameter, getattr(self, parameter, None), fields)

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

    def unit_ledger(self) -> Ledger | None:
        """The per-unit ledger this mechanism charges inside ``answer``, or None (the default).

        A mechanism that charges a :class:`~dprag_core.accounting.ledger.Ledger`
        while it runs (MuRAG, MuRAG-Ada) returns it: the apps record each
        query's id there (:meth:`~dprag_core.accounting.ledger.Ledger.claim`)
        before the query's private section opens, so a reused id is refused
        whatever the query would have charged.
        """
        return None

    @abstractmethod
    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Answer ``query`` from ``docs``.

        ``query``: the :class:`~dprag_core.query_ids.Query` the app passes (its
        question, id, retry flag and rng), or a plain question, which
        :func:`~dprag_core.query_ids.as_query` turns into a fresh Query (a new
        id, ``retry=False``, the generator of ``rng``: a seed or a generator).
        ``rng`` is for a plain question only; a Query carries its own.
        Implementations start with ``query = as_query(query, rng=rng)``.
        """

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield released text chunks, then the final :class:`DPAnswer` last (``query``: as
        in :meth:`answer`)."""
        result = self.answer(as_query(query, rng=rng), docs)
        if result.text:
            yield result.text
        yield result

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_template(name: str, template: object, fields: Sequence[str]) -> str:
    """Check that ``template`` is a ``str.format`` string accepting exactly ``fields``.

    ``{question}`` is required, and ``{context}`` when it is one of ``fields``
    (a prompt built from documents that leaves them out would charge every
    query for nothing); the message names the parameter and the fields.

    >>> check_template("template", "Q: {question}", ["question"])
    'Q: {question}'
    >>> check_template("response_template", "Notes: {ctx}\\nQ: {question}", CONTEXT_FIELDS)
    Traceback (most recent call last):
    ...
    ValueError: response_template must only use the fields {context}, {question}
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
    if "context" in fields and "{context}" not in template:
        raise ValueError(f"{name} must contain {{context}}")
    return template


class StreamingMechanism(Mechanism):
    """A mechanism that generates by streaming: :meth:`answer` is the last item of :meth:`stream`.

    Subclasses implement :meth:`stream` only (text chunks, then one
    :class:`DPAnswer` last), so that both entry points release exactly the same.

    >>> class Echo(StreamingMechanism):
    ...     def stream(self, query, docs, *, rng=None):
    ...         question = as_query(query, rng=rng).question
    ...         yield question
    ...         yield DPAnswer(question, None, "Echo")
    >>> Echo().answer("hi", []).text
    'hi'
    """

    @abstractmethod
    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield released text chunks, then the final :class:`DPAnswer` last.

        ``query``: a :class:`~dprag_core.query_ids.Query` or a plain question
        (:meth:`Mechanism.answer`).
        """

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Run :meth:`stream` to the end and return its :class:`DPAnswer`."""
        result: DPAnswer | None = None
        for item in self.stream(as_query(query, rng=rng), docs):
            if isinstance(item, DPAnswer):
                result = item
        if result is None:
            raise RuntimeError(f"{self.name}.stream ended without a DPAnswer")
        return result


class MechanismWrapper(StreamingMechanism):
    """A mechanism that runs another one, its ``inner`` (MuRAG, MuRAG-Ada, NaiveMulti).

    The app reads a few things from the mechanism it is given that only the
    inner mechanism knows: its model (:meth:`public_model`, for the public
    fallback and for counting a question's tokens), the accountant it was
    built with (:meth:`corpus_accountant`) and the per-unit ledger it charges
    (:meth:`unit_ledger`). A wrapper forwards all three by default;
    :func:`~dprag_core.algorithms.templates.with_context_template` replaces the
    prompt of ``inner``. Subclasses set ``inner`` in their constructor and
    implement :meth:`stream` (the text chunks of ``inner``, then their own
    :class:`DPAnswer`), :meth:`candidates_needed`/:meth:`min_score` and
    :meth:`query_cost` as their own analysis says.

    >>> class Same(MechanismWrapper):
    ...     def __init__(self, inner: Mechanism) -> None:
    ...         self.inner = inner
    ...     def stream(self, query, docs, *, rng=None):
    ...         yield from self.inner.stream(as_query(query, rng=rng), docs)
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["x"] * len(prompts)
    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> Same(NonRAG(Api(), max_new_tokens=5)).public_model().max_new_tokens
    5
    """

    inner: Mechanism

    def public_model(self) -> PublicModel | None:
        """``inner``'s."""
        return self.inner.public_model()

    def corpus_accountant(self) -> CorpusAccountant | None:
        """``inner``'s (a wrapper that hid it would be charged to another budget)."""
        return self.inner.corpus_accountant()

    def unit_ledger(self) -> Ledger | None:
        """``inner``'s (a wrapper that hid it would leave its query ids unclaimed)."""
        return self.inner.unit_ledger()
