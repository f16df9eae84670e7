"""DP-KSA / KSA end to end: keyword extraction, PTR pass -> keywords, PTR fail -> zero-shot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dprag_core import (
    Budget,
    InMemoryCorpusAccountant,
    PrivacyBudgetExhausted,
    PrivateRAG,
)
from dprag_core.algorithms.ksa import (
    DPKSA,
    KSA,
    STOP_WORDS,
    extract_keywords,
    keyword_histogram,
)
from dprag_core.prompts import KEYWORDS_TEMPLATE, NO_CONTEXT_TEMPLATE
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

QUESTION = "Which treatment cures Flumplenaxism?"


class ScriptedTextModel:
    """A TextModel whose response to a RAG prompt is its context (the 'document says');
    final-answer prompts are echoed so tests can see which prompt was used."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            if p.startswith("Context:\n"):
                out.append(p.split("Context:\n", 1)[1].split("\n\nQuestion:", 1)[0])
            else:
                out.append(f"ECHO[{p}]")
        return out

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """A PerPromptTextModel: the n_docs responses in one recorded call."""
        return list(self.generate(prompts, max_new_tokens=max_new_tokens))


def _docs(texts: Sequence[str], units: Sequence[str] | None = None) -> list[ScoredDocument]:
    return [
        ScoredDocument(id=f"d{i}", text=t, score=1.0 - i / 1000, unit=units[i] if units else "")
        for i, t in enumerate(texts)
    ]


def test_extract_keywords() -> None:
    text = (
        "Based on the context, Herman's disease is FLUMPLENAXISM; "
        "it's treated with Gleeblorazine-5, 2 mg!"
    )
    assert extract_keywords(text) == [  # as written: the case is kept
        "Herman",
        "disease",
        "FLUMPLENAXISM",
        "treated",
        "Gleeblorazine",
        "5",
        "2",
        "mg",
    ]
    assert extract_keywords("Café naïve Zorblasteron5 über") == [
        "Café",
        "naïve",
        "Zorblasteron5",
        "über",
    ]
    assert extract_keywords("the a of and", exclude=()) == []
    assert extract_keywords("aspirin cures fever", exclude=["fever"]) == ["aspirin", "cures"]
    assert "the" in STOP_WORDS and "answer" in STOP_WORDS


def test_histogram_counts_each_response_once() -> None:
    hist = keyword_histogram(["aspirin aspirin aspirin", "aspirin, fever.", "fever"])
    assert dict(zip(hist.keywords, hist.counts, strict=True)) == {"aspirin": 2, "fever": 2}
    assert hist.keywords == ("aspirin", "fever")  # ties broken alphabetically
    # each written form is a keyword of its own: the case is counted, and released, by DP
    cased = keyword_histogram(["Aspirin", "Aspirin now", "aspirin"])
    counts = dict(zip(cased.keywords, cased.counts, strict=True))
    assert counts == {"Aspirin": 2, "aspirin": 1, "now": 1}
    custom = keyword_histogram(["x-y", "x"], extractor=lambda t: t.split("-"))
    assert dict(zip(custom.keywords, custom.counts, strict=True)) == {"x": 2, "y": 1}


def test_dpksa_releases_the_consensus_keyword() -> None:
    texts = ["Gleeblorazine Injectibles cures it."] * 70 + [f"maybe rumour{i}" for i in range(10)]
    model = ScriptedTextModel()
    mech = DPKSA(model, epsilon=5.0)
    result = mech.answer(QUESTION, _docs(texts), rng=0)
    assert len(model.calls) == 2 and len(model.calls[0]) == 80  # one batched call for responses
    assert result.details["ptr_passed"] is True
    assert result.details["keywords_released"] == result.details["k_hat"] == 2
    assert result.details["epsilon_bound"] == mech.parameters.bound == "pld"
    expected_prompt = KEYWORDS_TEMPLATE.format(  # the released keywords, as written
        keywords="Gleeblorazine, Injectibles", question=QUESTION
    )
    assert model.calls[1] == [expected_prompt]
    assert "Gleeblorazine" in result.text
    assert result.guarantee == mech.query_cost() == Budget(5.0, 1e-4)  # what was asked for
    assert mech.parameters.achieved.epsilon <= 5.0  # the certified bound: within it
    assert set(result.details) == {
        "k_hat",
        "ptr_passed",
        "keywords_released",
        "epsilon_bound",
        "stop_reason",
        "answer_source",
    }
    assert result.details["stop_reason"] == "keywords"
    assert result.details["answer_source"] == "documents"
    assert "rumour" not in repr(result)


def test_dpksa_disagreement_fails_ptr_and_answers_zero_shot() -> None:
    texts = [f"candidate{i} perhaps{i}" for i in range(80)]
    model = ScriptedTextModel()
    mech = DPKSA(model, epsilon=2.0)
    for seed in range(20):
        result = mech.answer(QUESTION, _docs(texts), rng=seed)
        assert result.details["ptr_passed"] is False
        assert result.details["keywords_released"] == 0
        assert result.details["stop_reason"] == "ptr_failed"
        assert model.calls[-1] == [NO_CONTEXT_TEMPLATE.format(question=QUESTION)]
        assert "candidate" not in result.text


