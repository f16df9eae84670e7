"""CANARY per side door around LangChain model calls (DP-KSA's prompts hold the documents).

For each channel a positive control shows it receiving the secret from a plain
RAG app (``prompt | model``), and the DP chain (DP-KSA over the same model)
shows nothing there: callbacks given to the model's constructor or set later,
a configure hook switched on by its environment variable, an instrumentor
patching ``BaseCallbackManager.__init__`` (OpenInference / MLflow style), the
global LLM cache, a provider client's DEBUG logger. Where a run of the user's
own retriever would meet a hook or an instrumentor, the chain refuses before
charging. Errors leave no private frame behind, even for ``on_chain_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.globals import set_llm_cache
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tracers.context import _configure_hooks, register_configure_hook
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, CountingRetriever, EchoChatModel, RecordingHandler, budget
from private_frames import reachable_text

from dprag_core.algorithms.ksa import DPKSA
from dprag_core.errors import PrivateDataError, reveal_private_errors
from langchain_dprag import DPRAGChain, LangChainTextModel
from langchain_dprag._compat import message_text
from langchain_dprag._sealed import SideDoorError

PLAIN = ChatPromptTemplate.from_messages([("human", "{context}\n\n{question}")])


def plain_rag(model: Any) -> None:
    """The positive control: a plain LangChain RAG app puts the document in the prompt."""
    (PLAIN | model).invoke({"context": f"access code {SECRET}", "question": QUESTION})


def dp_chain(model: Any, store: InMemoryVectorStore, **kw: Any) -> DPRAGChain:
    mechanism = DPKSA(LangChainTextModel(model), epsilon=5.0, delta=1e-4, n_docs=8)
    source: dict[str, Any] = {"vectorstore": store}
    if kw.pop("retriever", False):
        source = {"retriever": CountingRetriever(store=store), "retriever_honours_k": True}
    kw.setdefault("accountant", budget())
    return DPRAGChain(
        mechanism=mechanism,
        unit_key="patient",
        **source,
        **kw,
    )


class LoggingEchoModel(EchoChatModel):
    """Echoes, and logs its request at DEBUG the way the openai client does."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        logging.getLogger("openai._base_client").debug(
            "Request options: %s", message_text(messages[-1])
        )
        logging.getLogger("httpx").debug("HTTP Request body %s", message_text(messages[-1]))
        return super()._generate(messages, stop, run_manager, **kw)


def test_constructor_and_later_callbacks(store: InMemoryVectorStore) -> None:
    early, late = RecordingHandler(), RecordingHandler()
    model = EchoChatModel(callbacks=[early])
    plain_rag(model)
    assert SECRET in early.text()
    early.records.clear()
    model.callbacks = [early, late]
    dp_chain(model, store).invoke(QUESTION)
    assert early.records == [] and late.records == []


@pytest.fixture
def env_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A handler registered with register_configure_hook(..., env_var=...) and switched on."""
    seen: list[str] = []

    class EnvHandler(RecordingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.records = seen

    var: ContextVar[Any] = ContextVar("dprag_test_env_hook", default=None)
    register_configure_hook(var, True, EnvHandler, "DPRAG_TEST_ENV_HOOK")
    monkeypatch.setenv("DPRAG_TEST_ENV_HOOK", "true")
    yield seen
    _configure_hooks[:] = [h for h in _configure_hooks if h[0] is not var]


def test_environment_switched_configure_hook(
    store: InMemoryVectorStore, env_hook: list[str]
) -> None:
    plain_rag(EchoChatModel())
    assert SECRET in "".join(env_hook)
    env_hook.clear()
    dp_chain(EchoChatModel(), store).invoke(QUESTION)
    assert SECRET not in "".join(env_hook)
    acc = budget()
    with pytest.raises(SideDoorError, match=r"EnvHandler .*\$DPRAG_TEST_ENV_HOOK"):
        dp_chain(EchoChatModel(), store, retriever=True, accountant=acc).invoke(QUESTION)
    assert acc.queries == 0  # refused before the charge


@pytest.fixture
def instrumented(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An instrumentor that adds its tracer to every callback manager (OpenInference style)."""
    tracer = RecordingHandler()
    original = BaseCallbackManager.__init__

    def patched_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.add_handler(tracer, True)

    monkeypatch.setattr(BaseCallbackManager, "__init__", patched_init)
    return tracer.records


def test_instrumentor_patching_the_callback_manager(
    store: InMemoryVectorStore, instrumented: list[str]
) -> None:
    plain_rag(EchoChatModel())
    assert SECRET in "".join(instrumented)
    instrumented.clear()
    dp_chain(EchoChatModel(), store).invoke(QUESTION)
    assert SECRET not in "".join(instrumented)
    with pytest.raises(SideDoorError, match=r"BaseCallbackManager.__init__ is patched"):
        dp_chain(EchoChatModel(), store, retriever=True).invoke(QUESTION)


def test_global_llm_cache(store: InMemoryVectorStore) -> None:
    cache = InMemoryCache()
    set_llm_cache(cache)
    try:
        plain_rag(EchoChatModel())
        assert SECRET in repr(cache._cache)
        cache.clear()
        dp_chain(EchoChatModel(), store).invoke(QUESTION)
        assert cache._cache == {}
        model = EchoChatModel(cache=cache)  # a cache on the model itself
        dp_chain(model, store).invoke(QUESTION)
        assert cache._cache == {}
    finally:
        set_llm_cache(None)


async def test_provider_debug_loggers(store: InMemoryVectorStore, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    plain_rag(LoggingEchoModel())
    assert SECRET in caplog.text
    caplog.clear()
    chain = dp_chain(LoggingEchoModel(), store)
    chain.invoke(QUESTION)
    await chain.ainvoke(QUESTION)
    list(chain.stream(QUESTION))
    assert SECRET not in caplog.text
    assert "Request options" not in caplog.text  # muted, not merely scrubbed
    logging.getLogger("openai._base_client").debug("after %s", "the query")
    assert "after the query" in caplog.text  # outside a private call, logs flow again


@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_errors_hold_no_private_frame(store: InMemoryVectorStore, mode: str) -> None:
    handler = RecordingHandler()
    errors: list[BaseException] = []
    handler.on_chain_error = lambda error, **kw: errors.append(error)  # type: ignore[method-assign]
    chain = dp_chain(EchoChatModel(fail=True), store)
    config = {"callbacks": [handler]}
    with pytest.raises(PrivateDataError) as info:
        chain.invoke(QUESTION, config) if mode == "invoke" else list(chain.stream(QUESTION, config))
    assert errors and all(SECRET not in reachable_text(e) for e in [info.value, *errors])
    with reveal_private_errors(), pytest.raises(ValueError) as raw:  # positive control
        chain.invoke(QUESTION)
    assert SECRET in reachable_text(raw.value)


def test_a_raising_callback_leaves_no_paused_private_frame(store: InMemoryVectorStore) -> None:
    """A handler raising mid-stream: the error holds no frame that still sees the documents."""

    class Raising(RecordingHandler):
        raise_error = True

        def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("handler failed")

    chain = dp_chain(EchoChatModel(), store)
    with pytest.raises(RuntimeError, match="handler failed") as info:
        list(chain.stream(QUESTION, {"callbacks": [Raising()]}))
    assert SECRET not in reachable_text(info.value)
