"""``DPRAGChain``: a differentially private retriever-plus-generator Runnable.

Swap it in for the ``retriever | prompt | llm`` part of a LangChain RAG app:
the vector store (or retriever) and the embeddings stay as they are, and the
privacy comes from ``mechanism=`` (DPSparseVote, DPVote, DPKSA, DPICL, MuRAG,
or a non-private baseline). Moving between mechanisms changes only that field.

Every query follows dprag's order (``dprag_core.pipeline``): validate the
question (:func:`~dprag_core.pipeline.check_query`), charge the mechanism's
fixed cost to ``accountant`` (refused with ``PrivacyBudgetExhausted`` *before*
retrieval), retrieve, answer. ``accountant`` is required for every mechanism
with a per-query cost (there is no default budget:
:func:`~dprag_core.pipeline.require_accountant`); mechanisms with per-unit
ledgers (MuRAG) charge their ledger inside ``answer``.

What LangChain sees: the question, the DP answer (also as the tokens of a
nested chat-model run, :mod:`langchain_dprag._runs`), two custom events per
query, ``dprag_query_start`` (:func:`~dprag_core.events.start_payload`: the
mechanism and the (ε, δ) it charges) and ``dprag_query_end``
(:func:`~dprag_core.events.end_payload`: also the stop reason, the number of
private tokens, whether the public fallback answered), and a nested retriever run
that starts with the question and ends with an *empty* document list. What it
never sees: the retrieved documents (no ``context`` key, no callback payload,
no trace, no log record, no exception message or traceback frame, no
``repr``). The user's retriever runs sealed (without the surrounding callbacks,
tracing off), and the mechanism's LangChain model calls bypass the callback
machinery altogether (:mod:`langchain_dprag.models`). The trade-off: runs
*inside* a compound retriever (a re-ranker, a multi-query LLM) do not appear
in traces.

>>> from langchain_core.embeddings import DeterministicFakeEmbedding
>>> from langchain_core.vectorstores import InMemoryVectorStore
>>> from dprag_core.algorithms.baselines import NonRAG  # doctest: +SKIP
>>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
>>> budget = SQLiteCorpusAccountant("budget.db", total=Budget(10.0, 1e-5))  # doctest: +SKIP
>>> chain = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget)  # doctest: +SKIP
>>> chain.invoke("Which drug treats migraine?").answer  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping
from functools import cached_property
from typing import Any, Literal, TypeVar, Union

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
    dispatch_custom_event,
)
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import ChatPromptValue, PromptValue, StringPromptValue
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import run_in_executor
from langchain_core.runnables.utils import AddableDict
from langchain_core.vectorstores import VectorStore
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, model_validator
from typing_extensions import Self

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.contract import check_mechanism
from dprag_core.algorithms.templates import with_context_template
from dprag_core.budget import DPAnswer
from dprag_core.errors import guarded
from dprag_core.events import end_payload, start_payload
from dprag_core.fallback import check_public_fallback, fallback_answer, fallback_stream
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.pipeline import (
    DEFAULT_MAX_QUESTION_TOKENS,
    charge_query,
    check_query,
    check_question,
    check_source,
    require_accountant,
    retrieve_for,
)
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_int
from langchain_dprag._compat import message_text
from langchain_dprag._retrieval import LANGCHAIN_SOURCES, DocumentSource
from langchain_dprag._runs import AnswerRun
from langchain_dprag._sealed import Sealed, refuse_side_doors
from langchain_dprag._steps import WorkerSteps
from langchain_dprag.prompts import context_template
from langchain_dprag.vectorstores import COSINE, ScoreFunction, check_score_function

__all__ = [
    "QUERY_END_EVENT",
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

ChainInput = Union[str, Mapping[str, Any], PromptValue]  # noqa: UP007 (pydantic schema)
ChainOutput = Union["DPRAGOutput", str, dict[str, Any]]
OutputForm = Literal["object", "text", "dict"]
"""``"object"``: a :class:`DPRAGOutput`; ``"text"``: the answer string; ``"dict"``: a dict."""

_END = object()


class DPRAGOutput(BaseModel):
    """The result of :class:`DPRAGChain`: the answer and its privacy guarantee.

    ``epsilon``/``delta`` are the guarantee of this answer with respect to the
    corpus (``inf``/``1`` for a non-private baseline, ``0``/``0`` without the
    corpus). Streaming yields chunks that add up (``+``) to the full output:
    text chunks carry ``answer`` only; the last chunk carries the privacy fields.

    >>> (DPRAGOutput(answer="asp") + DPRAGOutput(answer="irin", epsilon=1.0, delta=0.0)).answer
    'aspirin'
    """

    answer: str = ""
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_answer(cls, result: DPAnswer, *, text: bool = True) -> DPRAGOutput:
        """The output for a mechanism's :class:`DPAnswer` (``text=False``: fields only)."""
        return cls(
            answer=result.text if text else "",
            epsilon=result.epsilon,
            delta=result.delta,
            mechanism=result.mechanism,
            details=dict(result.details),
        )

    def public(self) -> dict[str, Any]:
        """The privacy fields (everything but the answer).

        >>> DPRAGOutput(answer="x", epsilon=1.0, delta=0.0, mechanism="M").public()
        {'epsilon': 1.0, 'delta': 0.0, 'mechanism': 'M', 'details': {}}
        """
        return self.model_dump(exclude={"answer"})

    def __add__(self, other: DPRAGOutput) -> DPRAGOutput:
        return DPRAGOutput(
            answer=self.answer + other.answer,
            epsilon=self.epsilon if other.epsilon is None else other.epsilon,
            delta=self.delta if other.delta is None else other.delta,
            mechanism=self.mechanism if other.mechanism is None else other.mechanism,
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


_T = TypeVar("_T")


async def _relay(stream: AsyncIterator[_T]) -> AsyncGenerator[_T, None]:
    """``stream``'s items; closed early, it closes ``stream`` at once, not when collected."""
    try:
        async for item in stream:
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def _retrieved(step: asyncio.Future[Any]) -> None:
    """Mark the outcome of a step nobody awaits any more as seen (asyncio need not log it)."""
    if not step.cancelled():
        step.exception()


def _combine(chunks: Iterator[Any]) -> Any:
    final: Any = None
    for chunk in chunks:
        if final is None:
            final = chunk
        else:
            try:
                final = final + chunk
            except TypeError:
                final = chunk
    return final


class DPRAGChain(RunnableSerializable[ChainInput, ChainOutput]):
    """A DP RAG Runnable: retrieve from a private corpus, answer with a DP mechanism.

    Fields: exactly one of ``vectorstore`` (read with scores through
    ``score_function``, which declares the public score range; a store that
    says it returns distances is refused with a similarity function) or
    ``retriever`` (a ``BaseRetriever``, possibly configured or after query
    steps; scores from ``metadata[score_key]`` when the mechanism needs them),
    which qualifies when it is the store's own similarity retriever or with
    ``retriever_honours_k=True``: your promise that ``invoke(question, k=k)``
    returns the first ``min(k, N)`` documents of a fixed ranking, best first
    (see :mod:`langchain_dprag._retrieval` for why; any other source is refused
    here, when the chain is built); ``mechanism`` (which holds its model: a TokenModel for
    token-level mechanisms, a :class:`~langchain_dprag.models.LangChainTextModel`
    for text-level ones); ``accountant`` (the corpus budget each query's fixed
    cost is charged to, e.g. ``SQLiteCorpusAccountant("budget.db",
    total=Budget(10, 1e-5))``: required for DP mechanisms; MuRAG carries its
    own ledger); ``max_question_tokens`` (longest question accepted, in tokens
    of the mechanism's model); ``unit_key`` (metadata key
    naming the privacy unit; default: one document = one unit); ``rng`` (a seed,
    for tests and benchmarks only: the seed starts one generator that every query
    draws from, so queries never reuse noise); ``public_fallback`` (opt in: an
    empty DP answer is replaced by the model's answer to the question alone,
    marked ``details["public_fallback"]``; :mod:`dprag_core.fallback`);
    ``prompt`` (the app's ``PromptTemplate``/``ChatPromptTemplate``, with a
    ``context`` variable and the ``input_key`` one: it becomes the mechanism's
    per-document prompt, each voter's own documents as its context).

    Input: a string, a prompt value (its last message) or a mapping whose
    ``input_key`` (default ``"question"``; ``"input"`` as in
    ``create_retrieval_chain``, ``"query"`` as in ``RetrievalQA``) holds the
    question. Output, by ``output``: ``"object"`` (default) a
    :class:`DPRAGOutput`; ``"text"`` the answer string (then ``| StrOutputParser()``
    and other string steps stream token by token); ``"dict"`` the input mapping
    plus ``output_key`` (default ``"answer"``) and the privacy fields
    (``epsilon``, ``delta``, ``mechanism``, ``details``), streamed as addable
    dict chunks, so ``.pick("answer")`` streams tokens (``pick`` on another form
    picks from the dict form). ``stream``/``astream`` yield answer chunks as the
    mechanism releases them (text-level mechanisms yield once); the released
    chunks are also the tokens of a chat-model run nested under the chain run
    (``on_chat_model_stream`` in ``astream_events``; :mod:`langchain_dprag._runs`),
    whose only input is the question. The answer is
    epsilon-DP with respect to the corpus as the mechanism's docstring states;
    ``invoke`` on an exhausted ``accountant`` raises ``PrivacyBudgetExhausted``
    before anything is retrieved.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from langchain_core.language_models import FakeListChatModel
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> from langchain_dprag.models import LangChainTextModel
    >>> model = LangChainTextModel(FakeListChatModel(responses=["aspirin"]))
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    >>> chain = DPRAGChain(vectorstore=store, mechanism=NonRAG(model), output="text")
    >>> chain.invoke({"question": "Which drug treats migraine?"})
    'aspirin'
    >>> chain.pick("epsilon").invoke("Which drug?")  # NonRAG: no corpus, epsilon 0
    0.0
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mechanism: Mechanism
    vectorstore: VectorStore | None = None
    retriever: Runnable[Any, Any] | None = None
    """A ``BaseRetriever``, configured (``with_config``, ``bind``) or after query steps."""
    score_function: ScoreFunction = COSINE
    score_key: str = "score"
    unit_key: str | None = None
    retriever_honours_k: StrictBool = False
    """Your promise that ``retriever.invoke(q, k=k)`` returns the store's first min(k, N)."""
    accountant: CorpusAccountant | None = None
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS
    rng: RngLike = None
    """Seed or generator for the mechanism: tests and benchmarks only (default: OS entropy)."""
    input_key: str = "question"
    """The key of the question in a mapping input."""
    output: OutputForm = "object"
    """The output form: ``"object"`` (DPRAGOutput), ``"text"`` or ``"dict"``."""
    output_key: str = "answer"
    """The key of the answer in the ``"dict"`` form."""
    prompt: Any = None
    """The app's ``PromptTemplate``/``ChatPromptTemplate`` (``context`` and ``input_key``
    variables) for the mechanism's per-document prompts (:mod:`langchain_dprag.prompts`)."""
    public_fallback: StrictBool | NonRAG = False
    """Opt in: the model alone answers when the DP answer is empty (:mod:`dprag_core.fallback`)."""
    _fallback: NonRAG | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> Self:
        for name in ("input_key", "output_key"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        reserved = set(DPRAGOutput.model_fields) - {"answer"}
        if self.output_key in reserved:
            raise ValueError(
                f"output_key must not be one of the privacy fields {sorted(reserved)}, "
                f"got {self.output_key!r}"
            )
        check_mechanism(self.mechanism)
        if self.prompt is not None:
            template = context_template(self.prompt, question=self.input_key)
            object.__setattr__(self, "mechanism", with_context_template(self.mechanism, template))
        if (self.vectorstore is None) == (self.retriever is None):
            raise ValueError("pass exactly one of vectorstore= or retriever=")
        source = self._source
        if source.resolved.vectorstore is not None:
            check_score_function(source.resolved.vectorstore, self.score_function)
        check_source(self.mechanism, source, qualifying=LANGCHAIN_SOURCES, name=source.name)
        accountant = require_accountant(self.mechanism, self.accountant)
        object.__setattr__(self, "accountant", accountant)  # the one really charged
        positive_int("max_question_tokens", self.max_question_tokens)
        tau = self.mechanism.min_score()
        if tau is not None:
            self.score_function.check_threshold(tau, parameter="the mechanism's min_score()")
        self._fallback = check_public_fallback(self.public_fallback, self.mechanism)
        if self.rng is not None:  # one generator for all queries: a seed must not repeat noise
            object.__setattr__(self, "rng", make_rng(self.rng))
        return self

    def __repr_args__(self) -> Any:
        source = self.vectorstore if self.vectorstore is not None else self.retriever
        yield "mechanism", self.mechanism
        yield "source", type(source).__name__
        yield "score_function", self.score_function.name
        yield "unit_key", self.unit_key
        yield "accountant", self.accountant

    @cached_property
    def _source(self) -> DocumentSource:
        return DocumentSource(
            retriever=self.retriever,
            vectorstore=self.vectorstore,
            score_function=self.score_function,
            score_key=self.score_key,
            unit_key=self.unit_key,
            retriever_honours_k=self.retriever_honours_k,
        )

    # -- the pipeline: validate, charge, retrieve, answer -----------------------------

    def _start(self, question: str, run_manager: CallbackManagerForChainRun) -> str:
        text = check_query(self.mechanism, question, max_question_tokens=self.max_question_tokens)
        resolved = self._source.resolved
        if resolved.retriever is not None or resolved.steps:  # runs of the user's: see _sealed
            refuse_side_doors(self._source.name)
        charge_query(self.mechanism, self.accountant)
        self._event(QUERY_START_EVENT, start_payload(self.mechanism), run_manager)
        return text

    def _event(
        self, name: str, payload: dict[str, Any], run_manager: CallbackManagerForChainRun
    ) -> None:
        dispatch_custom_event(name, payload, config={"callbacks": run_manager.get_child()})

    def _retrieve(
        self, question: str, run_manager: CallbackManagerForChainRun
    ) -> list[ScoredDocument]:
        needs_scores = self.mechanism.candidates_needed() is None
        source = self._source
        retriever = source.bind(run_manager.get_child(), needs_scores=needs_scores)
        return guarded(
            "retrieval", source.name, lambda: retrieve_for(self.mechanism, retriever, question)
        )

    # below the guards of _invoke and _outputs: the only frames that hold documents
    def _private_answer(self, question: str, run_manager: CallbackManagerForChainRun) -> DPAnswer:
        docs = self._retrieve(question, run_manager)
        sealed = Sealed()
        result = sealed.call(self.mechanism.answer, question, docs, rng=self.rng)
        return sealed.call(fallback_answer, result, self._fallback, question)

    def _private_stream(
        self, question: str, run_manager: CallbackManagerForChainRun, sealed: Sealed
    ) -> Iterator[str | DPAnswer]:
        docs = self._retrieve(question, run_manager)
        items = sealed.call(self.mechanism.stream, question, docs, rng=self.rng)
        return fallback_stream(items, self._fallback, question)

    def _release(
        self, result: DPAnswer, answer: AnswerRun, run_manager: CallbackManagerForChainRun
    ) -> DPRAGOutput:
        public = end_payload(result)
        answer.end(public, text=result.text)
        self._event(QUERY_END_EVENT, public, run_manager)
        return DPRAGOutput.from_answer(result, text=False)

    # -- output forms ------------------------------------------------------------------

    def _inputs(self, value: object) -> dict[str, Any]:
        return dict(value) if self.output == "dict" and isinstance(value, Mapping) else {}

    def _shape(self, out: DPRAGOutput, inputs: Mapping[str, Any]) -> ChainOutput:
        if self.output == "text":
            return out.answer
        if self.output == "dict":
            return AddableDict({**inputs, self.output_key: out.answer, **out.public()})
        return out

    def _shape_chunk(self, chunk: DPRAGOutput) -> ChainOutput:
        if self.output == "text":
            return chunk.answer
        if self.output == "dict":
            fields = chunk.public() if chunk.mechanism is not None else {}
            return AddableDict({self.output_key: chunk.answer, **fields})
        return chunk

    # -- the runs ----------------------------------------------------------------------

    def _invoke(
        self, value: ChainInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> ChainOutput:
        question = self._start(question_of(value, self.input_key), run_manager)
        name = self.mechanism.name
        result = guarded("generation", name, lambda: self._private_answer(question, run_manager))
        answer = AnswerRun.start(run_manager.get_child(), question, name=name)
        out = self._release(result, answer, run_manager)
        return self._shape(out + DPRAGOutput(answer=result.text), self._inputs(value))

    def _outputs(
        self, question: str, run_manager: CallbackManagerForChainRun
    ) -> Iterator[DPRAGOutput]:
        question = self._start(question, run_manager)
        sealed, name = Sealed(), self.mechanism.name
        # only the mechanism's own generator holds the documents; a failure closes it
        items = guarded(
            "generation", name, lambda: self._private_stream(question, run_manager, sealed)
        )
        step = lambda: sealed.call(next, items, _END)  # noqa: E731
        answer: AnswerRun | None = None
        try:
            answer = AnswerRun.start(run_manager.get_child(), question, name=name)
            while (item := guarded("generation", name, step)) is not _END:
                if isinstance(item, DPAnswer):
                    yield self._release(item, answer, run_manager)
                elif item:
                    answer.token(str(item))
                    yield DPRAGOutput(answer=str(item))
        except BaseException as err:  # a callback's error, a consumer stopping early, ...
            if answer is not None:
                answer.error(err)  # the answer run never stays open
            raise
        finally:  # closed, a paused generator drops its frame (question, documents)
            close = getattr(items, "close", None)
            if close is not None:
                guarded("generation", name, lambda: sealed.call(close))

    def _chunks(
        self, value: object, run_manager: CallbackManagerForChainRun
    ) -> Generator[ChainOutput, None, None]:
        inputs = self._inputs(value)
        question = question_of(value, self.input_key)
        echoed = not inputs
        for chunk in self._outputs(question, run_manager):
            if not echoed:  # after the charge: a refused query yields nothing
                echoed = True
                yield AddableDict(inputs)
            yield self._shape_chunk(chunk)

    def _transform(
        self,
        inputs: Iterator[ChainInput],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[ChainOutput]:
        yield from self._chunks(_combine(inputs), run_manager)

    async def _atransform(
        self,
        inputs: AsyncIterator[ChainInput],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[ChainOutput]:
        chunks = [chunk async for chunk in inputs]
        outputs = WorkerSteps(self._chunks(_combine(iter(chunks)), run_manager.get_sync()))
        step: asyncio.Future[ChainOutput | None] | None = None
        try:
            while True:  # the mechanism is CPU/GPU-bound: step it in a worker thread
                step = asyncio.ensure_future(run_in_executor(config, outputs.next))
                chunk = await asyncio.shield(step)  # a cancelled wait lets the step finish
                if chunk is None:
                    return
                yield chunk
        finally:  # stopped early: close the answer run and the mechanism's stream, now or
            outputs.close()  # in the worker thread once a running step (cancelled or not) returns
            if step is not None:
                step.add_done_callback(_retrieved)

    # -- Runnable interface --------------------------------------------------------

    @property
    def OutputType(self) -> Any:
        """The output type of the chosen ``output`` form."""
        return {"object": DPRAGOutput, "text": str, "dict": dict[str, Any]}[self.output]

    def pick(self, keys: str | list[str]) -> RunnableSerializable[Any, Any]:
        """Pick ``keys`` from the ``"dict"`` form (``.pick("answer")`` streams tokens)."""
        if self.output != "dict":
            return self.model_copy(update={"output": "dict"}).pick(keys)
        return super().pick(keys)

    def invoke(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> ChainOutput:
        """Answer one question (charged before retrieval); see the class docstring."""
        return self._call_with_config(self._invoke, input, config, **kwargs)

    def transform(
        self,
        input: Iterator[ChainInput],
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Iterator[ChainOutput]:
        """Stream the answer to the (combined) input chunks."""
        yield from self._transform_stream_with_config(input, self._transform, config, **kwargs)

    def stream(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[ChainOutput]:
        """Yield answer chunks as the mechanism releases them, then the privacy fields."""
        yield from self.transform(iter([input]), config, **kwargs)

    def atransform(
        self,
        input: AsyncIterator[ChainInput],
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChainOutput]:
        """Async :meth:`transform`."""
        return _relay(
            self._atransform_stream_with_config(input, self._atransform, config, **kwargs)
        )

    def astream(
        self, input: ChainInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[ChainOutput]:
        """Async :meth:`stream`.

        Stopped early (``aclose()``, ``break``, a cancellation), it closes the
        chain run, the answer's chat-model run and the mechanism's generator:
        at once on ``aclose()``, when the event loop finalizes it after a
        ``break``, and once the running step returns after a cancellation.
        """

        async def single() -> AsyncIterator[ChainInput]:
            yield input

        return self.atransform(single(), config, **kwargs)
