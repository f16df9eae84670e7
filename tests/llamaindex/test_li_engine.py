"""DPQueryEngine over real LlamaIndex objects: order of work, metadata, streaming, async,
opt-in ids, score conventions, units and bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import faiss
import pytest
from li_helpers import DIM, QUESTION, HashEmbedding, corpus_nodes
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.vector_stores.faiss import FaissVectorStore
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms.murag import NaiveMulti
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.scores import ScoreScale
from llamaindex_dprag import COSINE_RANGE, DPQueryEngine
from llamaindex_dprag.sources import IndexSource, RetrieverSource


class SpySource:
    """Records every retrieval the engine makes through a real source."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[int] = []
        self.honours_k = inner.honours_k

    def bind(self, question: str) -> Any:
        bound = self.inner.bind(question)

        def retrieve(q: str, k: int) -> Any:
            self.calls.append(k)
            return bound(q, k)

        return HonoursK(retrieve) if self.honours_k else retrieve


def spy(engine: DPQueryEngine) -> SpySource:
    source = SpySource(engine._source)
    engine._source = source
    return source


def dpsparsevote(tiny_token_model: Any, **kw: Any) -> Any:
    from dprag_core.algorithms.dpvote import DPSparseVote

    args = {"m": 3, "k": 2, "epsilon": 5.0, "delta": 1e-4, "epsilon_token": 1.0}
    return DPSparseVote(tiny_token_model, **{**args, "max_new_tokens": 6, **kw})


def test_one_line_engine_answers_with_guarantee(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(k=4), budget=InMemoryCorpusAccountant(Budget(3.0, 1e-5))
    )
    response = engine.query(QUESTION)
    assert isinstance(response, Response)
    assert response.response == "4 candidates"  # exactly candidates_needed() retrieved
    assert response.source_nodes == []
    assert response.metadata == {
        "epsilon": 1.0,
        "delta": 1e-6,
        "mechanism": "Toy",
        "details": {"stop_reason": "eos"},
        "uses_corpus": True,
        "stop_reason": "eos",
        "answer_source": None,
    }
    assert engine.accountant is not None and engine.accountant.queries == 1


def test_source_ids_and_streaming_are_strict_bools(index: Any) -> None:
    for name in ("source_ids", "streaming"):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            DPQueryEngine.from_index(
                index,
                mechanism=ToyMechanism(k=3),
                budget=InMemoryCorpusAccountant(Budget(3.0, 1e-5)),
                **{name: "no"},
            )


def test_source_ids_opt_in_gives_ids_without_text(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index,
        mechanism=ToyMechanism(k=3),
        budget=InMemoryCorpusAccountant(Budget(3.0, 1e-5)),
        source_ids=True,
    )
    nodes = engine.query(QUESTION).source_nodes
    assert nodes[0].node.node_id == "node-doc-canary"
    assert len(nodes) == 3
    assert all(n.node.get_content(metadata_mode="all") == "" and n.score is None for n in nodes)


def test_fewer_documents_than_needed(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(k=50), budget=InMemoryCorpusAccountant(Budget(100.0, 0.5))
    )
    assert engine.query(QUESTION).response == f"{len(corpus_nodes())} candidates"


def test_budget_exhaustion_is_refused_before_retrieval(index: Any) -> None:
    embed = index._embed_model
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(), budget=InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    )
    source = spy(engine)
    engine.query(QUESTION)
    assert source.calls == [4]
    before = embed.calls
    with pytest.raises(PrivacyBudgetExhausted):
        engine.query(QUESTION)
    assert source.calls == [4]  # no second retrieval
    assert embed.calls == before  # the question was not even embedded
    assert engine.accountant is not None and engine.accountant.queries == 1


def test_streaming_refuses_before_returning_a_stream(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index,
        mechanism=ToyMechanism(),
        budget=InMemoryCorpusAccountant(Budget(0.5, 1e-5)),
        streaming=True,
    )
    source = spy(engine)
    with pytest.raises(PrivacyBudgetExhausted):
        engine.query(QUESTION)
    assert source.calls == []


def test_shared_accountant(index: Any) -> None:
    shared = InMemoryCorpusAccountant(Budget(2.0, 1e-5))
    first = DPQueryEngine.from_index(index, mechanism=ToyMechanism(), budget=shared)
    second = DPQueryEngine.from_retriever(
        index.as_retriever(), mechanism=ToyMechanism(), budget=shared
    )
    first.query(QUESTION)
    second.query(QUESTION)
    with pytest.raises(PrivacyBudgetExhausted):
        first.query(QUESTION)


def test_naive_multi_is_charged_to_its_own_accountant_only(index: Any) -> None:
    own = InMemoryCorpusAccountant(Budget(1.5, 1e-5))
    engine = DPQueryEngine.from_index(
        index, mechanism=NaiveMulti(ToyMechanism(), accountant=own), budget=None
    )
    assert engine.accountant is own
    engine.accountant = InMemoryCorpusAccountant(Budget(100.0, 0.5))  # replaced after it was built
    with pytest.raises(ValueError, match="accountant=None or that same accountant"):
        engine.query(QUESTION)
    assert engine.accountant.spent_epsilon == 0.0 and own.spent_epsilon == 0.0


