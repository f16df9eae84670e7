"""Answer metrics on known pairs (rouge-score and rapidfuzz underneath)."""

from __future__ import annotations

import math

import pytest

from dprag_core.eval.metrics import (
    levenshtein_similarity,
    match,
    normalize,
    ratio_interval,
    rouge,
    score_all,
    score_answer,
    token_f1,
)


def test_normalize() -> None:
    assert normalize("  The  Answer: Gleeblorazine!! ") == "the answer gleeblorazine"
    assert normalize("212-555-0101.") == "212-555-0101"


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("Gleeblorazine", "gleeblorazine", 1.0),
        ("It is Gleeblorazine.", "Gleeblorazine", 1.0),
        ("Gleeblorazines", "Gleeblorazine", 0.0),
        ("", "Gleeblorazine", 0.0),
        ("call 212-555-0101 now", "212-555-0101", 1.0),
        ("call 212-555-0102", "212-555-0101", 0.0),
    ],
)
def test_match(pred: str, gold: str, expected: float) -> None:
    assert match(pred, gold) == expected


def test_token_f1_known_values() -> None:
    assert token_f1("a b c", "a b c") == 1.0
    assert token_f1("a b", "c d") == 0.0
    # precision 2/3, recall 2/2 -> F1 0.8
    assert token_f1("a b x", "a b") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0


def test_rouge_known_values() -> None:
    r = rouge("the cat sat", "the cat sat on the mat")
    # ROUGE-1: overlap 3; precision 3/3, recall 3/6 -> F 2/3; LCS = 3 as well
    assert r["rouge1"] == pytest.approx(2 / 3)
    assert r["rougeL"] == pytest.approx(2 / 3)
    assert rouge("b a", "a b")["rougeL"] == pytest.approx(0.5)


def test_levenshtein_known_values() -> None:
    assert levenshtein_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert levenshtein_similarity("Zorbex", "zorbex") == 1.0


def test_score_answer_and_mean() -> None:
    s = score_answer("Zorbex", "zorbex")
    assert s == {"match": 1.0, "f1": 1.0, "rouge1": 1.0, "rougeL": 1.0, "levenshtein": 1.0}
    mean = score_all(["zorbex", "nope"], ["zorbex", "zorbex"])
    assert mean["match"] == 0.5
    assert mean["f1"] == 0.5


def test_score_all_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="same length"):
        score_all(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="golds must not be empty"):
        score_all([], [])


def test_ratio_interval_is_a_ratio_of_sums_with_a_bootstrap_interval() -> None:
    # answers of 10 and 2 tokens, 5 and 2 free: 7/12, not the mean of the shares (0.75)
    value, low, high = ratio_interval([5, 2], [10, 2], rng=0)
    assert value == pytest.approx(7 / 12)
    assert 0.5 <= low <= value <= high <= 1.0 and low < high
    hits = [1.0] * 30 + [0.0] * 10
    value, low, high = ratio_interval(hits, [1.0] * 40, rng=1)
    assert value == 0.75 and 0.55 < low < 0.75 < high < 0.9
    assert all(math.isnan(v) for v in ratio_interval([0, 0], [0, 0]))
    with pytest.raises(ValueError, match="same length"):
        ratio_interval([1, 2], [1])
    with pytest.raises(ValueError, match="resamples"):
        ratio_interval([1], [1], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        ratio_interval([1], [1], confidence=1.0)
