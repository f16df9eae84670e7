"""What a LlamaIndex user expects of the DP engine, without a side door.

The app's ``text_qa_template``, ``Settings.callback_manager`` and a
``callback_manager=``, QueryStart/QueryEnd and the public DP events, an empty
answer that prints as "", the opt-in public fallback, a condensed-question chat
engine, raw LLMs refused with the fix, token counting that never sees a private
prompt, and the tutorial's one-line switch. Every new path is scanned for the
canary secret.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from li_helpers import CANARY, QUESTION, CallbackSink, QuestionLLM, leaks
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CallbackManager, CBEventType, TokenCountingHandler
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.llms import CustomLLM, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.prompts import ChatPromptTemplate, PromptTemplate
from llama_index.core.prompts.chat_prompts import CHAT_TEXT_QA_PROMPT
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPKSA, DPSparseVote, NonRAG
from dprag_core.algorithms.base import PublicModel
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.events import END_FIELDS, START_FIELDS
from dprag_core.mechanisms.rng import RngLike
from dprag_core.prompts import NO_CONTEXT_TEMPLATE
from dprag_core.retrieval.documents import ScoredDocument
from llamaindex_dprag import (
    DPQueryEndEvent,
    DPQueryEngine,
    DPQueryStartEvent,
    DPResponse,
    LlamaIndexTextModel,
)

APP_PROMPT = "APP-PROMPT notes:\n{context_str}\nAPP-PROMPT asks: {query_str}\n"


class RecordingLLM(CustomLLM):
    """Records every prompt; answers with a fixed text."""

    answer: str = "about it"
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="recording-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class Words:
    """A dprag text model answering with fixed words; records its prompts."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.prompts.extend(prompts)
        return [self.answer] * len(prompts)


class Silent(ToyMechanism):
    """Releases nothing (as ⊥ on the first token would); its model answers publicly."""

    name = "Silent"

    def __init__(self) -> None:
        super().__init__(k=4)
        self.model = Words("a public answer")

    def public_model(self) -> PublicModel:
        return PublicModel(self.model, NO_CONTEXT_TEMPLATE, 64)

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        details = {"stop_reason": "null_token", "private_tokens": 1}
        return DPAnswer("", self.query_cost(), self.name, details)

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        yield self.answer(question, docs, rng=rng)


def budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(100.0, 0.5))


def ksa_engine(index: Any, llm: RecordingLLM, **options: Any) -> DPQueryEngine:
    mechanism = DPKSA(LlamaIndexTextModel(llm, max_concurrency=1), epsilon=5.0, n_docs=4)
    return DPQueryEngine.from_index(
        index, mechanism=mechanism, budget=budget(), score_range=(-1.0, 1.0), **options
    )


# -- the app's prompt -----------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [PromptTemplate(APP_PROMPT), ChatPromptTemplate.from_messages([("user", APP_PROMPT)])],
    ids=["PromptTemplate", "ChatPromptTemplate"],
)
@pytest.mark.parametrize("entry", ["from_index", "from_retriever"])
def test_text_qa_template_shapes_every_per_document_prompt(
    index: Any, template: Any, entry: str
) -> None:
    llm = RecordingLLM()
    mechanism = DPKSA(LlamaIndexTextModel(llm, max_concurrency=1), epsilon=5.0, n_docs=4)
    target = index if entry == "from_index" else index.as_retriever()
    engine = getattr(DPQueryEngine, entry)(
        target,
        mechanism=mechanism,
        budget=budget(),
        score_range=(-1.0, 1.0),
        text_qa_template=template,
    )
    engine.query(QUESTION)
    responses = llm.prompts[:-1]  # the last prompt is the final (keywords) answer
    assert len(responses) == 4
    assert all("APP-PROMPT notes:" in p and f"APP-PROMPT asks: {QUESTION}" in p for p in responses)
    assert sum(CANARY in p for p in responses) <= 1  # one document per response prompt
    assert engine.mechanism is not mechanism and mechanism.response_template != (
        engine.mechanism.response_template  # type: ignore[attr-defined]
    )