def test_bad_question_spends_nothing(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(), budget=InMemoryCorpusAccountant(Budget(3.0, 1e-5))
    )
    source = spy(engine)
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        engine.query("   ")
    assert engine.accountant is not None and engine.accountant.queries == 0
    assert source.calls == []


def test_streaming_dpsparsevote_token_by_token(index: Any, tiny_token_model: Any) -> None:
    def engine(streaming: bool) -> DPQueryEngine:
        return DPQueryEngine.from_index(
            index,
            mechanism=dpsparsevote(tiny_token_model, epsilon=20.0),
            budget=InMemoryCorpusAccountant(Budget(50.0, 1e-3)),
            streaming=streaming,
            rng=3,  # a seed under which the tiny random model releases several tokens
        )

    streamed = engine(True).query(QUESTION)
    assert isinstance(streamed, StreamingResponse)
    assert streamed.metadata == {"mechanism": "DPSparseVote"}  # filled when the stream ends
    chunks = list(streamed.response_gen)
    # one chunk per released token, not one block
    assert len(chunks) == streamed.metadata["details"]["tokens_generated"] >= 2
    assert streamed.metadata["epsilon"] == 20.0 and streamed.metadata["delta"] == 1e-4
    plain = engine(False).query(QUESTION)  # same seed, same docs: same answer
    assert "".join(chunks) == plain.response


def test_async_query_and_stream(index: Any, tiny_token_model: Any) -> None:
    engine = DPQueryEngine.from_index(
        index,
        mechanism=ToyMechanism(),
        budget=InMemoryCorpusAccountant(Budget(5.0, 1e-5)),
        streaming=False,
    )
    response = asyncio.run(engine.aquery(QUESTION))
    assert isinstance(response, Response) and response.response == "4 candidates"

    engine.streaming = True

    async def collect() -> tuple[Any, str]:
        streamed = await engine.aquery(QUESTION)
        return streamed, "".join([c async for c in streamed.async_response_gen()])

    streamed, text = asyncio.run(collect())
    assert isinstance(streamed, AsyncStreamingResponse)
    assert text == "4 candidates" and streamed.metadata["epsilon"] == 1.0


def test_similarity_top_k(index: Any) -> None:
    with pytest.raises(ValueError, match="similarity_top_k must be None or 4"):
        DPQueryEngine.from_index(
            index,
            mechanism=ToyMechanism(k=4),
            similarity_top_k=10,
            budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        )
    DPQueryEngine.from_index(
        index,
        mechanism=ToyMechanism(k=4),
        similarity_top_k=4,
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
    )


def test_threshold_mechanism_fetches_every_candidate_above_tau(index: Any) -> None:
    class AboveTau(ToyMechanism):
        def candidates_needed(self) -> None:
            return None

        def min_score(self) -> float:
            return 0.2

    engine = DPQueryEngine.from_index(
        index,
        mechanism=AboveTau(),
        similarity_top_k=40,
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
    )
    source = spy(engine)
    answer = engine.query(QUESTION).response
    docs = IndexSource(index).bind(QUESTION)(QUESTION, 100)
    assert answer == f"{sum(d.score > 0.2 for d in docs)} candidates"
    assert source.calls[0] == 40  # similarity_top_k: the least k of each store query


@pytest.mark.parametrize(
    ("score_range", "tau", "allowed"),
    [((-1.0, 1.0), -1.0, True), ((-1.0, 1.0), 1.0, False), ((0.0, 1.0), -0.5, False)],
)
def test_a_min_score_outside_the_declared_range_is_refused(
    index: Any, score_range: tuple[float, float], tau: float, allowed: bool
) -> None:
    class AboveTau(ToyMechanism):
        def candidates_needed(self) -> None:
            return None

        def min_score(self) -> float:
            return tau

    def build() -> DPQueryEngine:
        return DPQueryEngine.from_index(
            index,
            mechanism=AboveTau(),
            score_range=score_range,
            budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
        )

    if allowed:
        assert build().query(QUESTION).response.endswith("candidates")
    else:
        with pytest.raises(ValueError, match=r"the mechanism's min_score\(\) must be in \["):
            build()


def test_a_custom_source_declaring_a_scale_gets_min_score_checked() -> None:
    class AboveTau(ToyMechanism):
        def candidates_needed(self) -> None:
            return None

        def min_score(self) -> float:
            return -0.5

    class UnitSource:  # a CandidateSource of the user's own, scores on [0, 1]
        honours_k = True
        scale = ScoreScale("unit", low=0.0, high=1.0)

        def bind(self, question: str) -> HonoursK:
            return HonoursK(lambda q, k: [])

    budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    with pytest.raises(ValueError, match=r"min_score\(\) must be in \[0.0, 1.0\)"):
        DPQueryEngine(mechanism=AboveTau(), source=UnitSource(), budget=budget)
    assert budget.queries == 0
    UnitSource.scale = ScoreScale("wide", low=-1.0, high=1.0)
    DPQueryEngine(mechanism=AboveTau(), source=UnitSource(), budget=budget)


