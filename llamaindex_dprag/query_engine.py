"""A LlamaIndex query engine that answers with a dprag mechanism.

One line turns an index into a DP query engine::

    budget = SQLiteCorpusAccountant(name="records", total=Budget(10.0, 1e-5), create=True)
    engine = DPQueryEngine.from_index(index, mechanism=DPSparseVote(model, ...),
                                      budget=budget)
    response = engine.query("Which treatment did Alice receive?")
    response.metadata["epsilon"], response.metadata["delta"]

Every query is one :class:`~dprag_core.pipeline.QueryRun` (the core's order,
written once): validate the question, charge the mechanism's fixed cost to the
corpus budget (required for every DP mechanism: there is no default; a query
that would overspend raises :class:`PrivacyBudgetExhausted` before anything is
retrieved), retrieve exactly the candidates the mechanism asks for, then
answer. The privacy logic is the mechanism's; the engine only translates. A
source that cannot give the mechanism its candidates (one that does not honour
k, for a top-n mechanism; one that cannot return every node above the
threshold, for MuRAG, MuRAG-Ada, DP-ICL) is refused when the engine is built;
why each source keeps the neighbouring relation is in :mod:`llamaindex_dprag.sources`.

The query id (:mod:`dprag_core.query_ids`) travels in the query bundle:
``engine.query(DPQueryBundle(question, query_id="..."))``
(:mod:`llamaindex_dprag.bundles`); a fresh one otherwise. After
``LedgerOutcomeUnknown``, query again with the same id: the answer is charged
once and ``metadata["details"]["charge"]`` is ``"retry"``.

What leaves the engine: the DP answer and its guarantee (``Response.metadata``:
``epsilon``, ``delta``, ``mechanism``, ``details``, ``uses_corpus``,
``stop_reason``); an empty DP answer is ``""`` (``str(response)`` too, where
LlamaIndex's own ``Response`` prints "None"). Observers: the engine reports to
its ``callback_manager`` (default ``Settings.callback_manager``) a ``QUERY``
event (question, DP response) and to the instrumentation dispatcher
LlamaIndex's ``QueryStartEvent`` / ``QueryEndEvent`` plus the public
:class:`~llamaindex_dprag.events.DPQueryStartEvent` /
:class:`~llamaindex_dprag.events.DPQueryEndEvent`.
``source_nodes`` is empty, unless ``source_ids=True``: then it lists the
retrieved node ids as empty text nodes, and those ids are **not** covered by the
DP guarantee (which documents match a question is itself private). Retrieval
and generation run inside :func:`~llamaindex_dprag._quiet.private_section`, so
instrumentation and callback handlers see the engine's span (question, DP
answer) and nothing of the documents, and their exceptions surface as the one
fixed :class:`~dprag_core.errors.PrivateDataError`, the same class and message
whatever failed, without cause or traceback frames (the engine runs one
:class:`~dprag_core.pipeline.QueryRun`, whose private section is sealed).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypedDict, TypeVar

from llama_index.core import Settings
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.chat_engine.types import ChatMode
from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from typing_extensions import Unpack

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.algorithms.templates import with_context_template
from dprag_core.answers import DPAnswer
from dprag_core.events import end_payload, start_payload
from dprag_core.mechanisms.rng import RngLike
from dprag_core.pipeline import DEFAULT_MAX_QUESTION_TOKENS, QueryRun, Released, RunHooks
from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.cells import PublicPartition
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import (
    check_keywords,
    positive_int,
    strict_bool,
    strict_init,
    strict_keywords,
)
from llamaindex_dprag._quiet import private_section
from llamaindex_dprag.bundles import query_id_of
from llamaindex_dprag.events import DPQueryEndEvent, DPQueryStartEvent
from llamaindex_dprag.prompts import context_template
from llamaindex_dprag.responses import DPAsyncStreamingResponse, DPResponse, DPStreamingResponse
from llamaindex_dprag.sources import (
    LLAMAINDEX_SOURCES,
    CandidateSource,
    IndexSource,
    RetrieverSource,
)

__all__ = ["PRIVATE_CHAT_MODES", "DPQueryEngine", "EngineOptions", "answer_metadata"]

_T = TypeVar("_T")
dispatcher = get_dispatcher(__name__)
_CONVERSION = (
    "unit_key",
    "score_direction",
    "score_range",
    "metadata_mode",
    "exact_search",
    "partition",
)

PRIVATE_CHAT_MODES = {
    ChatMode.CONDENSE_QUESTION: "each turn is one DP query: your public LLM condenses the "
    "history (your users' messages and released DP answers) into a standalone question"
}
"""The chat modes :meth:`DPQueryEngine.as_chat_engine` builds, and why they are private."""

_NOT_PRIVATE = {
    ChatMode.SIMPLE: "it chats with the LLM alone and never queries this engine (use "
    "SimpleChatEngine.from_defaults(llm=...) for that)",
    ChatMode.CONTEXT: "it puts the retrieved nodes' text into the LLM's prompt, around the "
    "DP mechanism: the private documents would reach the LLM, its callbacks and its reply",
    ChatMode.CONDENSE_PLUS_CONTEXT: "it puts the retrieved nodes' text into the LLM's "
    "prompt, around the DP mechanism",
    ChatMode.BEST: "it means condense_plus_context, which puts the retrieved nodes' text into "
    "the LLM's prompt, around the DP mechanism",
    ChatMode.REACT: "an agent is yours to build: QueryEngineTool.from_defaults(engine) gives "
    "it this engine as a tool, each call one DP query charged to the budget",
    ChatMode.OPENAI: "an agent is yours to build: QueryEngineTool.from_defaults(engine) gives "
    "it this engine as a tool, each call one DP query charged to the budget",
}


_ANOTHER = "it does not answer each turn with one DP query of this engine"


class EngineOptions(TypedDict, total=False):
    """The options :meth:`DPQueryEngine.from_index` and ``from_retriever`` share.

    ``budget``: the corpus budget (a :class:`CorpusAccountant`, e.g.
    ``SQLiteCorpusAccountant(name="records", total=Budget(10, 1e-5), create=True)``) each
    query's fixed cost is charged to; required for every mechanism with a
    per-query cost (MuRAG-style mechanisms charge their own per-unit ledger,
    non-private baselines nothing). ``similarity_top_k``: ``None`` asks the
    store for exactly the mechanism's ``candidates_needed()`` (any other value
    is refused); for threshold mechanisms (MuRAG, DPICL), which get every
    candidate above their public ``min_score()`` by a growing search, the
    least k of each store query. ``max_question_tokens``: the longest question,
    in tokens of the mechanism's model. ``streaming=True``: a
    ``StreamingResponse`` yielding text as the mechanism releases it (its
    metadata filled in when the stream ends). ``source_ids=True``: the
    retrieved node ids as ``source_nodes`` (not covered by the guarantee).
    ``rng``: a seed or generator for tests only (one generator, made once).
    ``text_qa_template``: your app's prompt (``{context_str}``,
    ``{query_str}``) for the mechanism's per-document prompts
    (:mod:`llamaindex_dprag.prompts`). ``callback_manager``: default
    ``Settings.callback_manager``. ``public_fallback=True``: an empty DP answer
    is answered by the mechanism's model on the question alone, marked
    ``metadata["details"]["public_fallback"]`` (:mod:`dprag_core.fallback`).
    How nodes become scored documents (:mod:`llamaindex_dprag.sources`):
    ``exact_search=True`` (declares a vector store dprag does not know exact;
    never overrides what dprag knows), ``score_direction`` (``"distance"``
    for stores that return distances: negated, so higher = more relevant),
    ``score_range`` (the public range of
    the store's scores, e.g. ``(-1, 1)`` for
    :func:`~llamaindex_dprag.vector_stores.cosine_faiss_store`; scores are
    clipped into it), ``unit_key`` (the metadata key naming the privacy unit;
    default: the node's source document), ``metadata_mode``, ``partition`` (a
    public :class:`~dprag_core.retrieval.cells.PublicPartition`: only the cells
    the question probes are queried, exactly; nodes tagged with
    :func:`~llamaindex_dprag.cells.tag_nodes`; docs/design.md §11). ``deadline``
    (seconds, opt in): each query's response (or failure) leaves that long after
    its start, never sooner; work not done by then is the one fixed failure
    (:mod:`dprag_core.deadline`).

    >>> options: EngineOptions = {"streaming": True, "public_fallback": True}
    >>> "text_qa_template" in EngineOptions.__annotations__
    True
    """

    budget: CorpusAccountant | None
    similarity_top_k: int | None
    max_question_tokens: int
    score_direction: str | None
    score_range: tuple[float, float] | None
    exact_search: bool
    partition: PublicPartition | None
    unit_key: str | None
    metadata_mode: MetadataMode
    streaming: bool
    source_ids: bool
    rng: RngLike
    text_qa_template: Any
    callback_manager: CallbackManager | None
    public_fallback: bool | NonRAG
    deadline: float | None


def answer_metadata(answer: DPAnswer) -> dict[str, Any]:
    """The publishable facts of a DP answer, as ``Response.metadata``.

    ``answer_source`` says where the text came from (``"documents"``, ``"model"``
    alone or ``"none"``: :func:`dprag_core.answers.answer_source`), as the
    mechanism's ``details`` state it (None for a mechanism that does not).

    >>> from dprag_core.budget import Budget
    >>> answer_metadata(DPAnswer("x", Budget(1.0), "DPSparseVote"))["epsilon"]
    1.0
    """
    return {
        "epsilon": answer.epsilon,
        "delta": answer.delta,
        "mechanism": answer.mechanism,
        "details": dict(answer.details),
        "uses_corpus": answer.uses_corpus,
        "stop_reason": answer.details.get("stop_reason"),
        "answer_source": answer.details.get("answer_source"),
    }


class _Hooks(RunHooks):
    """One query's wrapping: retrieval and the mechanism in a private section; ids on opt-in."""

    def __init__(self, source_ids: bool) -> None:
        self.source_ids = source_ids
        self.ids: list[str] = []

    def retrieving(self, fn: Callable[[], _T]) -> _T:
        with private_section():
            return fn()

    def retrieved(self, docs: Sequence[ScoredDocument]) -> None:
        if self.source_ids:
            self.ids = [d.id for d in docs if not d.is_padding]

    def generating(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        with private_section():
            return fn(*args, **kwargs)

    def source_nodes(self) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=i, text="")) for i in self.ids]


