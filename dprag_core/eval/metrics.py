"""Answer-quality metrics: match accuracy, token F1, ROUGE-1/L, normalised Levenshtein.

Match accuracy (Koga, MuRAG): the normalised gold answer occurs in the
normalised prediction. Token F1 (SQuAD style) over normalised tokens.
ROUGE-1/L F-measures come from ``rouge-score`` and the normalised Levenshtein
similarity from ``rapidfuzz`` (both imported lazily: ``pip install dprag[eval]``).
Normalisation: lower case, punctuation except ``-`` removed, whitespace collapsed.

>>> match("The answer is Gleeblorazine.", "gleeblorazine")
1.0
>>> round(token_f1("zorbex tablets daily", "zorbex tablets"), 3)
0.8
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_int

__all__ = [
    "METRIC_NAMES",
    "levenshtein_similarity",
    "match",
    "normalize",
    "ratio_interval",
    "rouge",
    "score_all",
    "score_answer",
    "token_f1",
]

METRIC_NAMES = ("match", "f1", "rouge1", "rougeL", "levenshtein")
_PUNCT = re.compile(r"[^\w\s-]")
_SCORER: Any = None


def normalize(text: str) -> str:
    """Lower-case, drop punctuation (keeping ``-``), collapse whitespace.

    >>> normalize("  Zorbex,  TABLETS! ")
    'zorbex tablets'
    """
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def match(prediction: str, gold: str) -> float:
    """1.0 if the normalised gold answer appears in the normalised prediction, else 0.0."""
    g = normalize(gold)
    return float(bool(g) and f" {g} " in f" {normalize(prediction)} ")


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 between normalised prediction and gold (SQuAD style).

    >>> token_f1("a b", "c")
    0.0
    """
    p, g = normalize(prediction).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def rouge(prediction: str, gold: str) -> dict[str, float]:
    """ROUGE-1 and ROUGE-L F-measures (``rouge-score``, no stemming).

    >>> rouge("zorbex tablets", "zorbex tablets")["rougeL"]
    1.0
    """
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False)
    scores = _SCORER.score(normalize(gold), normalize(prediction))
    return {"rouge1": float(scores["rouge1"].fmeasure), "rougeL": float(scores["rougeL"].fmeasure)}


def levenshtein_similarity(prediction: str, gold: str) -> float:
    """1 - normalised Levenshtein distance of the normalised strings (``rapidfuzz``).

    >>> levenshtein_similarity("abcd", "abce")
    0.75
    """
    from rapidfuzz.distance import Levenshtein

    return float(Levenshtein.normalized_similarity(normalize(prediction), normalize(gold)))


def score_answer(prediction: str, gold: str) -> dict[str, float]:
    """Every metric of :data:`METRIC_NAMES` for one prediction.

    >>> score_answer("Zorbex", "zorbex")["match"]
    1.0
    """
    return {
        "match": match(prediction, gold),
        "f1": token_f1(prediction, gold),
        **rouge(prediction, gold),
        "levenshtein": levenshtein_similarity(prediction, gold),
    }


def score_all(predictions: Sequence[str], golds: Sequence[str]) -> Mapping[str, float]:
    """Mean of every metric over aligned predictions and golds.

    >>> score_all(["a", "b"], ["a", "c"])["match"]
    0.5
    """
    if len(predictions) != len(golds):
        raise ValueError(
            f"predictions and golds must have the same length, got {len(predictions)} "
            f"and {len(golds)}"
        )
    if not golds:
        raise ValueError("golds must not be empty")
    totals = dict.fromkeys(METRIC_NAMES, 0.0)
    for p, g in zip(predictions, golds, strict=True):
        for name, value in score_answer(p, g).items():
            totals[name] += value
    return {name: value / len(golds) for name, value in totals.items()}


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    rng: RngLike = None,
) -> tuple[float, float, float]:
    """Σ numerators / Σ denominators over questions, with a percentile bootstrap interval.

    The questions (aligned pairs) are resampled with replacement. A mean of
    per-question values is the case ``denominators = [1] * n`` (e.g. accuracy);
    a share of tokens over answers of different lengths is a ratio of sums.
    Returns ``(value, low, high)``; NaN throughout when every denominator is 0.

    >>> ratio_interval([1, 0, 1, 1], [1, 1, 1, 1], rng=0)[0]
    0.75
    >>> ratio_interval([2, 2], [4, 4], rng=0)
    (0.5, 0.5, 0.5)
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    count = positive_int("resamples", resamples)
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1 or num.size == 0:
        raise ValueError(
            "numerators and denominators must be non-empty 1-D sequences of the same length, "
            f"got shapes {num.shape} and {den.shape}"
        )
    if den.sum() == 0:
        return math.nan, math.nan, math.nan
    idx = make_rng(rng).integers(0, num.size, size=(count, num.size))
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.nanpercentile(stats, [tail, 100 - tail])
    return float(num.sum() / den.sum()), float(low), float(high)