def test_distance_store_scores_are_negated(index: Any) -> None:
    storage = StorageContext.from_defaults(vector_store=FaissVectorStore(faiss.IndexFlatL2(DIM)))
    l2_index = VectorStoreIndex(
        corpus_nodes(), storage_context=storage, embed_model=HashEmbedding()
    )
    cosine = IndexSource(index, score_range=COSINE_RANGE)
    docs = IndexSource(l2_index, score_direction="distance", score_range=(0.0, 4.0))
    near = docs.bind(QUESTION)(QUESTION, 5)
    assert near[0].id == "node-doc-canary"
    assert all(d.score <= 0 for d in near)
    assert [d.score for d in near] == sorted((d.score for d in near), reverse=True)
    # unit vectors: squared L2 distance = 2 - 2 cos
    other = {d.id: d.score for d in cosine.bind(QUESTION)(QUESTION, 50)}
    for d in near:
        assert d.score == pytest.approx(-(2 - 2 * other[d.id]), abs=1e-5)


def test_units_from_source_document_or_metadata(index: Any) -> None:
    by_doc = IndexSource(index).bind(QUESTION)(QUESTION, 3)
    assert by_doc[0].unit == "doc-canary"
    by_key = IndexSource(index, unit_key="patient").bind(QUESTION)(QUESTION, 3)
    assert by_key[0].unit == "p-canary"
    # nodes without the key are dropped (placeholders keep their slots), never an error
    orphans = IndexSource(index, unit_key="owner").bind(QUESTION)(QUESTION, 3)
    assert len(orphans) == 3 and all(d.is_padding for d in orphans)


def test_from_retriever_uses_the_index_store(index: Any) -> None:
    engine = DPQueryEngine.from_retriever(
        index.as_retriever(similarity_top_k=1),
        mechanism=ToyMechanism(k=5),
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
    )
    assert isinstance(engine._source, IndexSource)
    assert (
        engine.query(QUESTION).response == "5 candidates"
    )  # the mechanism's k, not the retriever's


def test_from_other_retriever_cuts_to_k(index: Any) -> None:
    from llama_index.core.retrievers import QueryFusionRetriever

    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=6)], similarity_top_k=6, num_queries=1
    )
    with pytest.raises(ValueError, match="Sources that qualify: DPQueryEngine"):
        DPQueryEngine.from_retriever(fusion, mechanism=ToyMechanism(k=3))
    engine = DPQueryEngine.from_retriever(
        fusion,
        mechanism=ToyMechanism(k=3),
        returns_everything=True,
        budget=InMemoryCorpusAccountant(Budget(100.0, 0.5)),
    )
    assert isinstance(engine._source, RetrieverSource)
    assert engine.query(QUESTION).response == "3 candidates"


def test_bad_construction(index: Any) -> None:
    with pytest.raises(TypeError, match="mechanism must be a dprag Mechanism"):
        DPQueryEngine.from_index(index, mechanism="dpsparsevote")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget must be a CorpusAccountant"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), budget=5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score_direction must be"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), score_direction="up")
    with pytest.raises(ValueError, match="score_range must satisfy low < high"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), score_range=(1.0, -1.0))
    with pytest.raises(TypeError, match="index must be a VectorStoreIndex"):
        DPQueryEngine.from_index(object(), mechanism=ToyMechanism())
    with pytest.raises(TypeError, match="retriever must be a BaseRetriever"):
        DPQueryEngine.from_retriever(object(), mechanism=ToyMechanism())

    class Neither(ToyMechanism):
        def candidates_needed(self) -> None:
            return None

    with pytest.raises(ValueError, match="neither a candidate count nor a min_score"):
        DPQueryEngine.from_index(index, mechanism=Neither())


def test_repr_shows_no_documents(index: Any) -> None:
    engine = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(), budget=InMemoryCorpusAccountant(Budget(1.0))
    )
    assert repr(engine).startswith("DPQueryEngine(mechanism=ToyMechanism()")
    assert "Patient" not in repr(engine) and "Patient" not in str(engine)


def test_distances_and_foreign_query_modes_are_refused_when_built(index: Any) -> None:
    storage = StorageContext.from_defaults(vector_store=FaissVectorStore(faiss.IndexFlatL2(DIM)))
    l2_index = VectorStoreIndex(
        corpus_nodes(), storage_context=storage, embed_model=HashEmbedding()
    )
    with pytest.raises(ValueError, match="returns distance scores"):
        DPQueryEngine.from_index(l2_index, mechanism=ToyMechanism())
    DPQueryEngine.from_index(
        l2_index,
        mechanism=ToyMechanism(),
        score_direction="distance",
        budget=InMemoryCorpusAccountant(Budget(1.0)),
    )
    with pytest.raises(ValueError, match="returns similarity scores"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), score_direction="distance")
    with pytest.raises(ValueError, match="query_mode must be 'default'"):
        DPQueryEngine.from_retriever(
            index.as_retriever(vector_store_query_mode="mmr"), mechanism=ToyMechanism()
        )
