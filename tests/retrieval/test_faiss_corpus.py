"""FaissCorpus: cosine scores, top-k and range search agree with a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from toy_mechanisms import AboveToy

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.above import retrieve_above
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.faiss_corpus import FaissCorpus
from dprag_core.retrieval.scores import COSINE_SCALE


def corpus_with(n: int = 200, dim: int = 16, seed: int = 0) -> tuple[FaissCorpus, np.ndarray]:
    gen = np.random.default_rng(seed)
    emb = gen.normal(size=(n, dim)) * gen.uniform(0.1, 10, size=(n, 1))  # unnormalised
    corpus = FaissCorpus(dim=dim)
    ids = [f"d{i}" for i in range(n)]
    corpus.add(
        ids, [f"secret text {i}" for i in range(n)], emb, units=[f"p{i // 2}" for i in range(n)]
    )
    return corpus, emb / np.linalg.norm(emb, axis=1, keepdims=True)


def test_search_returns_cosine_top_k_best_first() -> None:
    corpus, unit = corpus_with()
    q = np.random.default_rng(1).normal(size=16)
    ref = unit @ (q / np.linalg.norm(q))
    got = corpus.search(q * 3.0, k=10)
    assert [d.id for d in got] == [f"d{i}" for i in np.argsort(-ref)[:10]]
    assert [d.score for d in got] == pytest.approx(np.sort(ref)[::-1][:10], abs=1e-5)
    assert got[0].unit == f"p{int(np.argmax(ref)) // 2}"
    assert got[0].text.startswith("secret text")
    assert len(corpus.search(q, k=1000)) == 200


@pytest.mark.parametrize("tau", [-1.0, -0.2, 0.0, 0.3, 0.6, 0.999])
def test_range_search_returns_every_document_above_tau(tau: float) -> None:
    corpus, unit = corpus_with()
    q = np.random.default_rng(2).normal(size=16)
    ref = unit @ (q / np.linalg.norm(q))
    got = corpus.range_search(q, tau)
    expected = {f"d{i}" for i in np.flatnonzero(ref > tau + 1e-5)}
    borderline = {f"d{i}" for i in np.flatnonzero(np.abs(ref - tau) <= 1e-5)}
    ids = {d.id for d in got}
    assert expected <= ids <= expected | borderline
    assert all(d.score > tau for d in got)
    assert [d.score for d in got] == sorted((d.score for d in got), reverse=True)
    # the generic doubling fallback finds the same set through top-k search
    fallback = retrieve_above(lambda _q, k: corpus.search(q, k), "q", tau, initial_k=4)
    assert [d.id for d in fallback] == [d.id for d in got]


def test_retriever_adapter_and_empty_corpus() -> None:
    corpus = FaissCorpus(dim=3)
    assert corpus.search(np.ones(3), k=2) == [] and corpus.range_search(np.ones(3), 0.0) == []
    corpus.add(["a", "b"], ["x", "y"], np.array([[1.0, 0, 0], [0, 1.0, 0]]))
    r = corpus.as_retriever(lambda question: np.array([1.0, 0.1, 0]))
    assert [d.id for d in r("q", 1)] == ["a"]
    assert [d.id for d in r.above("q", 0.05)] == ["a", "b"]
    assert corpus.score_bounds == (-1.0, 1.0)
    assert "x" not in repr(corpus.search(np.ones(3), k=2)) and "x" not in repr(r)


def test_bad_input() -> None:
    corpus = FaissCorpus(dim=2)
    with pytest.raises(ValueError, match="dim"):
        FaissCorpus(dim=0)
    with pytest.raises(ValueError, match="shape"):
        corpus.add(["a"], ["x"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="zero"):
        corpus.add(["a"], ["x"], np.zeros((1, 2)))
    with pytest.raises(ValueError, match="same length"):
        corpus.add(["a", "b"], ["x"], np.ones((2, 2)))
    corpus.add(["a"], ["x"], np.ones((1, 2)))
    with pytest.raises(ValueError, match="distinct"):
        corpus.add(["a"], ["x"], np.ones((1, 2)))
    for tau in (1.5, 1.0, -1.5, float("nan")):  # the one threshold rule: [-1, 1)
        with pytest.raises(ValueError, match=r"tau must be"):
            corpus.range_search(np.ones(2), tau)
    with pytest.raises(ValueError, match="k"):
        corpus.search(np.ones(2), 0)


@pytest.mark.parametrize("tau", [-2.0, 1.0, 1.5])
def test_private_rag_refuses_a_min_score_outside_the_cosine_range(tau: float) -> None:
    class Above(AboveToy):
        def min_score(self) -> float:
            return tau

    corpus, _ = corpus_with(n=4, dim=2)
    retriever = corpus.as_retriever(lambda q: np.ones(2))
    assert retriever.scale == COSINE_SCALE
    accountant = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    with pytest.raises(ValueError, match=r"the mechanism's min_score\(\) must be in \[-1.0, 1.0\)"):
        PrivateRAG(Above(), retriever, accountant=accountant)
    assert accountant.queries == 0
    PrivateRAG(AboveToy(), retriever, accountant=accountant).answer("q")  # τ = 0 is fine


def test_a_declared_scale_must_be_a_score_scale() -> None:
    class Odd(HonoursK):
        scale = (-1.0, 1.0)

    with pytest.raises(TypeError, match=r"Odd\.scale must be a ScoreScale, got tuple"):
        PrivateRAG(
            AboveToy(), Odd(lambda q, k: []), accountant=InMemoryCorpusAccountant(Budget(1.0))
        )


@pytest.mark.parametrize("cells", [False, True])
def test_ties_are_ranked_by_id_whatever_the_insertion_order(cells: bool) -> None:
    """Six documents tied at the cut of the top 3 (and x tied with them): D + x built in
    another order returns the same first three (by id) as D with x appended, on the flat
    and on the partitioned index; above a threshold, ties come by id too."""
    from dprag_core.retrieval.cells import PublicPartition

    q = np.eye(5, dtype=np.float32)[0]
    axes = [sign * np.eye(5)[a] for a in (1, 2, 3) for sign in (1, -1)]
    rows = [(f"t{i}", q + 0.5 * v) for i, v in enumerate(axes)]
    rows.append(("far", -q + 0.1 * np.eye(5)[4]))
    x = ("a-x", q + 0.5 * np.eye(5)[4])

    def build(order: list[tuple[str, np.ndarray]]) -> tuple[list[str], list[str]]:
        partition = PublicPartition.random(dim=5, cells=2, probes=2, seed=1) if cells else None
        corpus = FaissCorpus(dim=5, partition=partition)
        corpus.add([i for i, _ in order], [i for i, _ in order], np.array([v for _, v in order]))
        found = [d.id for d in corpus.search(q, 3)]
        return found, [d.id for d in corpus.range_search(q, 0.5)]

    appended, reordered = build([*rows, x]), build([x, *reversed(rows)])
    assert appended == reordered
    assert appended == (["a-x", "t0", "t1"], ["a-x", "t0", "t1", "t2", "t3", "t4", "t5"])
    assert build(rows)[0] == build(list(reversed(rows)))[0] == ["t0", "t1", "t2"]
