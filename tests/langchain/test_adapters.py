"""LangChainTextModel, score functions (FAISS L2 vs inner product) and privacy units."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import FakeListLLM, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, EchoChatModel, HashingEmbeddings, corpus, dump

from dprag_core.models.base import TextModel
from langchain_dprag import (
    COSINE,
    SQUARED_L2_UNIT,
    LangChainTextModel,
    ScoreFunction,
)
from langchain_dprag.units import privacy_unit, to_scored_document
from langchain_dprag.vectorstores import search_with_scores


def test_text_model_chat_and_llm() -> None:
    chat = GenericFakeChatModel(messages=iter([AIMessage(content="aspirin"), "metformin"]))
    model = LangChainTextModel(chat, max_concurrency=1)
    assert isinstance(model, TextModel)
    assert model.generate(["a", "b"]) == ["aspirin", "metformin"]
    assert LangChainTextModel(FakeListLLM(responses=["x", "y"])).generate(["1", "2"]) == ["x", "y"]
    with pytest.raises(TypeError, match="model"):
        LangChainTextModel(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(["a"], max_new_tokens=0)


def test_max_tokens_param_is_forwarded() -> None:
    seen: list[Any] = []

    class Recording(EchoChatModel):
        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            seen.append(kw)
            return super()._generate(messages, stop, run_manager)

    LangChainTextModel(Recording(), max_tokens_param="max_tokens").generate(["q"], max_new_tokens=7)
    assert seen == [{"max_tokens": 7}]


async def test_generate_and_agenerate_are_sealed() -> None:
    model = LangChainTextModel(EchoChatModel())

    def sync_step(q: str) -> str:
        return model.generate([SECRET])[0]

    async def async_step(q: str) -> str:
        return (await model.agenerate([SECRET]))[0]

    for step in (sync_step, async_step):
        app = RunnableLambda(step) | RunnableLambda(lambda s: len(s))
        events = [e async for e in app.astream_events("q", version="v2")]
        assert not [e for e in events if "chat_model" in e["event"]]
        assert SECRET not in dump([e for e in events if e["event"] != "on_chain_end"][:1])


def test_faiss_distance_conventions() -> None:
    """FAISS (default) returns squared L2; on unit vectors 1 - d/2 is the cosine."""
    from langchain_dprag import NormalizedEmbeddings, faiss_inner_product

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.vectorstores import FAISS

    emb = HashingEmbeddings()
    l2 = FAISS.from_documents(corpus(), NormalizedEmbeddings(emb))
    ip = faiss_inner_product(corpus(), emb)
    mem = InMemoryVectorStore(emb)
    mem.add_documents(corpus())
    by_l2 = search_with_scores(l2, QUESTION, 4, SQUARED_L2_UNIT)
    by_ip = search_with_scores(ip, QUESTION, 4, COSINE)
    by_mem = search_with_scores(mem, QUESTION, 4, COSINE)
    for pairs in (by_l2, by_ip, by_mem):
        assert SECRET in pairs[0][0].page_content
        assert [s for _, s in pairs] == pytest.approx([s for _, s in by_mem], abs=1e-5)
    # the trap: FAISS's inner-product relevance maps a cosine s > 0 to 1 - s (order inverted)
    relevance = dict(
        (d.page_content, r) for d, r in ip.similarity_search_with_relevance_scores(QUESTION, k=4)
    )
    assert relevance[by_ip[0][0].page_content] == pytest.approx(1 - by_ip[0][1], abs=1e-5)


def test_score_function_validation_and_clipping() -> None:
    with pytest.raises(ValueError, match="low must be < high"):
        ScoreFunction("bad", low=1.0, high=0.0)
    f = ScoreFunction("neg", low=-2.0, high=0.0, transform=lambda d: -d)
    assert (f.convert(5.0), f.convert(-1.0)) == (-2.0, 0.0)
    assert math.isnan(f.convert(float("nan")))  # dropped later, never ranked


def test_units() -> None:
    doc = Document(page_content="x", metadata={"patient": 7})
    assert privacy_unit(doc, "patient") == "7"
    assert privacy_unit(doc) == privacy_unit(Document(page_content="x", metadata={"patient": 7}))
    sd = to_scored_document(Document(page_content=SECRET, id="d1"), 0.3)
    assert (sd.id, sd.unit, sd.score) == ("d1", "d1", 0.3) and SECRET not in repr(sd)
    # without its unit_key a document is dropped (a placeholder), never an error
    orphan = to_scored_document(Document(page_content=SECRET, id="d1"), 0.3, unit_key="patient")
    assert orphan.is_padding and SECRET not in repr(orphan)