def test_llamaindex_default_chat_qa_template_is_accepted(index: Any) -> None:
    llm = RecordingLLM()
    ksa_engine(index, llm, text_qa_template=CHAT_TEXT_QA_PROMPT).query(QUESTION)
    assert "Context information is below." in llm.prompts[0]


@pytest.mark.parametrize(
    ("template", "error", "message"),
    [
        (PromptTemplate("{context_str} only"), ValueError, "does not use query_str"),
        (PromptTemplate("{query_str} only"), ValueError, "does not use context_str"),
        (
            PromptTemplate("{context_str} {query_str} in a {tone} tone"),
            ValueError,
            r"also needs tone: fill it first with text_qa_template.partial_format\(tone=...\)",
        ),
        ("{context_str} {query_str}", TypeError, "must be a LlamaIndex PromptTemplate"),
    ],
)
def test_a_template_without_the_two_variables_is_refused_naming_them(
    index: Any, template: Any, error: type, message: str
) -> None:
    accountant = budget()
    with pytest.raises(error, match=message):
        DPQueryEngine.from_index(
            index,
            mechanism=ToyMechanism(),
            budget=accountant,
            text_qa_template=template,
        )
    assert accountant.spent_epsilon == 0


def test_a_filled_in_variable_is_fine(index: Any) -> None:
    llm = RecordingLLM()
    template = PromptTemplate("{context_str} {query_str} in a {tone} tone").partial_format(
        tone="calm"
    )
    ksa_engine(index, llm, text_qa_template=template).query(QUESTION)
    assert llm.prompts[0].endswith("in a calm tone")


# -- observers: callback manager, instrumentation ---------------------------------------


def test_settings_callback_manager_gets_the_query_event(index: Any, channels: Any) -> None:
    engine = DPQueryEngine.from_index(index, mechanism=ToyMechanism(), budget=budget())
    assert engine.callback_manager is Settings.callback_manager
    engine.query(QUESTION)
    query = [(kind, payload) for kind, t, payload in channels.callbacks.payloads if t == "query"]
    assert [kind for kind, _ in query] == ["start", "end"]
    assert query[0][1]["query_str"] == QUESTION
    assert str(query[1][1]["response"]) == "4 candidates"


def test_callback_manager_parameter_is_honoured(index: Any, channels: Any) -> None:
    own = CallbackSink()
    engine = DPQueryEngine.from_retriever(
        index.as_retriever(),
        mechanism=ToyMechanism(),
        budget=budget(),
        callback_manager=CallbackManager([own]),
    )
    engine.query(QUESTION)
    assert [(k, t) for k, t, _ in own.payloads] == [
        ("start", CBEventType.QUERY),
        ("end", CBEventType.QUERY),
    ]
    assert not any(t == CBEventType.QUERY for _, t, _ in channels.callbacks.payloads)
    with pytest.raises(TypeError, match="callback_manager must be a LlamaIndex CallbackManager"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), callback_manager=[own])  # type: ignore[call-overload]