def test_question_words_are_dropped() -> None:
    texts = ["Flumplenaxism treatment is Gleeblorazine"] * 60
    model = ScriptedTextModel()
    DPKSA(model, epsilon=5.0, k_max=3).answer(QUESTION, _docs(texts), rng=1)
    keywords = model.calls[1][0].split("\n")[0]  # "Keywords: ..."
    assert "Flumplenaxism" not in keywords and "Gleeblorazine" in keywords
    model = ScriptedTextModel()
    KSA(model, drop_question_words=False).answer(QUESTION, _docs(texts))
    assert "Flumplenaxism" in model.calls[1][0].split("\n")[0]


@pytest.mark.parametrize(("epsilon", "delta"), [(8.0, 1e-4), (5.0, 1e-5), (0.5, 1e-6)])
def test_dpksa_reports_and_charges_the_budget_it_was_calibrated_within(
    epsilon: float, delta: float
) -> None:
    """Not 7.999999996: the requested budget, which the certified bound stays within."""
    mech = DPKSA(ScriptedTextModel(), epsilon=epsilon, delta=delta)
    assert mech.query_cost() == Budget(epsilon, delta)
    assert Budget(epsilon, delta).covers(mech.parameters.achieved)
    assert repr(mech).startswith(f"DPKSA(epsilon={epsilon:g}, delta={delta:g},")


def test_one_response_per_privacy_unit_and_padding_ignored() -> None:
    docs = _docs(["part one", "part two", "other"], units=["u1", "u1", "u2"])
    docs.append(ScoredDocument.padding(0))
    model = ScriptedTextModel()
    KSA(model, n_docs=10).answer(QUESTION, docs)
    assert len(model.calls[0]) == 10  # n_docs prompts, whatever the corpus holds
    assert "part one\npart two" in model.calls[0][0] and "other" in model.calls[0][1]
    assert len(set(model.calls[0][2:])) == 1 and "other" not in model.calls[0][2]


def test_the_model_is_asked_for_n_docs_responses_whatever_the_corpus_holds() -> None:
    """D and D + x (and an empty corpus) send the same number of prompts in one call;
    the empty-context responses are not counted."""
    sent = []
    for texts in ([], ["aspirin"] * 3, ["aspirin"] * 4):
        model = ScriptedTextModel()
        DPKSA(model, epsilon=1.0, n_docs=6).answer(QUESTION, _docs(texts), rng=0)
        sent.append([len(call) for call in model.calls])
    assert sent == [[6, 1]] * 3
    model = ScriptedTextModel()
    hist = KSA(model, n_docs=6)._histogram(QUESTION, _docs(["aspirin"] * 2))
    assert hist.counts == (2,)


def test_ksa_is_non_private_top_gap() -> None:
    texts = ["alpha beta"] * 30 + ["alpha"] * 20 + ["gamma"] * 3
    model = ScriptedTextModel()
    result = KSA(model).answer(QUESTION, _docs(texts))
    assert result.guarantee is None and result.epsilon == float("inf")
    assert result.details == {
        "k_hat": 2,
        "keywords_released": 2,
        "stop_reason": "keywords",
        "answer_source": "documents",
    }
    assert "alpha, beta" in model.calls[1][0]


def test_empty_retrieval_is_zero_shot() -> None:
    model = ScriptedTextModel()
    result = DPKSA(model, epsilon=1.0).answer(QUESTION, [], rng=0)
    assert [len(call) for call in model.calls] == [80, 1]  # n_docs empty contexts, zero-shot
    assert result.details["keywords_released"] == 0
    assert result.details["answer_source"] == "model"


def test_bad_input_spends_nothing() -> None:
    model = ScriptedTextModel()
    with pytest.raises(ValueError, match="epsilon"):
        DPKSA(model, epsilon=-1.0)
    with pytest.raises(ValueError, match="k_max"):
        DPKSA(model, epsilon=1.0, k_min=5, k_max=2)
    with pytest.raises(ValueError, match="n_docs"):
        DPKSA(model, epsilon=1.0, n_docs=0)
    with pytest.raises(ValueError, match="delta"):
        DPKSA(model, epsilon=1.0, delta=0.0)
    with pytest.raises(TypeError, match="TextModel"):
        DPKSA(object(), epsilon=1.0)  # type: ignore[arg-type]
    assert model.calls == []


def test_pipeline_charges_before_retrieval_and_refuses_overspend() -> None:
    texts = ["Gleeblorazine"] * 80
    retrieved: list[int] = []

    def retriever(question: str, k: int) -> list[ScoredDocument]:
        retrieved.append(k)
        return _docs(texts[:k])

    model = ScriptedTextModel()
    mech = DPKSA(model, epsilon=1.0, n_docs=80)
    acc = InMemoryCorpusAccountant(Budget(1.5, 1e-3))
    rag = PrivateRAG(mech, HonoursK(retriever), accountant=acc)
    first = rag.answer(QUESTION, rng=0)
    assert retrieved == [80] and first.guarantee == mech.query_cost()
    with pytest.raises(PrivacyBudgetExhausted):
        rag.answer(QUESTION, rng=1)
    assert retrieved == [80] and len(model.calls) == 2  # refused before any work


def test_tiny_hf_text_model_end_to_end(tiny_text_model: Any) -> None:
    docs = _docs(["Alice Martin was treated with aspirin."] * 4)
    result = DPKSA(
        tiny_text_model, epsilon=2.0, n_docs=4, response_tokens=4, answer_tokens=4
    ).answer("Which treatment did Alice Martin receive?", docs, rng=0)
    assert isinstance(result.text, str)
    assert result.guarantee is not None and result.guarantee.epsilon <= 2.0
    assert result.details["k_hat"] >= 1
