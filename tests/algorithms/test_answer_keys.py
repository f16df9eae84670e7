"""The answer-key rules that make keys mean answers, one exact test each.

An echo of the question's subject abstains (except in a choice question);
inflections of one word share a key; a completion cut by the token limit loses its
cut word; a key of only generic words abstains. A voter whose key abstains votes
for nothing, so a world where most voters echo the question releases nothing
rather than the echo.
"""

from __future__ import annotations

import pytest

from dprag_core.algorithms import DPAnswerVote
from dprag_core.algorithms.answer_keys import ABSTAIN, GENERIC_WORDS, answer_key, base_form
from dprag_core.models.cut import CutText
from dprag_core.retrieval.documents import ScoredDocument

COLONY = "Which country colonised Angola?"


@pytest.mark.parametrize(
    ("answer", "question", "key"),
    [
        ("Angola.", COLONY, ABSTAIN),
        ("Angola", COLONY, ABSTAIN),
        ("The country is Angola.", COLONY, ABSTAIN),
        ("Angola was colonised by Portugal.", COLONY, "portugal"),
        ("Portugal.", COLONY, "portugal"),
        ("Venus.", "Is Mars or Venus larger?", "venus"),
        ("Mars is larger.", "Is Mars or Venus larger?", "mars"),
    ],
)
def test_an_echo_of_the_subject_abstains_unless_the_question_offers_a_choice(
    answer: str, question: str, key: str | None
) -> None:
    assert answer_key(answer, question) == key


@pytest.mark.parametrize(
    "forms",
    [
        ("achieve", "achieves", "achieved", "achieving"),
        ("treat", "treats", "treated", "treating"),
        ("stop", "stops", "stopped", "stopping"),
        ("study", "studies", "studied", "studying"),
        ("manage", "manages", "managed", "managing"),
        ("agree", "agrees", "agreed", "agreeing"),
        ("box", "boxes"),
        ("church", "churches"),
        ("glass", "glasses"),
    ],
)
def test_inflections_of_one_word_share_a_key(forms: tuple[str, ...]) -> None:
    assert {base_form(f) for f in forms} == {forms[0]}
    keys = {answer_key(f"They {f} it.", "What did the team do?") for f in forms}
    assert len(keys) == 1 and None not in keys, keys


@pytest.mark.parametrize("word", ["paris", "mars", "virus", "metformin", "555-0101", "co-op"])
def test_base_form_leaves_names_and_short_or_marked_words(word: str) -> None:
    assert base_form(word) == word


@pytest.mark.parametrize(
    ("answer", "key"),
    [
        (CutText("Combination Combination Qu"), ABSTAIN),  # cut word dropped: generic left
        (CutText("Metformin and quin"), "metformin"),
        (CutText("Metformin and "), "metformin"),  # the limit fell between words
        (CutText("Metformin. Then quin"), "metformin"),  # the first sentence was whole
        (CutText("co-amox"), ABSTAIN),  # the only word was cut
        ("Metformin and quin", "metformin quin"),  # not cut: every word counts
    ],
)
def test_a_key_never_ends_in_a_word_the_token_limit_cut(answer: str, key: str | None) -> None:
    assert answer_key(answer, "Which drug?") == key


@pytest.mark.parametrize(
    "answer",
    [
        "Combination.",
        "Combination combination.",
        "The information.",
        "Various options.",
        "The patient records.",
        "Something.",
    ],
)
def test_a_key_of_generic_words_abstains(answer: str) -> None:
    assert answer_key(answer, "Which drug?") is ABSTAIN


def test_the_generic_list_is_fixed_and_matches_any_form() -> None:
    assert isinstance(GENERIC_WORDS, frozenset) and "combination" in GENERIC_WORDS
    assert answer_key("Combinations.", "Which drug?") is ABSTAIN
    assert answer_key("Combination therapy.", "Which drug?") == "combination therapy"


def test_echoing_voters_release_nothing_instead_of_the_echo() -> None:
    class Echo:  # 18 voters echo the subject, 2 answer
        def generate(self, prompts: list[str], *, max_new_tokens: int = 64) -> list[str]:
            return [p.split("Context:\n")[1].split("\n")[0] for p in prompts]

    texts = ["Angola."] * 18 + ["Portugal."] * 2
    docs = [ScoredDocument(f"d{i}", t, 0.9 - i / 100, unit=f"u{i}") for i, t in enumerate(texts)]
    mech = DPAnswerVote(Echo(), m=20, k=1, epsilon=5.0, delta=1e-4)
    assert sorted(mech.keys(COLONY, docs, rng=0)) == ["portugal", "portugal"]
    assert mech.answer(COLONY, docs, rng=0).text == ""
