"""Canary: a secret in one private document must never reach a side channel.

For every mechanism in the tree and every way of asking (query, streaming,
aquery, async streaming), the secret (in the document's text and in its
metadata) must be absent from the Response (text, metadata, source_nodes), from
every instrumentation event and span (arguments, instance, result, error) on the
root dispatcher, from every callback-manager payload, from every log record at
DEBUG and from exception messages. The mutation tests below show the same
scanner does find the secret when a channel is opened.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import pytest
from li_helpers import CANARY, QUESTION, FailingLLM, QuestionLLM, leaks
from mechanism_table import CASES, Case, Models, build, case_modes, mechanism_classes
from toy_mechanisms import LeakyMechanism, ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PRIVATE_FAILURE
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel, _quiet
from llamaindex_dprag._quiet import PrivateStageError


@pytest.fixture
def models(request: pytest.FixtureRequest) -> Models:
    return Models(
        token=lambda: request.getfixturevalue("tiny_token_model"),
        text=LlamaIndexTextModel(QuestionLLM(), max_concurrency=2),
    )


def ask(engine: DPQueryEngine, mode: str) -> tuple[str, Any]:
    """Ask QUESTION in ``mode``; return the full answer text and the response object."""
    if mode == "query":
        response = engine.query(QUESTION)
        return str(response), response
    if mode == "stream":
        response = engine.query(QUESTION)
        return "".join(response.response_gen), response
    if mode == "aquery":
        response = asyncio.run(engine.aquery(QUESTION))
        return str(response), response

    async def collect() -> tuple[str, Any]:
        response = await engine.aquery(QUESTION)
        return "".join([c async for c in response.async_response_gen()]), response

    return asyncio.run(collect())


@pytest.mark.parametrize(
    ("case", "mode"), case_modes(), ids=[f"{c.name}-{m}" for c, m in case_modes()]
)
def test_canary_never_leaks(
    case: Case, mode: str, index: Any, channels: Any, models: Models
) -> None:
    mechanism = build(case, models)
    engine = DPQueryEngine.from_index(
        index,
        mechanism=mechanism,  # NaiveMulti is charged to the accountant it was built with
        budget=mechanism.corpus_accountant() or InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        score_range=(-1.0, 1.0),
        streaming=mode in ("stream", "astream"),
        rng=0,
    )
    text, response = ask(engine, mode)
    assert isinstance(text, str)
    assert response.source_nodes == []
    meta = response.metadata
    assert meta["mechanism"] == mechanism.name
    if case.private:
        assert 0 < meta["epsilon"] < float("inf")
    assert leaks([text, response, meta, response.source_nodes, repr(engine)]) == []
    assert leaks(channels.everything()) == []
    # the query was really seen by the handlers: the engine's own span is there
    assert any("DPQueryEngine" in str(s[1]) for s in channels.spans.seen)


def test_every_mechanism_in_the_tree_has_a_canary_case() -> None:
    """A mechanism added to dprag_core must be added to mechanism_table.CASES."""
    assert mechanism_classes() <= {c.kind for c in CASES}


def test_canary_sees_a_leaking_mechanism(index: Any, channels: Any) -> None:
    """Mutation: a mechanism that answers with its documents is caught in the answer
    and in the engine's span result."""
    engine = DPQueryEngine.from_index(
        index, mechanism=LeakyMechanism(k=2), budget=InMemoryCorpusAccountant(Budget(100.0, 0.5))
    )
    response = engine.query(QUESTION)
    assert CANARY in leaks(response)
    assert CANARY in leaks(channels.spans.seen)


def test_canary_sees_plain_llamaindex_retrieval(index: Any, channels: Any) -> None:
    """Mutation: the stock retriever reports the nodes to events, spans, callbacks and logs."""
    index.as_retriever(similarity_top_k=3).retrieve(QUESTION)
    assert CANARY in leaks(channels.events.events)
    assert CANARY in leaks(channels.spans.seen)
    assert CANARY in leaks(channels.callbacks.payloads)
    assert CANARY in leaks(channels.caplog.text)


def test_canary_sees_llm_calls_outside_a_private_section(
    channels: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: without the private section, the LLM's events carry the prompts."""
    from contextlib import nullcontext

    import llamaindex_dprag.llms as llms

    monkeypatch.setattr(llms, "private_section", nullcontext)
    LlamaIndexTextModel(QuestionLLM(), max_concurrency=1).generate([f"Context: {CANARY}"])
    assert CANARY in leaks(channels.events.events)
    assert CANARY in leaks(channels.callbacks.payloads)


def test_canary_from_any_retriever(index: Any, channels: Any) -> None:
    """A retriever that is not a VectorIndexRetriever is called inside a private section."""
    from llama_index.core.retrievers import QueryFusionRetriever

    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=4)],
        similarity_top_k=4,
        num_queries=1,
        use_async=False,
    )
    engine = DPQueryEngine.from_retriever(
        fusion,
        mechanism=ToyMechanism(k=4),
        budget=InMemoryCorpusAccountant(Budget(5.0, 1e-3)),
        source_ids=True,
        returns_everything=True,  # declared for this side-door test only
    )
    response = engine.query(QUESTION)
    assert str(response) == "4 candidates"
    assert response.source_nodes[0].node.node_id == "node-doc-canary"
    assert leaks([response, channels.everything()]) == []


@pytest.mark.parametrize("mode", ["query", "stream"])
def test_exception_messages_do_not_quote_documents(index: Any, channels: Any, mode: str) -> None:
    """An LLM error quoting its prompt surfaces as the one fixed failure, chain clean."""
    ksa = pytest.importorskip("dprag_core.algorithms.ksa")
    model = LlamaIndexTextModel(FailingLLM(), max_concurrency=2)
    engine = DPQueryEngine.from_index(
        index,
        mechanism=ksa.DPKSA(model, epsilon=5.0, n_docs=4),
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        streaming=mode == "stream",
    )
    with pytest.raises(PrivateStageError) as info:
        ask(engine, mode)
    err = info.value
    assert str(err) == PRIVATE_FAILURE and "ValueError" not in str(err)
    assert err.__context__ is None and err.__cause__ is None
    rendered = "".join(traceback.format_exception(err))
    assert leaks([rendered, str(err), channels.everything()]) == []


def test_budget_error_quotes_no_document(index: Any, channels: Any) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(), budget=InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    )
    engine.query(QUESTION)
    with pytest.raises(PrivacyBudgetExhausted) as info:
        engine.query(QUESTION)
    assert leaks([str(info.value), "".join(traceback.format_exception(info.value))]) == []
    assert leaks(channels.everything()) == []


def test_private_section_is_scoped(channels: Any) -> None:
    """Outside a private section, handlers receive events again (the guard is a no-op)."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.events.query import QueryStartEvent

    with _quiet.private_section():
        get_dispatcher("x.y").event(QueryStartEvent(query="inside"))
    get_dispatcher("x.y").event(QueryStartEvent(query="outside"))
    seen = [e.query for e in channels.events.events if isinstance(e, QueryStartEvent)]
    assert seen == ["outside"]
