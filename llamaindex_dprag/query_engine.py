"""A LlamaIndex query engine that answers with a dprag mechanism (DESIGN §7).

One line turns an index into a DP query engine::

    budget = SQLiteCorpusAccountant("budget.db", total=Budget(10.0, 1e-5))
    engine = DPQueryEngine.from_index(index, mechanism=DPSparseVote(model, ...),
                                      budget=budget)
    response = engine.query("Which treatment did Alice receive?")
    response.metadata["epsilon"], response.metadata["delta"]

Every query follows :mod:`dprag_core.pipeline`'s order: validate the question
(:func:`~dprag_core.pipeline.check_query`), charge the mechanism's fixed cost
to the corpus budget (required for every DP mechanism: there is no default; a
query that would overspend raises :class:`PrivacyBudgetExhausted` before anything is retrieved),
retrieve exactly the candidates the mechanism asks for, then answer. The
privacy logic is the mechanism's; the engine only translates. A source that
cannot give the mechanism its candidates (one that does not honour k, for a
top-n mechanism; one that cannot return every node above the threshold, for
MuRAG, MuRAG-Ada, DP-ICL) is refused when the engine is built; why each source
keeps the neighbouring relation is in :mod:`llamaindex_dprag.sources`.

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
answer) and nothing of the documents, and their exceptions surface as a fresh
:class:`~dprag_core.errors.PrivateDataError` without their message, cause or
traceback frames (:mod:`dprag_core.errors`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Sequence
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
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from typing_extensions import Unpack

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
    check_source,
    require_accountant,
    retrieve_for,
)
from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_int, strict_bool
from llamaindex_dprag._quiet import private_section
from llamaindex_dprag.events import DPQueryEndEvent, DPQueryStartEvent
from llamaindex_dprag.prompts import context_template
from llamaindex_dprag.responses import DPAsyncStreamingResponse, DPResponse, DPStreamingResponse
from llamaindex_dprag.sources import (
    LLAMAINDEX_SOURCES,
    CandidateSource,
    IndexSource,
    RetrieverSource,
)

__all__ = ["DPQueryEngine", "EngineOptions", "answer_metadata"]

_T = TypeVar("_T")
_END = object()
dispatcher = get_dispatcher(__name__)
_CONVERSION = ("unit_key", "score_direction", "score_range", "metadata_mode")


class EngineOptions(TypedDict, total=False):
    """The options :meth:`DPQueryEngine.from_index` and ``from_retriever`` share.

    ``unit_key``, ``score_direction``, ``score_range`` and ``metadata_mode``
    say how nodes become scored documents (:mod:`llamaindex_dprag.sources`);
    the others are :class:`DPQueryEngine`'s.

    >>> options: EngineOptions = {"streaming": True, "public_fallback": True}
    >>> "text_qa_template" in EngineOptions.__annotations__
    True
    """

    budget: CorpusAccountant | None
    similarity_top_k: int | None
    max_question_tokens: int
    score_direction: str
    score_range: tuple[float, float] | None
    unit_key: str | None
    metadata_mode: MetadataMode
    streaming: bool
    source_ids: bool
    rng: RngLike
    text_qa_template: Any
    callback_manager: CallbackManager | None
    public_fallback: bool | NonRAG


def answer_metadata(answer: DPAnswer) -> dict[str, Any]:
    """The publishable facts of a DP answer, as ``Response.metadata``.

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
    }


def _private(stage: str, where: str, fn: Callable[[], _T]) -> _T:
    with private_section():
        return guarded(stage, where, fn)


