"""DPRAGChain with real LangChain objects: LCEL, batch, streaming, async, events, budget."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import (
    QUESTION,
    CountingRetriever,
    HashingEmbeddings,
    RecordingHandler,
    budget,
    corpus,
)
from toy_mechanisms import RELEASED, AboveToy, ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms.murag import NaiveMulti
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PRIVATE_FAILURE
from langchain_dprag import DPRAGChain, DPRAGOutput, LangChainTextModel
from langchain_dprag.chain import QUERY_END_EVENT, QUERY_START_EVENT
from langchain_dprag.errors import PrivateDataError


def _chain(store: InMemoryVectorStore, **kw: Any) -> DPRAGChain:
    kw.setdefault("mechanism", ToyMechanism(k=3))
    kw.setdefault("accountant", budget())
    return DPRAGChain(vectorstore=store, **kw)


def test_invoke_str_and_dict(store: InMemoryVectorStore) -> None:
    acc = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    chain = _chain(store, accountant=acc)
    out = chain.invoke(QUESTION)
    assert isinstance(out, DPRAGOutput)
    assert (out.answer, out.epsilon, out.delta, out.mechanism) == ("3 candidates", 1.0, 1e-6, "Toy")
    assert out.details == RELEASED
    assert chain.invoke({"question": QUESTION}).answer == "3 candidates"
    assert acc.queries == 2 and acc.spent_epsilon == pytest.approx(2.0)


def test_bad_input_spends_nothing(store: InMemoryVectorStore) -> None:
    acc = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    chain = _chain(store, accountant=acc)
    for bad in ("", "   ", {"query": QUESTION}, {"question": 3}):
        with pytest.raises(ValueError, match="question"):
            chain.invoke(bad)
    assert acc.queries == 0


def test_construction_errors(store: InMemoryVectorStore) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        DPRAGChain(mechanism=ToyMechanism())
    with pytest.raises(ValueError, match="exactly one"):
        DPRAGChain(
            mechanism=ToyMechanism(),
            vectorstore=store,
            retriever=store.as_retriever(),
            accountant=budget(),
        )
    with pytest.raises(TypeError, match="DPRAGChain: mechanism must be an instance of Mechanism"):
        DPRAGChain(mechanism="not a mechanism", vectorstore=store)  # type: ignore[arg-type]


def test_lcel_pipeline_and_batch(store: InMemoryVectorStore) -> None:
    prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
    app = (
        RunnableLambda(lambda q: {"question": q})
        | prompt
        | _chain(store)
        | RunnableLambda(lambda out: out.answer)
        | StrOutputParser()
    )
    assert app.invoke(QUESTION) == "3 candidates"
    assert app.batch([QUESTION, "Who has asthma?"]) == ["3 candidates"] * 2


async def test_abatch_and_ainvoke(store: InMemoryVectorStore) -> None:
    chain = _chain(store)
    outs = await chain.abatch([QUESTION, {"question": "Who has asthma?"}])
    assert [o.answer for o in outs] == ["3 candidates"] * 2
    assert (await chain.ainvoke(QUESTION)).epsilon == 1.0


def test_stream_yields_chunks_that_add_up(store: InMemoryVectorStore) -> None:
    chunks = list(_chain(store).stream(QUESTION))
    assert [c.answer for c in chunks] == ["3", " candidates", ""]
    assert chunks[-1].epsilon == 1.0 and chunks[0].epsilon is None
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total == _chain(store).invoke(QUESTION)


async def test_astream(store: InMemoryVectorStore) -> None:
    chunks = [c async for c in _chain(store).astream({"question": QUESTION})]
    assert "".join(c.answer for c in chunks) == "3 candidates"
    assert chunks[-1].mechanism == "Toy"


async def test_astream_events_spend_event_and_nesting(store: InMemoryVectorStore) -> None:
    chain = _chain(store).with_config(run_name="private_rag")
    events = [e async for e in chain.astream_events(QUESTION, version="v2")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    assert "on_chain_stream" in kinds
    custom = [e for e in events if e["event"] == "on_custom_event"]
    assert [e["name"] for e in custom] == [QUERY_START_EVENT, QUERY_END_EVENT]
    assert custom[0]["data"] == {"epsilon": 1.0, "delta": 1e-6, "mechanism": "Toy"}
    assert custom[1]["data"] == {
        "epsilon": 1.0,
        "delta": 1e-6,
        "mechanism": "Toy",
        "stop_reason": "eos",
        "private_tokens": None,
        "keywords_released": None,
        "public_fallback": False,
    }
    chain_run = events[0]["run_id"]
    retr = [e for e in events if e["event"].startswith("on_retriever")]
    assert [e["event"] for e in retr] == ["on_retriever_start", "on_retriever_end"]
    assert all(e["parent_ids"] == [chain_run] for e in retr)  # nested under the chain
    assert retr[1]["data"]["output"] == []  # documents withheld


def test_custom_event_reaches_callback_handler(store: InMemoryVectorStore) -> None:
    handler = RecordingHandler()
    _chain(store).invoke(QUESTION, {"callbacks": [handler]})
    custom = [r for r in handler.records if r.startswith("on_custom_event")]
    assert len(custom) == 2 and all("'epsilon': 1.0" in c for c in custom)


def test_budget_exhaustion_refused_before_retrieval(store: InMemoryVectorStore) -> None:
    retriever = CountingRetriever(store=store)
    acc = InMemoryCorpusAccountant(Budget(1.5, 1e-3))
    chain = DPRAGChain(
        retriever=retriever, retriever_honours_k=True, mechanism=ToyMechanism(k=3), accountant=acc
    )
    assert chain.invoke(QUESTION).answer == "3 candidates"
    assert retriever.calls == 1
    with pytest.raises(PrivacyBudgetExhausted):
        chain.invoke(QUESTION)
    with pytest.raises(PrivacyBudgetExhausted):
        list(chain.stream(QUESTION))
    assert retriever.calls == 1  # the retriever was never called after exhaustion
    assert acc.queries == 1


def test_naive_multi_is_charged_to_its_accountant_before_retrieval(
    store: InMemoryVectorStore,
) -> None:
    retriever = CountingRetriever(store=store)
    acc = InMemoryCorpusAccountant(Budget(1.5, 1e-3))
    naive = NaiveMulti(ToyMechanism(k=3), accountant=acc)
    chain = DPRAGChain(retriever=retriever, retriever_honours_k=True, mechanism=naive)
    assert chain.invoke(QUESTION).answer == "3 candidates"
    with pytest.raises(PrivacyBudgetExhausted):
        list(chain.stream(QUESTION))
    assert retriever.calls == 1 and acc.queries == 1
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        DPRAGChain(vectorstore=store, mechanism=naive, accountant=budget())
    assert chain.accountant is acc and "accountant=InMemoryCorpusAccountant" in repr(chain)
    chain.accountant = budget()  # replaced after the chain was built: refused, nothing charged
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        chain.invoke(QUESTION)
    assert retriever.calls == 1 and chain.accountant.spent_epsilon == 0.0


async def test_budget_exhaustion_async(store: InMemoryVectorStore) -> None:
    retriever = CountingRetriever(store=store)
    acc = InMemoryCorpusAccountant(Budget(0.5))
    chain = DPRAGChain(
        retriever=retriever, retriever_honours_k=True, mechanism=ToyMechanism(k=3), accountant=acc
    )
    with pytest.raises(PrivacyBudgetExhausted):
        await chain.ainvoke(QUESTION)
    with pytest.raises(PrivacyBudgetExhausted):
        _ = [c async for c in chain.astream(QUESTION)]
    assert retriever.calls == 0


def test_retriever_path_scores_units_and_k(store: InMemoryVectorStore) -> None:
    mech = ToyMechanism(k=5)
    retriever = CountingRetriever(store=store)
    chain = DPRAGChain(
        retriever=retriever,
        retriever_honours_k=True,
        mechanism=mech,
        unit_key="patient",
        accountant=budget(),
    )
    assert chain.invoke(QUESTION).answer == "5 candidates"  # k reached the user's retriever


def test_undeclared_retrievers_are_refused_when_built(store: InMemoryVectorStore) -> None:
    for mech in (ToyMechanism(k=2), AboveToy()):
        for promise in (False, True):  # the store's own MMR: no promise makes it exact
            with pytest.raises(ValueError, match="search_type='mmr' ranks each document by"):
                DPRAGChain(
                    retriever=store.as_retriever(search_type="mmr"),
                    retriever_honours_k=promise,
                    mechanism=mech,
                )
        with pytest.raises(ValueError, match="Sources that qualify"):
            DPRAGChain(retriever=CountingRetriever(store=store), mechanism=mech)


def test_retriever_without_scores(store: InMemoryVectorStore) -> None:
    plain = CountingRetriever(store=store, scores=False)
    top = DPRAGChain(
        retriever=plain, retriever_honours_k=True, mechanism=ToyMechanism(k=2), accountant=budget()
    )
    assert top.invoke(QUESTION).answer == "2 candidates"  # its own rank order is enough
    # a threshold mechanism drops documents without a score: no data-dependent error
    above = DPRAGChain(
        retriever=plain, retriever_honours_k=True, mechanism=AboveToy(), accountant=budget()
    )
    assert above.invoke(QUESTION).answer == "0 candidates"
    with_scores = CountingRetriever(store=store)
    chain = DPRAGChain(
        retriever=with_scores, retriever_honours_k=True, mechanism=AboveToy(), accountant=budget()
    )
    assert 1 <= int(chain.invoke(QUESTION).answer.split()[0]) < len(corpus())


@pytest.mark.parametrize("tau", [-0.5, 1.0])  # below the floor; the top, never exceeded
def test_min_score_outside_range(store: InMemoryVectorStore, tau: float) -> None:
    from langchain_dprag import ScoreFunction

    class Outside(AboveToy):
        def min_score(self) -> float:
            return tau

    unit = ScoreFunction("unit", low=0.0, high=1.0)
    with pytest.raises(
        ValueError, match=r"the mechanism's min_score\(\) must be in \[0\.0, 1\.0\)"
    ):
        DPRAGChain(vectorstore=store, mechanism=Outside(), score_function=unit, accountant=budget())


def test_distances_are_not_read_as_similarities(store: InMemoryVectorStore) -> None:
    from langchain_dprag import RELEVANCE, SQUARED_L2_UNIT

    for wrong in (SQUARED_L2_UNIT, RELEVANCE):
        with pytest.raises(ValueError, match="returns cosine scores"):
            DPRAGChain(
                vectorstore=store,
                mechanism=ToyMechanism(),
                score_function=wrong,
                accountant=budget(),
            )


def test_mechanism_failure_is_withheld(store: InMemoryVectorStore) -> None:
    class Broken(ToyMechanism):
        def answer(self, question: str, docs: Any, *, rng: Any = None) -> Any:
            raise KeyError(docs[0].text)

    with pytest.raises(PrivateDataError) as info:
        _chain(store, mechanism=Broken()).invoke(QUESTION)
    assert str(info.value) == PRIVATE_FAILURE and "KeyError" not in str(info.value)
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_repr_shows_no_documents(store: InMemoryVectorStore) -> None:
    class DocsRetriever(CountingRetriever):
        docs: list[Document]

    retriever = DocsRetriever(store=store, docs=corpus())
    chain = DPRAGChain(
        retriever=retriever, retriever_honours_k=True, mechanism=ToyMechanism(), accountant=budget()
    )
    for text in (repr(chain), str(chain), str(chain.to_json())):
        assert "DocsRetriever" in text or "DPRAGChain" in text
        assert "Alice" not in text and "aspirin" not in text


def test_switch_mechanism_is_one_field(store: InMemoryVectorStore, models: Any) -> None:
    """Moving between mechanisms changes only ``mechanism=`` (FakeListChatModel for DP-KSA)."""
    ksa = pytest.importorskip("dprag_core.algorithms.ksa")
    dpvote = pytest.importorskip("dprag_core.algorithms.dpvote")
    fake = LangChainTextModel(FakeListChatModel(responses=["aspirin treats migraine"]))
    mechanisms = [
        dpvote.DPSparseVote(
            models.token, m=2, k=2, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=3
        ),
        ksa.DPKSA(fake, epsilon=5.0, delta=1e-4, n_docs=4),
    ]
    for mechanism in mechanisms:
        out = DPRAGChain(vectorstore=store, mechanism=mechanism, accountant=budget()).invoke(
            QUESTION
        )
        assert out.mechanism == mechanism.name and 0 < out.epsilon <= 5.0 * 1.01


def test_faiss_store(faiss_store: Any) -> None:
    out = DPRAGChain(
        vectorstore=faiss_store, mechanism=ToyMechanism(k=4), accountant=budget()
    ).invoke(QUESTION)
    assert out.answer == "4 candidates"


def test_other_store_embeddings() -> None:
    vs = InMemoryVectorStore(HashingEmbeddings(dim=32))
    vs.add_texts(["first record", "second record", "third record"])
    assert (
        DPRAGChain(vectorstore=vs, mechanism=ToyMechanism(k=2), accountant=budget())
        .invoke(QUESTION)
        .answer
        == "2 candidates"
    )


def test_a_seed_starts_one_generator_so_queries_do_not_repeat_noise() -> None:
    """A fixed seed must not hand every query the same coins (composition needs fresh noise)."""
    import numpy as np
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from dprag_core.algorithms.base import Mechanism
    from dprag_core.answers import DPAnswer

    class Draw(Mechanism):
        name = "Draw"

        def candidates_needed(self) -> int:
            return 0

        def answer(self, question, docs, *, rng=None):  # type: ignore[no-untyped-def]
            from dprag_core.mechanisms.rng import make_rng

            return DPAnswer(str(make_rng(rng).integers(10**9)), None, self.name, RELEASED)

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_texts(["a record"])
    chain = DPRAGChain(vectorstore=store, mechanism=Draw(), rng=7, accountant=budget())
    draws = {chain.invoke("q").answer for _ in range(3)}
    assert len(draws) == 3
    assert isinstance(chain.rng, np.random.Generator)


def test_a_dp_chain_needs_a_budget(store: InMemoryVectorStore) -> None:
    """No budget, no chain: the error names a persistent accountant (was: ran unbounded)."""
    with pytest.raises(ValueError, match=r'accountant=SQLiteCorpusAccountant\(name="<corpus>"'):
        DPRAGChain(vectorstore=store, mechanism=ToyMechanism())
    with pytest.raises(
        TypeError, match=r'got Budget: pass accountant=SQLiteCorpusAccountant\(name="<corpus>"'
    ):
        DPRAGChain(vectorstore=store, mechanism=ToyMechanism(), accountant=Budget(5.0))  # type: ignore[arg-type]


def test_long_question_refused_before_the_charge(store: InMemoryVectorStore) -> None:
    acc = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    chain = _chain(store, accountant=acc, max_question_tokens=16)
    with pytest.raises(ValueError, match="max_question_tokens=16"):
        chain.invoke("Which drug? " * 40)
    with pytest.raises(ValueError, match="lone surrogate"):
        list(chain.stream("Which" + chr(0xD800)))
    assert acc.queries == 0


def test_retrieved_non_documents_are_dropped(store: InMemoryVectorStore) -> None:
    """Retrieval comes after the charge: junk keeps its rank slot as a placeholder, no error."""

    class Junk(CountingRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
        ) -> list[Any]:
            found = super()._get_relevant_documents(query, run_manager=run_manager, k=k)
            return ["not a document", *found[:2]]

    chain = DPRAGChain(
        retriever=Junk(store=store),
        retriever_honours_k=True,
        mechanism=ToyMechanism(k=3),
        accountant=budget(),
    )
    assert chain.invoke(QUESTION).answer == "2 candidates"
