"""Configured and composed retrievers: accepted where the candidate count can be enforced
(the store's own retriever, with_config/bind, query steps before a retriever), refused
when built otherwise; what the configuration attaches never sees a document (canary,
with a positive control)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, CountingRetriever, RecordingHandler, budget, dump
from toy_mechanisms import AboveToy, ToyMechanism

from langchain_dprag import DPRAGChain
from langchain_dprag.vectorstores import SQUARED_L2_UNIT


def _chain(retriever: Any, mechanism: Any = None, **kw: Any) -> DPRAGChain:
    return DPRAGChain(
        retriever=retriever, mechanism=mechanism or ToyMechanism(k=3), accountant=budget(), **kw
    )


def test_the_stores_own_retriever_needs_no_promise(store: InMemoryVectorStore) -> None:
    for mechanism in (ToyMechanism(k=3), AboveToy()):
        direct = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget())
        for retriever in (store.as_retriever(), store.as_retriever().with_config(tags=["rag"])):
            assert _chain(retriever, mechanism).invoke(QUESTION) == direct.invoke(QUESTION)
    with pytest.raises(ValueError, match="cosine scores"):  # the store's score check applies
        _chain(store.as_retriever(), score_function=SQUARED_L2_UNIT)


def test_configured_retriever_asked_for_k(store: InMemoryVectorStore) -> None:
    inner = CountingRetriever(store=store)
    configured = inner.with_config(run_name="mine", tags=["t"])
    with pytest.raises(ValueError, match="Sources that qualify"):
        _chain(configured)
    chain = _chain(configured, retriever_honours_k=True)
    assert chain.invoke(QUESTION).answer == "3 candidates"
    assert inner.calls >= 1


def test_query_steps_before_the_retriever_see_the_question(store: InMemoryVectorStore) -> None:
    seen: list[Any] = []

    def rewrite(question: str) -> str:
        seen.append(question)
        return question.upper()

    pipeline = RunnableLambda(rewrite) | store.as_retriever()
    assert _chain(pipeline).invoke(QUESTION).answer == "3 candidates"
    assert seen == [QUESTION]


def test_query_steps_that_read_documents_are_refused(store: InMemoryVectorStore) -> None:
    """A step before the retriever that searches the corpus would make the query depend on it."""
    first_text = RunnableLambda(lambda docs: docs[0].page_content)
    reading = store.as_retriever() | first_text | store.as_retriever()
    with pytest.raises(ValueError, match="query step before the retriever reads documents"):
        _chain(reading)
    bound = (RunnableLambda(lambda q: q) | store.as_retriever()).bind(extra=1)
    with pytest.raises(ValueError, match="bound sequence"):
        _chain(bound, retriever_honours_k=True)


@pytest.mark.parametrize(
    "build",
    [
        lambda s: s.as_retriever() | RunnableLambda(lambda docs: docs[:2]),
        lambda s: s.as_retriever().bind(k=2),
        lambda s: s.as_retriever().with_retry(),
        lambda s: s.as_retriever().with_fallbacks([s.as_retriever()]),
        lambda s: RunnableLambda(lambda q: s.similarity_search(q)),
        lambda s: s.as_retriever().with_config(configurable={"x": 1}),
    ],
    ids=["post-step", "bound-k", "retry", "fallbacks", "lambda", "configurable"],
)
def test_what_cannot_enforce_the_count_is_refused(store: InMemoryVectorStore, build: Any) -> None:
    with pytest.raises(ValueError, match="retriever"):
        _chain(build(store), retriever_honours_k=True)


async def test_canary_configured_retriever_callbacks_see_nothing(
    store: InMemoryVectorStore,
) -> None:
    bound = RecordingHandler()
    for retriever in (
        store.as_retriever().with_config(callbacks=[bound]),
        CountingRetriever(store=store).with_config(callbacks=[bound]),
        RunnableLambda(str.strip) | CountingRetriever(store=store).with_config(callbacks=[bound]),
    ):
        chain = _chain(retriever, ToyMechanism(k=11), retriever_honours_k=True)
        out = [chain.invoke(QUESTION), *chain.stream(QUESTION)]
        events = [e async for e in chain.astream_events(QUESTION, version="v2")]
        assert SECRET not in dump(events) + dump([o.model_dump() for o in out]) + bound.text()


def test_detector_fires_when_the_configured_retriever_is_invoked(
    store: InMemoryVectorStore,
) -> None:
    """Positive control: invoked directly, the configured retriever hands its handler the text."""
    bound = RecordingHandler()
    store.as_retriever(search_kwargs={"k": 11}).with_config(callbacks=[bound]).invoke(QUESTION)
    assert SECRET in bound.text()