class DPQueryEngine(CustomQueryEngine):
    """Answer questions over a private index with a dprag mechanism.

    Build it with :meth:`from_index` or :meth:`from_retriever` (options:
    :class:`EngineOptions`). ``budget`` (a :class:`CorpusAccountant`, e.g.
    ``SQLiteCorpusAccountant("budget.db", total=Budget(10, 1e-5))``) is the
    corpus-level allowance each query's fixed cost is charged against; it is
    required for every mechanism with a per-query cost
    (:func:`~dprag_core.pipeline.require_accountant`), while MuRAG-style
    mechanisms charge their own per-unit ledger and non-private baselines need
    none. ``max_question_tokens`` bounds the question's length
    (:func:`~dprag_core.pipeline.check_query`). ``streaming=True`` returns a
    ``StreamingResponse`` that yields text as the mechanism releases it (token
    by token for DPSparseVote); its metadata is filled in when the stream ends.
    ``text_qa_template``: your app's LlamaIndex prompt (``{context_str}``,
    ``{query_str}``), used for the mechanism's per-document prompts
    (:mod:`llamaindex_dprag.prompts`; the engine then holds a copy of the
    mechanism). ``callback_manager``: default ``Settings.callback_manager``.
    ``public_fallback=True`` answers a query whose DP answer released nothing
    with the mechanism's model on the question alone, marked
    ``metadata["details"]["public_fallback"]`` (no extra privacy cost:
    :mod:`dprag_core.fallback`). ``rng``: a seed or generator for tests only
    (one generator is made once and reused; default: OS entropy per query).

    >>> # engine = DPQueryEngine.from_index(index, mechanism=mech, budget=budget)
    >>> # print(engine.query("Which treatment did Alice receive?"))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mechanism: Mechanism
    accountant: CorpusAccountant | None = None
    streaming: bool = False
    source_ids: bool = False
    similarity_top_k: int | None = Field(default=None, exclude=True)
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS

    _source: CandidateSource = PrivateAttr()
    _rng: Any = PrivateAttr(default=None)
    _fallback: NonRAG | None = PrivateAttr(default=None)

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
    ) -> None:
        check_mechanism(mechanism)
        if not callable(getattr(source, "bind", None)):
            raise TypeError("source must have bind(question) -> retriever")
        if callback_manager is not None and not isinstance(callback_manager, CallbackManager):
            raise TypeError(
                f"callback_manager must be a LlamaIndex CallbackManager, "
                f"got {type(callback_manager).__name__}"
            )
        check_source(mechanism, source, qualifying=LLAMAINDEX_SOURCES)  # min_score in .scale
        needed = mechanism.candidates_needed()
        if similarity_top_k is not None:
            similarity_top_k = positive_int("similarity_top_k", similarity_top_k)
            if needed is not None and similarity_top_k != needed:
                raise ValueError(
                    f"similarity_top_k must be None or {needed} (what {mechanism.name} "
                    f"needs: its analysis assumes exactly that many), got {similarity_top_k}"
                )
        if text_qa_template is not None:
            mechanism = with_context_template(mechanism, context_template(text_qa_template))
        fields: dict[str, Any] = {
            "mechanism": mechanism,
            "accountant": require_accountant(mechanism, budget, parameter="budget"),
            "streaming": strict_bool("streaming", streaming),
            "source_ids": strict_bool("source_ids", source_ids),
            "similarity_top_k": similarity_top_k,
            "max_question_tokens": positive_int("max_question_tokens", max_question_tokens),
            "callback_manager": callback_manager or Settings.callback_manager,
        }
        fallback = check_public_fallback(public_fallback, mechanism)
        super().__init__(**fields)
        self._source = source
        self._rng = None if rng is None else make_rng(rng)
        self._fallback = fallback

    @classmethod
    def _over(
        cls, make_source: Callable[..., CandidateSource], mechanism: Mechanism, options: Any
    ) -> DPQueryEngine:
        """The one construction path: the source from the conversion options, then the engine."""
        engine_options = dict(options)
        conversion = {k: engine_options.pop(k) for k in _CONVERSION if k in engine_options}
        return cls(mechanism=mechanism, source=make_source(**conversion), **engine_options)

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
        becomes ``DPQueryEngine.from_index(index, mechanism=..., budget=...)``.
        ``similarity_top_k``: ``None`` asks the store for exactly the mechanism's
        ``candidates_needed()`` (any other value is refused); for threshold
        mechanisms (MuRAG, DPICL), which get every candidate above their public
        ``min_score()`` by a growing search, it is the least k of each store query.
        ``score_direction``: ``"distance"`` for stores that return distances
        (negated, so higher = more relevant). ``score_range``: the public range
        of the store's scores (e.g. ``(-1, 1)`` for
        :func:`~llamaindex_dprag.vector_stores.cosine_faiss_store`); scores are
        clipped into it. ``unit_key``: metadata key naming the privacy unit
        (default: the node's source document). The other options:
        :class:`DPQueryEngine`.

        >>> # DPQueryEngine.from_index(index, mechanism=mech, budget=budget)
        """

        def source(**conversion: Any) -> CandidateSource:
            return IndexSource(index, embed_model=embed_model, filters=filters, **conversion)

        return cls._over(source, mechanism, options)

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
        store with its filters and mode (so exactly ``candidates_needed()`` come
        back, and nothing is logged). Any other ``BaseRetriever`` returns one
        list whatever the mechanism needs, so it is refused unless
        ``returns_everything=True``: your promise that ``retrieve`` returns its
        whole ranking (or every node above the mechanism's ``min_score``), best
        first. It is then called once per question inside a private section.
        The options are :meth:`from_index`'s.

        >>> # DPQueryEngine.from_retriever(index.as_retriever(), mechanism=mech, budget=budget)
        """
        from llama_index.core.indices.vector_store.retrievers.retriever import (
            VectorIndexRetriever,
        )

        def source(**conversion: Any) -> CandidateSource:
            if isinstance(retriever, VectorIndexRetriever):
                return IndexSource.from_vector_retriever(retriever, **conversion)
            return RetrieverSource(retriever, returns_everything=returns_everything, **conversion)

        return cls._over(source, mechanism, options)

    def as_chat_engine(
        self,
        *,
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
        its callbacks and its token usage see nothing private.

        >>> # engine.as_chat_engine(llm=Settings.llm).chat("And her dosage?")
        """
        public = llm if llm is not None else Settings.llm
        if not isinstance(public, LLM):
            raise TypeError(f"llm must be a LlamaIndex LLM, got {type(public).__name__}")
        return CondenseQuestionChatEngine.from_defaults(
            query_engine=self,
            llm=public,
            chat_history=chat_history,
            condense_question_prompt=condense_question_prompt,
            verbose=verbose,
        )

    # -- the query path: validate, charge, retrieve, answer -------------------

    def _retriever(self, question: str) -> Retriever:
        bound = self._source.bind(question)
        first_k = self.similarity_top_k
        if first_k is None or self.mechanism.candidates_needed() is not None:
            return bound
        wider = HonoursK(lambda q, k: list(bound(q, max(k, first_k)))[:k])
        return wider if self._source.honours_k else lambda q, k: wider(q, k)

    def _prepare(self, query_str: str) -> str:
        question = check_query(
            self.mechanism, query_str, max_question_tokens=self.max_question_tokens
        )
        charge_query(self.mechanism, self.accountant)
        return question

    def _retrieve(self, question: str) -> list[ScoredDocument]:
        retriever = self._retriever(question)
        return _private(
            "retrieval",
            self.mechanism.name,
            lambda: retrieve_for(self.mechanism, retriever, question),
        )

    def _source_nodes(self, docs: Sequence[ScoredDocument]) -> list[NodeWithScore]:
        if not self.source_ids:
            return []
        return [NodeWithScore(node=TextNode(id_=d.id, text="")) for d in docs if not d.is_padding]

    # below the guard in _run: the only frames that hold documents
    def _private_answer(self, question: str) -> tuple[DPAnswer, list[NodeWithScore]]:
        docs = self._retrieve(question)
        with private_section():
            answer = self.mechanism.answer(question, docs, rng=self._rng)
            answer = fallback_answer(answer, self._fallback, question)
        return answer, self._source_nodes(docs)

    def _private_stream(self, question: str) -> tuple[Iterator[Any], list[NodeWithScore]]:
        docs = self._retrieve(question)
        items = self.mechanism.stream(question, docs, rng=self._rng)
        return fallback_stream(items, self._fallback, question), self._source_nodes(docs)

    def _run(self, query_str: str) -> Response | StreamingResponse:
        question = self._prepare(query_str)
        name = self.mechanism.name
        dispatcher.event(DPQueryStartEvent(**start_payload(self.mechanism)))
        if self.streaming:
            items, nodes = guarded("generation", name, lambda: self._private_stream(question))
            metadata: dict[str, Any] = {"mechanism": name}
            return DPStreamingResponse(
                response_gen=_chunks(name, items, metadata), source_nodes=nodes, metadata=metadata
            )
        answer, nodes = guarded("generation", name, lambda: self._private_answer(question))
        dispatcher.event(DPQueryEndEvent(**end_payload(answer)))
        return DPResponse(
            response=answer.text, source_nodes=nodes, metadata=answer_metadata(answer)
        )

    # BaseQueryEngine's entry points (QueryStartEvent / QueryEndEvent, the trace),
    # not CustomQueryEngine's, which report neither
    query = BaseQueryEngine.query
    aquery = BaseQueryEngine.aquery

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """One ``QUERY`` callback event (question, DP response) around :meth:`custom_query`."""
        payload: dict[str, Any] = {EventPayload.QUERY_STR: query_bundle.query_str}
        with self.callback_manager.event(CBEventType.QUERY, payload=payload) as event:
            response = self.custom_query(query_bundle.query_str)
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """Async :meth:`_query`."""
        payload: dict[str, Any] = {EventPayload.QUERY_STR: query_bundle.query_str}
        with self.callback_manager.event(CBEventType.QUERY, payload=payload) as event:
            response = await self.acustom_query(query_bundle.query_str)
            event.on_end(payload={EventPayload.RESPONSE: response})
        return response

    def custom_query(self, query_str: str) -> Response | StreamingResponse:
        """Answer one question (``Response``, or ``StreamingResponse`` when streaming)."""
        return self._run(query_str)

    async def acustom_query(self, query_str: str) -> Response | AsyncStreamingResponse:
        """Async :meth:`custom_query`: the work runs in a worker thread.

        Streaming engines return an ``AsyncStreamingResponse``.
        """
        result = await asyncio.to_thread(self._run, query_str)
        if isinstance(result, StreamingResponse):
            return DPAsyncStreamingResponse(
                response_gen=_async_chunks(result.response_gen),
                source_nodes=result.source_nodes,
                metadata=result.metadata,
            )
        return result

    def __repr__(self) -> str:
        return (
            f"DPQueryEngine(mechanism={self.mechanism!r}, accountant={self.accountant!r}, "
            f"streaming={self.streaming}, source_ids={self.source_ids})"
        )


def _chunks(
    name: str, items: Iterator[Any], metadata: dict[str, Any]
) -> Generator[str, None, None]:
    # ``items`` (the mechanism's generator) holds the documents; a failure closes it
    while (item := _private("generation", name, lambda: next(items, _END))) is not _END:
        if isinstance(item, DPAnswer):
            metadata.update(answer_metadata(item))
            dispatcher.event(DPQueryEndEvent(**end_payload(item)))
        elif item:
            yield str(item)


async def _async_chunks(chunks: Generator[str, None, None]) -> AsyncGenerator[str, None]:
    while True:
        item = await asyncio.to_thread(next, chunks, _END)
        if item is _END:
            return
        yield str(item)