class DPQueryEngine(CustomQueryEngine):
    """Answer questions over a private index with a dprag mechanism.

    Build it with :meth:`from_index` or :meth:`from_retriever`; its options
    are :class:`EngineOptions` (a misspelt one is a ``TypeError`` naming the
    nearest). The query id: module docstring.

    >>> # engine = DPQueryEngine.from_index(index, mechanism=mech, budget=budget)
    >>> # print(engine.query(DPQueryBundle("Which treatment did Alice get?", query_id="r-42")))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mechanism: Mechanism
    accountant: CorpusAccountant | None = None
    streaming: bool = False
    source_ids: bool = False
    similarity_top_k: int | None = Field(default=None, exclude=True)
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS

    _source: CandidateSource = PrivateAttr()
    _run: QueryRun = PrivateAttr()

    @strict_init
    def __init__(
        self,
        *,
        mechanism: Mechanism,
        source: CandidateSource,
        budget: CorpusAccountant | None = None,
        streaming: bool = False,
        source_ids: bool = False,
        similarity_top_k: int | None = None,
        max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
        rng: RngLike = None,
        callback_manager: CallbackManager | None = None,
        text_qa_template: Any = None,
        public_fallback: bool | NonRAG = False,
        deadline: float | None = None,
    ) -> None:
        run = _query_run(
            mechanism,
            source,
            budget=budget,
            max_question_tokens=max_question_tokens,
            public_fallback=public_fallback,
            rng=rng,
            callback_manager=callback_manager,
            text_qa_template=text_qa_template,
            deadline=deadline,
        )
        super().__init__(**_fields(run, streaming, source_ids, similarity_top_k, callback_manager))
        self._source, self._run = source, run

    @classmethod
    def from_index(
        cls,
        index: Any,
        *,
        mechanism: Mechanism,
        embed_model: Any = None,
        filters: Any = None,
        **options: Unpack[EngineOptions],
    ) -> DPQueryEngine:
        """A DP query engine over a ``VectorStoreIndex`` (its store queried directly).

        The one-line switch from LlamaIndex's tutorial: ``index.as_query_engine()``
        becomes ``DPQueryEngine.from_index(index, mechanism=..., budget=...)``
        (``options``: :class:`EngineOptions`).

        >>> # DPQueryEngine.from_index(index, mechanism=mech, budget=budget)
        """

        source = partial(IndexSource, index, embed_model=embed_model, filters=filters)
        named = ("mechanism", "embed_model", "filters")
        return _over(cls, "from_index", source, mechanism, dict(options), *named)

    @classmethod
    def from_retriever(
        cls,
        retriever: Any,
        *,
        mechanism: Mechanism,
        returns_everything: bool = False,
        **options: Unpack[EngineOptions],
    ) -> DPQueryEngine:
        """A DP query engine over a LlamaIndex retriever.

        A ``VectorIndexRetriever`` is replaced by a direct query of its index's
        store with its filters and mode. Its ``similarity_top_k`` is not the
        count: a top-n mechanism retrieves exactly its ``candidates_needed()``
        (a ``similarity_top_k`` you chose that differs is overridden, with a
        ``UserWarning`` saying so); for a threshold mechanism it is the least k
        of each store query.
        Any other ``BaseRetriever`` returns one list whatever the mechanism
        needs, so it is refused unless ``returns_everything=True``: your promise
        that ``retrieve`` returns its whole ranking (or every node above the
        mechanism's ``min_score``), best first. It is then called once per
        question inside a private section. The options are :meth:`from_index`'s.

        >>> # DPQueryEngine.from_retriever(index.as_retriever(), mechanism=mech, budget=budget)
        """
        source, given = _retriever_source(retriever, mechanism, returns_everything, dict(options))
        named = ("mechanism", "returns_everything")
        return _over(cls, "from_retriever", source, mechanism, given, *named)

    @strict_keywords
    def as_chat_engine(
        self,
        *,
        chat_mode: ChatMode | str = ChatMode.CONDENSE_QUESTION,
        llm: LLM | None = None,
        chat_history: list[ChatMessage] | None = None,
        condense_question_prompt: Any = None,
        verbose: bool = False,
    ) -> CondenseQuestionChatEngine:
        """A condensed-question chat engine: each turn is one DP query.

        Your app's public ``llm`` (default ``Settings.llm``) rewrites the chat
        history and the new message into one standalone question; this engine
        answers it (charged like any query). The history holds only your
        users' messages and the released DP answers, so the condensing LLM,
        its callbacks and its token usage see nothing private. That is the
        one private ``chat_mode`` (:data:`PRIVATE_CHAT_MODES`); every other
        mode is refused, saying why.

        >>> # engine.as_chat_engine(llm=Settings.llm).chat("And her dosage?")
        """
        _check_chat_mode(chat_mode)
        return _chat_engine(self, llm, chat_history, condense_question_prompt, verbose)

    # -- one query: the core's run, translated --------------------------------

    def _respond(self, query_str: str, query_id: str | None) -> Response | StreamingResponse:
        query = self._run.start(query_str, accountant=self.accountant, query_id=query_id)
        dispatcher.event(DPQueryStartEvent(**start_payload(self.mechanism)))
        hooks = _Hooks(self.source_ids)
        question = query.query.question
        retriever = _retriever(self._source, question, self.similarity_top_k, self.mechanism)
        if self.streaming:
            return _streaming(self._run.stream(query, retriever, hooks), hooks, self.mechanism)
        answer = self._run.answer(query, retriever, hooks)
        dispatcher.event(DPQueryEndEvent(**end_payload(answer)))
        return DPResponse(
            response=answer.text,
            source_nodes=hooks.source_nodes(),
            metadata=answer_metadata(answer),
        )

    # BaseQueryEngine's entry points (QueryStartEvent / QueryEndEvent, the trace),
    # not CustomQueryEngine's, which report neither; the input is checked first (its
    # event would refuse anything else with a bare pydantic ValidationError)
    def query(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        """Answer one question (a string, or a ``DPQueryBundle`` carrying the query's id)."""
        return BaseQueryEngine.query(self, _query_input(str_or_query_bundle))

    async def aquery(self, str_or_query_bundle: str | QueryBundle) -> RESPONSE_TYPE:
        """Async :meth:`query`."""
        return await BaseQueryEngine.aquery(self, _query_input(str_or_query_bundle))

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """One ``QUERY`` callback event (question, DP response) around the query."""
        with _reported(self.callback_manager, query_bundle) as report:
            return report(self._respond(query_bundle.query_str, query_id_of(query_bundle)))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """Async :meth:`_query` (a streaming engine's response is an ``AsyncStreamingResponse``)."""
        with _reported(self.callback_manager, query_bundle) as report:
            return report(await self._arespond(query_bundle.query_str, query_id_of(query_bundle)))

    async def _arespond(self, query_str: str, query_id: str | None) -> RESPONSE_TYPE:
        return _in_async(await asyncio.to_thread(self._respond, query_str, query_id))

    def custom_query(self, query_str: str) -> Response | StreamingResponse:
        """Answer one question (``Response``, or ``StreamingResponse`` when streaming)."""
        return self._respond(query_str, None)

    async def acustom_query(self, query_str: str) -> RESPONSE_TYPE:
        """Async :meth:`custom_query`: the work runs in a worker thread."""
        return await self._arespond(query_str, None)

    def __repr__(self) -> str:
        return (
            f"DPQueryEngine(mechanism={self.mechanism!r}, accountant={self.accountant!r}, "
            f"streaming={self.streaming}, source_ids={self.source_ids})"
        )


def _over(
    cls: type[DPQueryEngine],
    how: str,
    make_source: Callable[..., CandidateSource],
    mechanism: Mechanism,
    options: dict[str, Any],
    *named: str,
) -> DPQueryEngine:
    """The one construction path of ``from_index`` and ``from_retriever``: options checked,
    the source, then the engine."""
    check_keywords(f"DPQueryEngine.{how}", options, [*EngineOptions.__annotations__, *named])
    conversion = {k: options.pop(k) for k in _CONVERSION if k in options}
    return cls(mechanism=mechanism, source=make_source(**conversion), **options)


def _query_run(
    mechanism: Mechanism,
    source: CandidateSource,
    *,
    budget: CorpusAccountant | None,
    max_question_tokens: int,
    public_fallback: bool | NonRAG,
    rng: RngLike,
    callback_manager: CallbackManager | None,
    text_qa_template: Any,
    deadline: float | None = None,
) -> QueryRun:
    """The engine's source, callbacks and prompt checked, then its one query run (when built)."""
    if not callable(getattr(source, "bind", None)):
        raise TypeError("source must have bind(question) -> retriever")
    if callback_manager is not None and not isinstance(callback_manager, CallbackManager):
        raise TypeError(
            f"callback_manager must be a LlamaIndex CallbackManager, "
            f"got {type(callback_manager).__name__}"
        )
    if text_qa_template is not None and isinstance(mechanism, Mechanism):
        mechanism = with_context_template(mechanism, context_template(text_qa_template))
    return QueryRun(
        mechanism,
        source,
        qualifying=LLAMAINDEX_SOURCES,  # and the min_score in the source's .scale
        accountant=budget,
        max_question_tokens=max_question_tokens,
        public_fallback=public_fallback,
        parameter="budget",
        rng=rng,
        deadline=deadline,
    )


def _fields(
    run: QueryRun,
    streaming: bool,
    source_ids: bool,
    similarity_top_k: int | None,
    callback_manager: CallbackManager | None,
) -> dict[str, Any]:
    """The engine's pydantic fields, checked, from its query run and options."""
    return {
        "mechanism": run.mechanism,
        "accountant": run.accountant,
        "streaming": strict_bool("streaming", streaming),
        "source_ids": strict_bool("source_ids", source_ids),
        "similarity_top_k": _first_k(similarity_top_k, run.mechanism),
        "max_question_tokens": run.max_question_tokens,
        "callback_manager": callback_manager or Settings.callback_manager,
    }


def _retriever(
    source: CandidateSource, question: str, first_k: int | None, mechanism: Mechanism
) -> Retriever:
    """The source bound to ``question``; a threshold mechanism's store queries ask for at
    least ``first_k`` (``similarity_top_k``) and keep the first k."""
    bound = source.bind(question)
    if first_k is None or mechanism.candidates_needed() is not None:
        return bound
    wider = HonoursK(lambda q, k: list(bound(q, max(k, first_k)))[:k])
    return wider if source.honours_k else lambda q, k: wider(q, k)


def _query_input(value: object) -> str | QueryBundle:
    """A question string or a ``QueryBundle``, else a TypeError naming both (no text echoed).

    >>> _query_input(5)
    Traceback (most recent call last):
    ...
    TypeError: query takes a question string or a QueryBundle (DPQueryBundle(question, \
query_id=...) names the query), got int
    """
    if isinstance(value, (str, QueryBundle)):
        return value
    raise TypeError(
        "query takes a question string or a QueryBundle (DPQueryBundle(question, "
        f"query_id=...) names the query), got {type(value).__name__}"
    )


def _first_k(similarity_top_k: int | None, mechanism: Mechanism) -> int | None:
    """``similarity_top_k``, checked: a top-n mechanism takes exactly its own count."""
    if similarity_top_k is None:
        return None
    k = positive_int("similarity_top_k", similarity_top_k)
    needed = mechanism.candidates_needed()
    if needed is not None and k != needed:
        raise ValueError(
            f"similarity_top_k must be None or {needed} (what {mechanism.name} "
            f"needs: its analysis assumes exactly that many), got {k}"
        )
    return k


def _retriever_source(
    retriever: Any, mechanism: Mechanism, returns_everything: bool, options: dict[str, Any]
) -> tuple[Callable[..., CandidateSource], dict[str, Any]]:
    """``from_retriever``'s source and options: a vector retriever's store is read directly."""
    from llama_index.core.indices.vector_store.retrievers.retriever import (
        VectorIndexRetriever,
    )

    def source(**conversion: Any) -> CandidateSource:
        if isinstance(retriever, VectorIndexRetriever):
            return IndexSource.from_vector_retriever(retriever, **conversion)
        return RetrieverSource(retriever, returns_everything=returns_everything, **conversion)

    if isinstance(retriever, VectorIndexRetriever) and isinstance(mechanism, Mechanism):
        options.setdefault("similarity_top_k", _retriever_k(retriever, mechanism))
    return source, options


def _retriever_k(retriever: Any, mechanism: Mechanism) -> int | None:
    """What a ``VectorIndexRetriever``'s ``similarity_top_k`` becomes (``from_retriever``)."""
    k = int(retriever.similarity_top_k)
    needed = mechanism.candidates_needed()
    if needed is None:
        return k  # a threshold mechanism: the least k of each store query
    if k not in (needed, DEFAULT_SIMILARITY_TOP_K):  # a count the user chose: say it is not used
        warnings.warn(
            f"DPQueryEngine.from_retriever: the retriever's similarity_top_k={k} is "
            f"overridden: {mechanism.name} retrieves exactly its candidates_needed()={needed} "
            f"(build the retriever with similarity_top_k={needed} to silence this)",
            UserWarning,
            stacklevel=3,
        )
    return None


def _chat_engine(
    engine: DPQueryEngine,
    llm: LLM | None,
    chat_history: list[ChatMessage] | None,
    condense_question_prompt: Any,
    verbose: bool,
) -> CondenseQuestionChatEngine:
    """``as_chat_engine``'s condensed-question engine over ``engine``, with a public LLM."""
    public = llm if llm is not None else Settings.llm
    if not isinstance(public, LLM):
        raise TypeError(f"llm must be a LlamaIndex LLM, got {type(public).__name__}")
    return CondenseQuestionChatEngine.from_defaults(
        query_engine=engine,
        llm=public,
        chat_history=chat_history,
        condense_question_prompt=condense_question_prompt,
        verbose=verbose,
    )


def _check_chat_mode(chat_mode: object) -> None:
    try:
        mode = ChatMode(chat_mode)
    except ValueError:
        modes = ", ".join(repr(m.value) for m in ChatMode)
        raise ValueError(f"chat_mode must be one of {modes}, got {chat_mode!r}") from None
    if mode not in PRIVATE_CHAT_MODES:
        private = PRIVATE_CHAT_MODES[ChatMode.CONDENSE_QUESTION]
        raise ValueError(
            f"chat_mode={mode.value!r} is not available on a DP query engine: "
            f"{_NOT_PRIVATE.get(mode, _ANOTHER)}. The private mode is 'condense_question' "
            f"(the default): {private}"
        )


@contextmanager
def _reported(
    callbacks: CallbackManager, bundle: QueryBundle
) -> Iterator[Callable[[RESPONSE_TYPE], RESPONSE_TYPE]]:
    """A ``QUERY`` callback event: the question now, the response it is given at the end."""
    payload: dict[str, Any] = {EventPayload.QUERY_STR: bundle.query_str}
    with callbacks.event(CBEventType.QUERY, payload=payload) as event:

        def report(response: RESPONSE_TYPE) -> RESPONSE_TYPE:
            event.on_end(payload={EventPayload.RESPONSE: response})
            return response

        yield report


def _streaming(released: Released, hooks: _Hooks, mechanism: Mechanism) -> DPStreamingResponse:
    """A streaming engine's response: chunks as released, the metadata filled at the end."""
    metadata: dict[str, Any] = {"mechanism": mechanism.name}
    chunks = _chunks(released, metadata)
    return DPStreamingResponse(
        response_gen=chunks, source_nodes=hooks.source_nodes(), metadata=metadata
    )


def _chunks(released: Released, metadata: dict[str, Any]) -> Generator[str, None, None]:
    try:
        for item in released:
            if isinstance(item, DPAnswer):
                metadata.update(answer_metadata(item))
                dispatcher.event(DPQueryEndEvent(**end_payload(item)))
            elif item:
                yield str(item)
    finally:  # closed, the mechanism's paused generator drops its frame (the documents)
        released.close()


def _in_async(result: Response | StreamingResponse) -> Response | AsyncStreamingResponse:
    if not isinstance(result, StreamingResponse):
        return result
    return DPAsyncStreamingResponse(
        response_gen=_async_chunks(result.response_gen),
        source_nodes=result.source_nodes,
        metadata=result.metadata,
    )


async def _async_chunks(chunks: Generator[str, None, None]) -> AsyncGenerator[str, None]:
    end = object()
    while True:
        item = await asyncio.to_thread(next, chunks, end)
        if item is end:
            return
        yield str(item)
