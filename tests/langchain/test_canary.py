"""CANARY: a secret in a private document never leaves through any LangChain channel.

For every mechanism in the tree, the chain is run with invoke, batch, stream,
astream and astream_events(v2), with a recording callback handler, DEBUG logging,
``set_debug(True)`` and ``collect_runs()``; the models are the worst case for
privacy (an echoing chat model; a token model that fails quoting its prompts). The
secret must not appear in the outputs (DP mechanisms), in any event, callback
record, log record, collected run, stdout, or exception. Mutation tests show the
same detector fires on a plain LangChain RAG chain, on a leaky mechanism, and on
an adapter whose model calls are not sealed.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest
from langchain_core.globals import set_debug
from langchain_core.language_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tracers.context import collect_runs
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import (
    QUESTION,
    SECRET,
    EchoChatModel,
    FailingTokenModel,
    RecordingHandler,
    dump,
)
from mechanism_table import CASES, Case, Models, build
from toy_mechanisms import LeakyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from langchain_dprag import DPRAGChain, LangChainTextModel
from langchain_dprag._compat import message_text


async def _exercise(chain: Any, *, check_output: bool) -> str:
    """Run ``chain`` through every channel; return everything observable but the outputs."""
    handler = RecordingHandler()
    config = {"callbacks": [handler]}
    outputs = [chain.invoke(QUESTION, config)]
    outputs += chain.batch([QUESTION, {"question": QUESTION}], config)
    outputs += list(chain.stream(QUESTION, config))
    outputs += [c async for c in chain.astream(QUESTION, config)]
    events = [e async for e in chain.astream_events(QUESTION, config, version="v2")]
    if check_output:
        assert SECRET not in dump(
            [o.model_dump() if hasattr(o, "model_dump") else o for o in outputs]
        )
    return dump(events) + handler.text()


def _chain(mechanism: Any, store: InMemoryVectorStore) -> DPRAGChain:
    return DPRAGChain(
        vectorstore=store,
        mechanism=mechanism,
        unit_key="patient",  # NaiveMulti is charged to the accountant it was built with
        accountant=mechanism.corpus_accountant() or InMemoryCorpusAccountant(Budget(1e6, 0.5)),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_canary_never_leaks(
    case: Case, store: InMemoryVectorStore, models: Models, caplog: Any, capsys: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    if not case.private:  # a non-private answer may quote the secret: don't echo it
        text = LangChainTextModel(FakeListChatModel(responses=["no idea"]))
        models = Models(token=lambda token=models.token: token, text=text)
    chain = _chain(build(case, models), store)
    seen = await _exercise(chain, check_output=case.private)
    set_debug(True)
    try:
        with collect_runs() as runs:
            chain.invoke(QUESTION)
    finally:
        set_debug(False)
    seen += dump([r.model_dump() for r in runs.traced_runs])
    seen += caplog.text + capsys.readouterr().out
    assert SECRET not in seen


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_canary_not_in_exceptions(
    case: Case, store: InMemoryVectorStore, models: Models, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    failing = Models(
        token=lambda: FailingTokenModel(models.token),
        text=LangChainTextModel(EchoChatModel(fail=True)),
    )
    chain = _chain(build(case, failing), store)
    handler = RecordingHandler()
    seen = ""
    for run in (
        lambda: chain.invoke(QUESTION, {"callbacks": [handler]}),
        lambda: list(chain.stream(QUESTION, {"callbacks": [handler]})),
    ):
        try:
            run()
        except Exception as exc:
            seen += "".join(traceback.format_exception(exc)) + repr(exc)
    try:
        _ = [e async for e in chain.astream_events(QUESTION, version="v2")]
    except Exception as exc:
        seen += "".join(traceback.format_exception(exc))
    assert SECRET not in seen + handler.text() + caplog.text


# -- mutation tests: the detector must fire when a channel does leak ----------------


async def test_detector_fires_on_plain_langchain_rag(store: InMemoryVectorStore) -> None:
    prompt = ChatPromptTemplate.from_messages([("human", "{context}\n\n{question}")])
    join = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    plain = {"context": store.as_retriever() | join, "question": RunnablePassthrough()}
    chain = plain | prompt | EchoChatModel()
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    leaking = {e["event"] for e in events if SECRET in dump(e)}
    assert {"on_retriever_end", "on_chat_model_start"} <= leaking


async def test_detector_fires_on_leaky_mechanism(store: InMemoryVectorStore) -> None:
    with pytest.raises(AssertionError):
        await _exercise(_chain(LeakyMechanism(k=3), store), check_output=True)


async def test_detector_fires_without_sealing(
    store: InMemoryVectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calling the model through ``invoke`` in the chain's context leaks its prompt to traces."""
    ksa = pytest.importorskip("dprag_core.algorithms.ksa")
    import langchain_dprag.chain
    import langchain_dprag.models

    class Unsealed:
        def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    monkeypatch.setattr(
        langchain_dprag.models, "complete", lambda plan, p, kw: message_text(plan.model.invoke(p))
    )
    monkeypatch.setattr(langchain_dprag.chain, "Sealed", Unsealed)
    mechanism = ksa.DPKSA(LangChainTextModel(EchoChatModel()), epsilon=5.0, n_docs=8)
    seen = await _exercise(_chain(mechanism, store), check_output=False)
    assert SECRET in seen


def test_detector_fires_on_raw_exceptions(
    store: InMemoryVectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the error guard, a model error quoting its prompt carries the secret.

    RAG reads its model through ``generate_each`` (a failed prompt: an empty
    answer), so the control also calls the model raw, as a mechanism that let its
    model's error through would.
    """
    import dprag_core.algorithms.baselines
    import dprag_core.pipeline
    from dprag_core.algorithms.baselines import RAG

    def raw(model: Any, prompts: list[str], *, max_new_tokens: int) -> list[str]:
        return list(model.generate(prompts, max_new_tokens=max_new_tokens))

    monkeypatch.setattr(dprag_core.pipeline, "guarded", lambda fn: fn())
    monkeypatch.setattr(dprag_core.algorithms.baselines, "generate_each", raw)
    model = LangChainTextModel(EchoChatModel(fail=True))
    with pytest.raises(ValueError) as info:
        _chain(RAG(model, k=3), store).invoke(QUESTION)
    assert SECRET in "".join(traceback.format_exception(info.value))
