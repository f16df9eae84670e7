"""DPRAGChain(public_fallback=True): an empty DP answer is replaced by the model's own
answer to the question alone, marked as such, with no extra charge; the fallback's
prompt holds no document (canary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, EchoChatModel, RecordingHandler, dump
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms.base import PublicModel
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.prompts import NO_CONTEXT_TEMPLATE
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import DPRAGChain, LangChainTextModel


class Silent(ToyMechanism):
    """Releases nothing (⊥ on the first token) after reading every candidate."""

    name = "Silent"

    def __init__(self, model: Any) -> None:
        super().__init__(k=11)
        self.model = model

    def public_model(self) -> PublicModel:
        return PublicModel(self.model, NO_CONTEXT_TEMPLATE, 64)

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        assert any(SECRET in d.text for d in docs)  # the voters did see the secret
        return DPAnswer("", self.query_cost(), self.name, {"stop_reason": "null_token"})


def _chain(store: InMemoryVectorStore, model: Any, **kw: Any) -> tuple[DPRAGChain, Any]:
    acc = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    chain = DPRAGChain(
        vectorstore=store, mechanism=Silent(LangChainTextModel(model)), accountant=acc, **kw
    )
    return chain, acc


def test_off_by_default_the_answer_is_empty(store: InMemoryVectorStore) -> None:
    chain, _ = _chain(store, FakeListChatModel(responses=["public"]))
    out = chain.invoke(QUESTION)
    assert out.answer == "" and out.details["stop_reason"] == "null_token"
    assert "public_fallback" not in out.details


def test_fallback_answers_marked_and_charged_once(store: InMemoryVectorStore) -> None:
    chain, acc = _chain(store, FakeListChatModel(responses=["public"]), public_fallback=True)
    out = chain.invoke(QUESTION)
    assert out.answer == "public" and out.details["public_fallback"] is True
    assert out.details["stop_reason"] == "null_token" and out.epsilon == 1.0
    assert acc.queries == 1  # no extra charge
    chunks = list(chain.stream(QUESTION))
    assert "".join(c.answer for c in chunks) == "public"
    assert chunks[-1].details["public_fallback"] is True


async def test_fallback_events_and_text_form(store: InMemoryVectorStore) -> None:
    chain, _ = _chain(
        store, FakeListChatModel(responses=["public"]), public_fallback=True, output="text"
    )
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    end = [e for e in events if e["event"] == "on_custom_event"][-1]
    assert end["data"]["public_fallback"] is True
    tokens = [e["data"]["chunk"].content for e in events if e["event"] == "on_chat_model_stream"]
    assert tokens == ["public"]


def test_bad_fallback_option_is_refused(store: InMemoryVectorStore) -> None:
    with pytest.raises(TypeError, match="public_fallback must be a valid boolean or an instance"):
        _chain(store, FakeListChatModel(responses=["x"]), public_fallback="yes")


async def test_canary_fallback_prompt_is_the_question_alone(store: InMemoryVectorStore) -> None:
    """The fallback model echoes its prompt: the question comes back, the secret never."""
    chain, _ = _chain(store, EchoChatModel(), public_fallback=True)
    handler = RecordingHandler()
    out = chain.invoke(QUESTION, {"callbacks": [handler]})
    assert QUESTION in out.answer and SECRET not in out.answer
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    assert SECRET not in dump(events) + handler.text() + dump(out.model_dump())


def test_text_form_through_str_output_parser_keeps_the_provenance(
    store: InMemoryVectorStore,
) -> None:
    """A string carries no field: the note in the text survives every string step."""
    from langchain_core.output_parsers import StrOutputParser

    from dprag_core.stop_reasons import MODEL_ALONE_NOTE

    note = f"public {MODEL_ALONE_NOTE}"
    for form in ("text", "object"):  # "object" | parser is switched to the text form
        chain, _ = _chain(
            store, FakeListChatModel(responses=["public"]), public_fallback=True, output=form
        )
        app = chain | StrOutputParser()
        assert app.invoke(QUESTION) == note
        assert "".join(app.stream(QUESTION)) == note
        assert app.batch([QUESTION]) == [note]
    silent, _ = _chain(store, FakeListChatModel(responses=["public"]), output="text")
    assert (silent | StrOutputParser()).invoke(QUESTION) == ""  # nothing released: no note