@pytest.mark.parametrize("mode", ["query", "stream", "aquery"])
def test_query_and_dp_events_reach_instrumentation(index: Any, channels: Any, mode: str) -> None:
    llm = RecordingLLM()
    engine = ksa_engine(index, llm, streaming=mode == "stream")
    if mode == "aquery":
        text = str(asyncio.run(engine.aquery(QUESTION)))
    else:
        text = str(engine.query(QUESTION))
    assert text == "about it"
    kinds = [type(e) for e in channels.events.events]
    for kind in (QueryStartEvent, QueryEndEvent, DPQueryStartEvent, DPQueryEndEvent):
        assert kinds.count(kind) == 1, kind
    start = next(e for e in channels.events.events if isinstance(e, DPQueryStartEvent))
    end = next(e for e in channels.events.events if isinstance(e, DPQueryEndEvent))
    base = {"timestamp", "id_", "span_id", "tags", "class_name"}
    assert set(start.model_dump()) - base == set(START_FIELDS)
    assert set(end.model_dump()) - base == set(END_FIELDS)
    cost = engine.mechanism.query_cost()
    assert cost is not None and (start.epsilon, start.delta) == (cost.epsilon, cost.delta)
    assert end.stop_reason in ("keywords", "ptr_failed") and end.public_fallback is False
    assert leaks(channels.everything()) == []
    assert any(CANARY in p for p in llm.prompts)  # the scanner had something to find


# -- empty answers and the public fallback ------------------------------------------------


def _empty_texts(response: Any) -> list[str]:
    """Every way a user reads a (possibly streaming, possibly async) response's text."""
    if isinstance(response, AsyncStreamingResponse):
        whole = asyncio.run(response.get_response())
        return [str(response), str(whole), whole.response or ""]
    if isinstance(response, StreamingResponse):
        whole = response.get_response()
        return [str(response), str(whole), whole.response or ""]
    return [str(response), response.response]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("call", ["query", "aquery"])
def test_an_empty_dp_answer_is_the_empty_string(index: Any, streaming: bool, call: str) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=Silent(), budget=budget(), streaming=streaming
    )
    query = engine.query if call == "query" else lambda q: asyncio.run(engine.aquery(q))
    response = query(QUESTION)
    texts = _empty_texts(response)
    assert texts == [""] * len(texts)
    if not streaming:
        assert isinstance(response, DPResponse) and response.response == ""
    assert response.metadata is not None
    assert response.metadata["stop_reason"] == "null_token"
    assert response.metadata["details"]["stop_reason"] == "null_token"


@pytest.mark.parametrize("streaming", [False, True])
def test_an_empty_dp_answer_reaches_a_chat_as_the_empty_string(index: Any, streaming: bool) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=Silent(), budget=budget(), streaming=streaming
    )
    chat = engine.as_chat_engine(llm=MockLLM(max_tokens=4))

    async def astream() -> str:
        reply = await chat.astream_chat(QUESTION)
        return "".join([t async for t in reply.async_response_gen()])

    if streaming:
        texts = ["".join(chat.stream_chat(QUESTION).response_gen), asyncio.run(astream())]
    else:
        texts = [str(chat.chat(QUESTION)), str(asyncio.run(chat.achat(QUESTION)))]
    assert texts == ["", ""]
    assert "None" not in [m.content for m in chat.chat_history]


@pytest.mark.parametrize("streaming", [False, True])
def test_public_fallback_answers_from_the_question_alone(
    index: Any, channels: Any, streaming: bool
) -> None:
    mechanism = Silent()
    engine = DPQueryEngine.from_index(
        index, mechanism=mechanism, budget=budget(), streaming=streaming, public_fallback=True
    )
    response = engine.query(QUESTION)
    assert str(response) == "a public answer"
    assert response.metadata["details"]["public_fallback"] is True
    assert response.metadata["stop_reason"] == "null_token"
    end = [e for e in channels.events.events if isinstance(e, DPQueryEndEvent)]
    assert len(end) == 1 and end[0].public_fallback is True
    assert mechanism.model.prompts == [f"Question: {QUESTION}\nAnswer:"]
    assert leaks([mechanism.model.prompts, response, channels.everything()]) == []


def test_public_fallback_is_checked_when_the_engine_is_built(index: Any) -> None:
    with pytest.raises(ValueError, match=r"pass public_fallback=NonRAG\(model\)"):
        DPQueryEngine.from_index(
            index, mechanism=ToyMechanism(), budget=budget(), public_fallback=True
        )
    words = Words("other")
    engine = DPQueryEngine.from_index(
        index, mechanism=Silent(), budget=budget(), public_fallback=NonRAG(words)
    )
    assert str(engine.query(QUESTION)) == "other"


