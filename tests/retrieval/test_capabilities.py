"""Sources declare what they promise; pipelines refuse the others when they are built."""

from __future__ import annotations

import math

import numpy as np
import pytest
from toy_mechanisms import AboveToy, ToyMechanism

from dprag_core import Budget, InMemoryCorpusAccountant
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.above import retrieve_above
from dprag_core.retrieval.capabilities import HonoursK, requirement
from dprag_core.retrieval.documents import ScoredDocument, admit
from dprag_core.retrieval.faiss_corpus import FaissCorpus


def test_undeclared_retrievers_are_refused_when_the_pipeline_is_built() -> None:
    def plain(question: str, k: int) -> list[ScoredDocument]:
        raise AssertionError("never called")

    for mech in (ToyMechanism(k=3), AboveToy()):
        with pytest.raises(ValueError, match="Sources that qualify: FaissRetriever"):
            PrivateRAG(mech, plain)
    corpus = FaissCorpus(dim=2)
    corpus.add(["a"], ["x"], np.array([[1.0, 0.0]]))
    for mech in (ToyMechanism(k=3), AboveToy()):
        budget = InMemoryCorpusAccountant(Budget(10.0))
        PrivateRAG(mech, corpus.as_retriever(lambda q: np.array([1.0, 0.0])), accountant=budget)
        PrivateRAG(mech, HonoursK(plain), accountant=budget)
    budget = InMemoryCorpusAccountant(Budget(10.0))
    PrivateRAG(ToyMechanism(k=0), plain, accountant=budget)  # retrieves nothing: needs nothing


def test_range_search_alone_serves_thresholds_not_top_n() -> None:
    class RangeOnly:
        def __call__(self, question: str, k: int) -> list[ScoredDocument]:
            return []

        def above(self, question: str, tau: float) -> list[ScoredDocument]:
            return []

    assert requirement(None, RangeOnly()) is None
    assert requirement(5, RangeOnly()) is not None


@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_are_refused(score: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        ScoredDocument(id="a", text="", score=score)
    assert admit("a", "", score, "u", slot=0).is_padding
    with pytest.raises(TypeError, match="score"):
        ScoredDocument(id="a", text="", score="0.5")  # type: ignore[arg-type]


def test_unusable_documents_become_placeholders_not_errors() -> None:
    assert admit("__dprag_padding__3", "real text", 0.5, "u", slot=1).is_padding
    assert admit("a", "t", None, "u", slot=1).is_padding
    assert admit("a", "t", 0.5, None, slot=1).is_padding
    assert not admit("a", "t", np.float32(0.5), "u", slot=1).is_padding


def test_no_cap_and_placeholders_keep_their_slot() -> None:
    docs = [ScoredDocument(id=str(i), text="", score=1.0) for i in range(3000)]
    docs[63] = ScoredDocument.padding(63)  # an unusable document in the middle
    found = retrieve_above(lambda q, k: docs[:k], "q", 0.5, initial_k=4)
    assert len(found) == 2999  # read to the end, however long
