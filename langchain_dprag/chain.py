"""``DPRAGChain``: a differentially private retriever-plus-generator Runnable.

Swap it in for the ``retriever | prompt | llm`` part of a LangChain RAG app:
the vector store (or retriever) and the embeddings stay as they are, and the
privacy comes from ``mechanism=`` (DPSparseVote, DPVote, DPKSA, DPICL, MuRAG,
or a non-private baseline). Moving between mechanisms changes only that field.

Every query is one :class:`~dprag_core.pipeline.QueryRun` (the core's order,
written once): validate the question, charge the mechanism's fixed cost to
``accountant`` (refused with ``PrivacyBudgetExhausted`` *before* retrieval),
retrieve, answer. ``accountant`` is required for every mechanism with a
per-query cost (there is no default budget:
:func:`~dprag_core.admission.require_accountant`); mechanisms with per-unit
ledgers (MuRAG) charge their ledger inside ``answer``. This module translates:
LangChain inputs and config in, LangChain outputs, runs and events out.

The query id (:mod:`dprag_core.query_ids`) is the chain run's ``run_id``
(``config={"run_id": uuid}``; in a batch, one per input, as LangChain assigns
them), or ``config={"configurable": {"dprag_query_id": "..."}}`` when the chain
sits inside a larger runnable (whose run takes the ``run_id``). After
``LedgerOutcomeUnknown``, invoke again with the same id: the answer is charged
once and its ``details["charge"]`` is ``"retry"``.

What LangChain sees: the question, the DP answer (also as the tokens of a
nested chat-model run, :mod:`langchain_dprag._runs`), two custom events per
query, ``dprag_query_start`` (:func:`~dprag_core.events.start_payload`: the
mechanism and the (ε, δ) it charges) and ``dprag_query_end``
(:func:`~dprag_core.events.end_payload`: also the stop reason, the number of
private tokens, whether the public fallback answered), one nested retriever run
per query that starts with the question and ends with an *empty* document list
(however many store calls the retrieval made), and on a failure after the
charge the one fixed :class:`~dprag_core.errors.PrivateDataError` (the chain
runs one :class:`~dprag_core.pipeline.QueryRun`, whose private section is
sealed). What it never sees: the retrieved documents (no ``context`` key, no
callback payload, no trace, no log record, no exception message or traceback
frame, no ``repr``). The user's retriever runs sealed (without the surrounding callbacks,
tracing off), and the mechanism's LangChain model calls bypass the callback
machinery altogether (:mod:`langchain_dprag.models`). The trade-off: runs
*inside* a compound retriever (a re-ranker, a multi-query LLM) do not appear
in traces.

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
>>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
>>> budget = SQLiteCorpusAccountant(
...     name="records", total=Budget(10.0, 1e-5), create=True)  # doctest: +SKIP
>>> chain = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget)  # doctest: +SKIP
>>> chain.invoke("Which drug treats migraine?").answer  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Literal, TypeVar, Union

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
    dispatch_custom_event,
)
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import BaseOutputParser
from langchain_core.prompt_values import ChatPromptValue, PromptValue, StringPromptValue
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import AddableDict
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, StrictBool, field_validator, model_validator
from typing_extensions import Self

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism, check_question
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.templates import with_context_template
from dprag_core.answers import MODEL, DPAnswer
from dprag_core.errors import private_failure
from dprag_core.events import end_payload, start_payload
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import (
    DEFAULT_MAX_QUESTION_TOKENS,
    QueryRun,
    Released,
    RunHooks,
    StartedQuery,
)
from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.stop_reasons import MODEL_ALONE_NOTE
from langchain_dprag._compat import message_text
from langchain_dprag._retrieval import LANGCHAIN_SOURCES, DocumentSource
from langchain_dprag._runs import AnswerRun
from langchain_dprag._sealed import Sealed, refuse_side_doors
from langchain_dprag._steps import relay, stepped_in_worker
from langchain_dprag._strict import KnownFields, accountant_or_none
from langchain_dprag.prompts import context_template
from langchain_dprag.vectorstores import ScoreFunction

__all__ = [
    "QUERY_END_EVENT",
    "QUERY_ID_KEY",
    "QUERY_START_EVENT",
    "ChainInput",
    "ChainOutput",
    "DPRAGChain",
    "DPRAGOutput",
    "OutputForm",
]

QUERY_START_EVENT = "dprag_query_start"
"""Dispatched once a query is charged, with :func:`~dprag_core.events.start_payload`."""
QUERY_END_EVENT = "dprag_query_end"
"""Dispatched when the answer is released, with :func:`~dprag_core.events.end_payload`."""
QUERY_ID_KEY = "dprag_query_id"
"""The ``configurable`` key of a caller-chosen query id (else the chain run's ``run_id``)."""

ChainInput = Union[str, Mapping[str, Any], PromptValue]  # noqa: UP007 (pydantic schema)
ChainOutput = Union["DPRAGOutput", str, dict[str, Any]]
OutputForm = Literal["object", "text", "dict"]
"""``"object"``: a :class:`DPRAGOutput`; ``"text"``: the answer string (an answer from the
model alone ends with :data:`~dprag_core.stop_reasons.MODEL_ALONE_NOTE`); ``"dict"``: a dict."""

_T = TypeVar("_T")


class DPRAGOutput(KnownFields):
    """The result of :class:`DPRAGChain`: the answer and its privacy guarantee.

    ``epsilon``/``delta`` are the guarantee of this answer with respect to the
    corpus (``inf``/``1`` for a non-private baseline, ``0``/``0`` without the
    corpus). ``answer_source`` says where its text came from
    (:func:`dprag_core.answers.answer_source`): ``"documents"`` (decided from the
    retrieved records), ``"model"`` (the model alone: a public prediction, a
    zero-shot answer, the public fallback) or ``"none"`` (empty); None for a
    mechanism that does not say. Streaming yields chunks that add up (``+``) to
    the full output: text chunks carry ``answer`` only; the last chunk carries
    the privacy fields.

    >>> (DPRAGOutput(answer="asp") + DPRAGOutput(answer="irin", epsilon=1.0, delta=0.0)).answer
    'aspirin'
    """

    answer: str = ""
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str | None = None
    answer_source: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_answer(cls, result: DPAnswer, *, text: bool = True) -> DPRAGOutput:
        """The output for a mechanism's :class:`DPAnswer` (``text=False``: fields only)."""
        return cls(
            answer=result.text if text else "",
            epsilon=result.epsilon,
            delta=result.delta,
            mechanism=result.mechanism,
            answer_source=result.details.get("answer_source"),
            details=dict(result.details),
        )

    def public(self) -> dict[str, Any]:
        """The privacy fields (everything but the answer).

        >>> DPRAGOutput(answer="x", epsilon=1.0, delta=0.0, mechanism="M").public()
        {'epsilon': 1.0, 'delta': 0.0, 'mechanism': 'M', 'answer_source': None, 'details': {}}
        """
        return self.model_dump(exclude={"answer"})

    def __add__(self, other: DPRAGOutput) -> DPRAGOutput:
        return DPRAGOutput(
            answer=self.answer + other.answer,
            epsilon=self.epsilon if other.epsilon is None else other.epsilon,
            delta=self.delta if other.delta is None else other.delta,
            mechanism=self.mechanism if other.mechanism is None else other.mechanism,
            answer_source=self.answer_source
            if other.answer_source is None
            else other.answer_source,
            details={**self.details, **other.details},
        )


def question_of(value: object, input_key: str = "question") -> str:
    """The question in a chain input: a string, ``{input_key: ...}`` or a prompt value.

    A prompt value gives its last message (a chat prompt) or its text.

    >>> question_of({"question": "Who?"}), question_of({"input": "Who?"}, "input")
    ('Who?', 'Who?')
    """
    if isinstance(value, StringPromptValue):
        value = value.text
    elif isinstance(value, ChatPromptValue):
        value = message_text(value.messages[-1]) if value.messages else ""
    elif isinstance(value, BaseMessage):
        value = message_text(value)
    elif isinstance(value, Mapping):
        if input_key not in value:
            raise ValueError(
                f"input must be a question string, a prompt value or a mapping with the key "
                f"{input_key!r} (input_key={input_key!r}), got the keys {sorted(map(str, value))}"
            )
        value = value[input_key]
    return check_question(value)


@dataclass(frozen=True)
class _Form:
    """The chain's input and output forms (``input_key``, ``output``, ``output_key``)."""

    input_key: str
    output: OutputForm
    output_key: str

    def __post_init__(self) -> None:
        for name in ("input_key", "output_key"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        reserved = set(DPRAGOutput.model_fields) - {"answer"}
        if self.output_key in reserved:
            raise ValueError(
                f"output_key must not be one of the privacy fields {sorted(reserved)}, "
                f"got {self.output_key!r}"
            )

    def inputs(self, value: object) -> dict[str, Any]:
        return dict(value) if self.output == "dict" and isinstance(value, Mapping) else {}

    def whole(self, out: DPRAGOutput, value: object) -> ChainOutput:
        if self.output == "text":
            return out.answer + _provenance(out, out.answer)
        if self.output == "dict":
            return AddableDict({**self.inputs(value), self.output_key: out.answer, **out.public()})
        return out

    def chunks(self, value: object, outputs: Iterator[DPRAGOutput]) -> Iterator[ChainOutput]:
        """The stream: the echoed input mapping first (``"dict"``), once charged, then chunks."""
        inputs = self.inputs(value)
        text = ""
        for n, chunk in enumerate(outputs):
            if inputs and n == 0:  # after the charge: a refused query yields nothing
                yield AddableDict(inputs)
            if self.output == "text":
                text += chunk.answer
                yield chunk.answer + _provenance(chunk, text)
            elif self.output == "dict":
                fields = chunk.public() if chunk.mechanism is not None else {}
                yield AddableDict({self.output_key: chunk.answer, **fields})
            else:
                yield chunk


def _provenance(out: DPRAGOutput, text: str) -> str:
    """What the ``"text"`` form adds to ``text``: the note of an answer from the model alone.

    A string keeps no field, and LangChain's output parsers rebuild the string
    (``StrOutputParser`` returns a plain ``str``), so the one place provenance
    survives every step after the chain is the text itself.

    >>> _provenance(DPRAGOutput(answer="555-0199", answer_source="model"), "555-0199")
    ' (from the model alone, not the records)'
    >>> _provenance(DPRAGOutput(answer="Lisbon", answer_source="documents"), "Lisbon")
    ''
    """
    if out.answer_source == MODEL and text.strip():
        return f" {MODEL_ALONE_NOTE}"
    return ""


def query_id_of(run_manager: CallbackManagerForChainRun, config: RunnableConfig) -> str:
    """The query id: ``configurable[QUERY_ID_KEY]`` if given, else the chain run's ``run_id``.

    Another ``dprag_``-prefixed ``configurable`` key is refused before the charge
    (a misspelt ``dprag_query_idd`` silently read as "no id" would lose the
    retry-once protection), naming the key dprag reads.
    """
    configurable = config.get("configurable") or {}
    unknown = sorted(k for k in configurable if k.startswith("dprag_") and k != QUERY_ID_KEY)
    if unknown:
        raise ValueError(
            f"configurable key {unknown[0]!r} is not one dprag reads: the query id's key is "
            f"{QUERY_ID_KEY!r} (the only dprag_ key of configurable)"
        )
    chosen = configurable.get(QUERY_ID_KEY)
    return str(run_manager.run_id) if chosen is None else chosen


async def _once(value: _T) -> AsyncIterator[_T]:
    yield value


class _Hooks(RunHooks):
    """One query's wrapping: side doors refused, retrieval as one nested run, mechanism sealed."""

    def __init__(self, source: DocumentSource, run: CallbackManagerForChainRun) -> None:
        self.sealed = Sealed()
        self.source, self.run = source, run
        self.question = ""

    def before_charge(self) -> None:
        resolved = self.source.resolved
        if resolved.retriever is not None or resolved.steps:  # runs of the user's: see _sealed
            refuse_side_doors(self.source.name)

    def retrieving(self, fn: Callable[[], _T]) -> _T:
        """One retriever run for the query's whole retrieval, however many store calls it
        makes (their number depends on the corpus); it ends with no document."""
        run = self.run.get_child().on_retriever_start(None, self.question, name=self.source.name)
        try:
            docs = fn()
        except Exception:
            run.on_retriever_error(private_failure())
            raise
        run.on_retriever_end([])
        return docs

    def generating(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        return self.sealed.call(fn, *args, **kwargs)

    @classmethod
    def start(
        cls,
        chain: DPRAGChain,
        value: object,
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> tuple[StartedQuery, _Hooks]:
        """Check and charge one query of ``chain`` (the core's run), then report its start."""
        hooks = cls(chain._source, run_manager)
        question, qid = question_of(value, chain.input_key), query_id_of(run_manager, config)
        query = chain._run.start(question, accountant=chain.accountant, query_id=qid, hooks=hooks)
        hooks.question = query.query.question
        hooks.event(QUERY_START_EVENT, start_payload(chain.mechanism))
        return query, hooks

    def retriever(self, mechanism: Mechanism) -> Retriever:
        return self.source.bind(needs_scores=mechanism.candidates_needed() is None)

    def event(self, name: str, payload: dict[str, Any]) -> None:
        dispatch_custom_event(name, payload, config={"callbacks": self.run.get_child()})

    def release(self, result: DPAnswer, answer: AnswerRun) -> DPRAGOutput:
        """The DP answer's public fields, reported to the answer run and as the end event."""
        public = end_payload(result)
        answer.end(public, text=result.text)
        self.event(QUERY_END_EVENT, public)
        return DPRAGOutput.from_answer(result, text=False)

    def outputs(self, released: Released, question: str, name: str) -> Iterator[DPRAGOutput]:
        """The stream's outputs: each released chunk, then the privacy fields."""
        answer: AnswerRun | None = None
        try:
            answer = AnswerRun.start(self.run.get_child(), question, name=name)
            for item in released:
                if isinstance(item, DPAnswer):
                    yield self.release(item, answer)
                elif item:
                    answer.token(str(item))
                    yield DPRAGOutput(answer=str(item))
        except BaseException as err:  # a callback's error, a consumer stopping early, ...
            if answer is not None:
                answer.error(err)  # the answer run never stays open
            raise
        finally:  # closed, a paused generator drops its frame (question, documents)
            released.close()


class DPRAGChain(KnownFields, RunnableSerializable[ChainInput, ChainOutput]):
    """A DP RAG Runnable: retrieve from a private corpus, answer with a DP mechanism.

    The source is exactly one of ``vectorstore`` (read through the store
    table, which establishes what its scores are and searches it exactly;
    ``score_function``, default the one for the store's metric, declares the
    public score range; a store or configuration dprag cannot establish, or
    knows to be approximate, is refused unless declared with
    ``exact_search=True``: :mod:`langchain_dprag.stores`) or ``retriever`` (a
    ``BaseRetriever``, possibly configured or after query steps; scores from
    ``metadata[score_key]``), which qualifies when it is the store's own
    similarity retriever or with ``retriever_honours_k=True`` (why:
    :mod:`langchain_dprag._retrieval`; any other source is refused when the
    chain is built). ``mechanism`` holds its model (a TokenModel, or a
    :class:`~langchain_dprag.models.LangChainTextModel` for text-level ones);
    ``accountant`` is the corpus budget each query's fixed cost is charged to,
    required for DP mechanisms (MuRAG carries its own ledger). The other
    fields are documented where they are declared. A misspelt keyword is a
    ``TypeError`` naming the nearest field.

    Input: a string, a prompt value (its last message) or a mapping whose
    ``input_key`` holds the question. Output, by ``output``: ``"object"`` (a
    :class:`DPRAGOutput`), ``"text"`` (the answer; ``chain | StrOutputParser()``
    composes this form; an answer from the model alone, ``answer_source="model"``,
    ends with :data:`~dprag_core.stop_reasons.MODEL_ALONE_NOTE` there, since a
    string carries no field) or ``"dict"`` (the input mapping plus ``output_key``
    and the privacy fields, so ``.pick("answer")`` streams tokens).
    ``stream``/``astream`` yield answer chunks as the mechanism releases them,
    also reported as the tokens of a nested chat-model run whose only input is
    the question (:mod:`langchain_dprag._runs`). An exhausted ``accountant``
    raises ``PrivacyBudgetExhausted`` before anything is retrieved. The query
    id: module docstring.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.language_models import FakeListChatModel
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> from langchain_dprag.models import LangChainTextModel
    >>> model = LangChainTextModel(FakeListChatModel(responses=["aspirin"]))
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    >>> ids = store.add_texts(["Patient A takes Zorvex for migraine."])
    >>> chain = DPRAGChain(vectorstore=store, mechanism=NonRAG(model), output="text")
    >>> chain.invoke({"question": "Which drug treats migraine?"})  # NonRAG: the model alone
    'aspirin (from the model alone, not the records)'
    >>> chain.pick("epsilon").invoke("Which drug?")  # NonRAG: no corpus, epsilon 0
    0.0
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mechanism: Mechanism
    vectorstore: VectorStore | None = None
    retriever: Runnable[Any, Any] | None = None
    """A ``BaseRetriever``, configured (``with_config``, ``bind``) or after query steps."""
    score_function: ScoreFunction | None = None
    """How to read scores: ``None`` picks the one for the store's metric (a retriever's
    ``metadata[score_key]`` is read with ``COSINE``); see :mod:`langchain_dprag.vectorstores`."""
    exact_search: StrictBool = False
    """Your promise that a store dprag does not know searches exactly (never overrides what
    dprag knows: an approximate index is refused); see :mod:`langchain_dprag.stores`."""
    filter: Any = None
    """With ``vectorstore``: a filter in the store's own format, applied by its exact search
    (:mod:`langchain_dprag.stores`); a retriever carries its own (``search_kwargs``)."""
    score_key: str = "score"
    unit_key: str | None = None
    """The metadata key naming the privacy unit (default: one document = one unit)."""
    retriever_honours_k: StrictBool = False
    """Your promise that ``retriever.invoke(q, k=k)`` returns the store's first min(k, N)."""
    partition: PublicPartition | None = None
    """A public partition: search only the cells the question probes, exactly
    (documents added with ``langchain_dprag.cells.add_documents``; docs/design.md §11)."""
    accountant: CorpusAccountant | None = None
    """E.g. ``SQLiteCorpusAccountant(name="records", total=Budget(10, 1e-5), create=True)``."""
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS
    """The longest question accepted, in tokens of the mechanism's model."""
    rng: RngLike = None
    """A seed for tests and benchmarks only: one generator for all queries (default: OS entropy)."""
    deadline: float | None = None
    """Opt in: seconds after its start at which each query's answer (or failure) leaves,
    never sooner; work not done by then is the one fixed failure (:mod:`dprag_core.deadline`)."""
    input_key: str = "question"
    """The question's key in a mapping input (``"input"``, ``"query"`` as LangChain's chains)."""
    output: OutputForm = "object"
    """The output form: ``"object"`` (DPRAGOutput), ``"text"`` or ``"dict"``."""
    output_key: str = "answer"
    """The key of the answer in the ``"dict"`` form."""
    prompt: Any = None
    """The app's ``PromptTemplate``/``ChatPromptTemplate`` (``context`` and ``input_key``
    variables) for the mechanism's per-document prompts (:mod:`langchain_dprag.prompts`)."""
    public_fallback: StrictBool | NonRAG = False
    """Opt in: the model alone answers an empty DP answer (:mod:`dprag_core.fallback`)."""
    _run: QueryRun = PrivateAttr()

    _accountant = field_validator("accountant", mode="before")(accountant_or_none)

    @model_validator(mode="after")
    def _check(self) -> Self:
        self._run = _query_run(self)
        object.__setattr__(self, "accountant", self._run.accountant)  # the one really charged
        object.__setattr__(self, "rng", self._run.rng)  # one generator for all queries
        return self

    def __repr_args__(self) -> Any:
        source = self.vectorstore if self.vectorstore is not None else self.retriever
        yield "mechanism", self.mechanism
        yield "source", type(source).__name__
        yield "score_function", self._source.scale.name
        yield "unit_key", self.unit_key
        yield "accountant", self.accountant

    @property
    def _form(self) -> _Form:
        return _Form(self.input_key, self.output, self.output_key)

    @cached_property
    def _source(self) -> DocumentSource:
        return DocumentSource(**{name: getattr(self, name) for name in _SOURCE_FIELDS})

    # -- one query: the core's run, translated ------------------------------------------

    def _invoke(
        self, value: ChainInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> ChainOutput:
        query, hooks = _Hooks.start(self, value, run_manager, config)
        result = self._run.answer(query, hooks.retriever(self.mechanism), hooks)
        answer = AnswerRun.start(
            run_manager.get_child(), query.query.question, name=self.mechanism.name
        )
        out = hooks.release(result, answer) + DPRAGOutput(answer=result.text)
        return self._form.whole(out, value)

    def _outputs(
        self, value: object, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> Iterator[DPRAGOutput]:
        query, hooks = _Hooks.start(self, value, run_manager, config)
        released = self._run.stream(query, hooks.retriever(self.mechanism), hooks)
        yield from hooks.outputs(released, query.query.question, self.mechanism.name)

    def _chunks(
        self, inputs: Iterator[Any], run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> Iterator[ChainOutput]:
        value = next(inputs)
        return self._form.chunks(value, self._outputs(value, run_manager, config))

    # -- Runnable interface --------------------------------------------------------

    @property
    def OutputType(self) -> Any:
        """The output type of the chosen ``output`` form."""
        return {"object": DPRAGOutput, "text": str, "dict": dict[str, Any]}[self.output]

    def pick(self, keys: str | list[str]) -> RunnableSerializable[Any, Any]:
        """Pick ``keys`` from the ``"dict"`` form (``.pick("answer")`` streams tokens).

        A misspelt key (``pick("answr")``) is refused, naming the nearest of the
        chain's own keys, instead of picking None: a key of a mapping input passes.
        """
        own = (
            self.output_key,
            "epsilon",
            "delta",
            "mechanism",
            "answer_source",
            "details",
            self.input_key,
        )
        for key in [keys] if isinstance(keys, str) else keys:
            near = difflib.get_close_matches(key, own, n=1, cutoff=0.75)
            if key not in own and near:
                raise ValueError(
                    f"pick: the chain's output has no key {key!r}; did you mean {near[0]!r}? "
                    f"(its keys: {', '.join(own)}, and those of a mapping input)"
                )
        if self.output != "dict":
            return self.model_copy(update={"output": "dict"}).pick(keys)
        return super().pick(keys)

    def __or__(self, other: Any) -> RunnableSerializable[Any, Any]:
        """Compose; an output parser next (``| StrOutputParser()``) reads the ``"text"`` form.

        The default ``"object"`` form is switched to ``"text"`` for it; the
        ``"dict"`` form is refused, naming the fix.
        """
        return _compose(self, other)

    def invoke(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> ChainOutput:
        """Answer one question (charged before retrieval); see the class docstring."""
        return self._call_with_config(self._invoke, input, config, **kwargs)

    def stream(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[ChainOutput]:
        """Yield answer chunks as the mechanism releases them, then the privacy fields.

        (In a pipeline, LangChain's default ``transform`` gathers the input, then streams.)
        """
        return self._transform_stream_with_config(iter([input]), self._chunks, config, **kwargs)

    def astream(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[ChainOutput]:
        """Async :meth:`stream`: each step of the mechanism runs in a worker thread.

        Stopped early (``aclose()``, ``break``, a cancellation), it closes the
        chain run, the answer's chat-model run and the mechanism's generator:
        at once on ``aclose()``, when the event loop finalizes it after a
        ``break``, and once the running step returns after a cancellation.
        """
        chunks = partial(_achunks, self)
        return relay(self._atransform_stream_with_config(_once(input), chunks, config, **kwargs))


_SOURCE_FIELDS = (
    "retriever",
    "vectorstore",
    "score_function",
    "score_key",
    "unit_key",
    "retriever_honours_k",
    "exact_search",
    "filter",
    "partition",
)
"""The chain's fields that configure its :class:`~langchain_dprag._retrieval.DocumentSource`."""


def _query_run(chain: DPRAGChain) -> QueryRun:
    """The chain's forms, prompt and source checked, then its one query run (when built)."""
    chain._form  # noqa: B018 (checks the forms)
    if chain.prompt is not None:
        template = context_template(chain.prompt, question=chain.input_key)
        object.__setattr__(chain, "mechanism", with_context_template(chain.mechanism, template))
    if (chain.vectorstore is None) == (chain.retriever is None):
        raise ValueError("pass exactly one of vectorstore= or retriever=")
    source = chain._source
    source.check()
    return QueryRun(
        chain.mechanism,
        source,
        qualifying=LANGCHAIN_SOURCES,
        accountant=chain.accountant,
        max_question_tokens=chain.max_question_tokens,
        public_fallback=chain.public_fallback,
        source_name=source.name,
        rng=chain.rng,
        deadline=chain.deadline,
    )


def _compose(chain: DPRAGChain, other: Any) -> RunnableSerializable[Any, Any]:
    """``chain | other`` (``DPRAGChain.__or__``): an output parser next reads the text form."""
    parser = getattr(other, "first", other)
    if not isinstance(parser, BaseOutputParser) or chain.output == "text":
        composed: RunnableSerializable[Any, Any] = super(DPRAGChain, chain).__or__(other)
        return composed
    if chain.output == "dict":
        raise TypeError(
            f"{type(parser).__name__} parses text, but this chain outputs dicts: build it "
            "with output='text', or compose chain.pick('answer') | ..."
        )
    text_form: DPRAGChain = chain.model_copy(update={"output": "text"})
    return text_form.__or__(other)


async def _achunks(
    chain: DPRAGChain,
    inputs: AsyncIterator[ChainInput],
    run_manager: AsyncCallbackManagerForChainRun,
    config: RunnableConfig,
) -> AsyncIterator[ChainOutput]:
    """``astream``'s transform: the sync chunks, each step run in a worker thread."""
    outputs = chain._chunks(iter([await anext(inputs)]), run_manager.get_sync(), config)
    async with aclosing(stepped_in_worker(outputs, config)) as steps:
        async for chunk in steps:
            yield chunk