# -- chat ----------------------------------------------------------------------------------


def test_chat_condenses_public_history_then_runs_one_dp_query(index: Any, channels: Any) -> None:
    condenser = RecordingLLM(answer="Which treatment does Zorblax Quintavue receive daily?")
    answerer = RecordingLLM()
    accountant = budget()
    mechanism = DPKSA(LlamaIndexTextModel(answerer, max_concurrency=1), epsilon=5.0, n_docs=4)
    engine = DPQueryEngine.from_index(
        index, mechanism=mechanism, budget=accountant, score_range=(-1.0, 1.0)
    )
    chat = engine.as_chat_engine(llm=condenser)
    first = chat.chat(QUESTION)
    second = chat.chat("And how often?")
    assert str(first) == str(second) == "about it"
    assert len(condenser.prompts) == 1  # no history on the first turn
    assert "And how often?" in condenser.prompts[0] and QUESTION in condenser.prompts[0]
    cost = mechanism.query_cost()
    assert accountant.spent_epsilon == pytest.approx(2 * cost.epsilon)  # one DP query a turn
    assert any(condenser.answer in p for p in answerer.prompts)  # the condensed question
    assert leaks([condenser.prompts, chat.chat_history, first, second]) == []
    assert leaks(channels.everything()) == []
    assert any(CANARY in p for p in answerer.prompts)


def test_chat_streams_with_a_streaming_engine(index: Any) -> None:
    engine = ksa_engine(index, RecordingLLM(), streaming=True)
    chat = engine.as_chat_engine(llm=MockLLM(max_tokens=4))
    reply = chat.stream_chat(QUESTION)
    assert "".join(reply.response_gen) == "about it"
    with pytest.raises(TypeError, match="llm must be a LlamaIndex LLM"):
        engine.as_chat_engine(llm=Words("x"))  # type: ignore[arg-type]


# -- models and token usage ------------------------------------------------------------------


def test_a_raw_llamaindex_llm_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"wrap it with LlamaIndexTextModel\(llm\)"):
        DPKSA(MockLLM(), epsilon=5.0)
    with pytest.raises(TypeError, match=r"HFTokenModel\.from_pretrained\(path\)"):
        DPSparseVote(
            MockLLM(), m=2, k=1, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=2
        )


def test_token_counting_sees_only_public_prompts(index: Any) -> None:
    counter = TokenCountingHandler(tokenizer=lambda text: text.split())
    old = Settings._callback_manager
    Settings.callback_manager = CallbackManager([counter])
    try:
        condenser = RecordingLLM(answer="Which treatment does Zorblax receive?")
        chat = ksa_engine(index, QuestionLLM()).as_chat_engine(llm=condenser)
        chat.chat(QUESTION)
        assert counter.llm_token_counts == []  # the voters' prompts: nothing counted
        chat.chat("And how often?")
    finally:
        Settings._callback_manager = old
    assert len(counter.llm_token_counts) == 1  # the public condensing call only
    assert counter.llm_token_counts[0].prompt == condenser.prompts[0]
    assert CANARY not in counter.llm_token_counts[0].prompt


# -- the tutorial's one-line switch -------------------------------------------------------------


def test_the_tutorial_shape_switches_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    documents = [Document(text=f"Patient {i} receives drug {i}.") for i in range(6)]
    index = VectorStoreIndex.from_documents(documents)
    query_engine = index.as_query_engine()  # LlamaIndex's starter tutorial
    query_engine = DPQueryEngine.from_index(  # the one changed line
        index, mechanism=ToyMechanism(k=3), budget=budget()
    )
    response = query_engine.query("Which drug does patient 2 receive?")
    print(response)
    assert capsys.readouterr().out == "3 candidates\n"
