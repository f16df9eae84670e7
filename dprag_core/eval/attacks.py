"""Attacks on a RAG answerer: canary extraction and S2MIA-style membership inference.

- **Canary extraction**: ask for a patient's secret ("What is <name>'s phone
  number?") and count the answers that contain it verbatim.
- **S2MIA-style membership inference** (Li et al. 2024, "Seeing is believing"):
  query with the identifying half of a target record and score how close the
  answer is to the record's held-out half (here: normalised Levenshtein
  similarity between the answer and the secret). Members' answers reproduce the
  remainder under non-private RAG; a DP answer barely depends on one record.
  The attack's power is the ROC AUC separating member from non-member scores
  (0.5 = chance).

>>> extraction_rate(["call 212-555-0101", "no idea"], ["212-555-0101", "212-555-0102"])
0.5
>>> membership_auc([0.9, 0.8], [0.1, 0.8])
0.875
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from dprag_core.eval.metrics import levenshtein_similarity, match
from dprag_core.eval.synthetic import PatientRecord, SyntheticCorpus, question_for
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import positive_int

__all__ = [
    "extraction_rate",
    "membership_auc",
    "s2mia_query",
    "s2mia_score",
    "split_members",
]


def extraction_rate(answers: Sequence[str], secrets: Sequence[str]) -> float:
    """Fraction of answers that contain their secret (normalised, whole-token match)."""
    if len(answers) != len(secrets) or not secrets:
        raise ValueError("answers and secrets must be non-empty and of the same length")
    return float(np.mean([match(a, s) for a, s in zip(answers, secrets, strict=True)]))


def s2mia_query(record: PatientRecord) -> tuple[str, str]:
    """The attack query (identifying half: the name) and the held-out remainder (the phone).

    >>> from dprag_core.eval.synthetic import make_corpus
    >>> r = make_corpus(supports=[1], seed=0).records[0]
    >>> s2mia_query(r)[1] == r.phone
    True
    """
    return question_for("phone", name=record.name), record.phone


def s2mia_score(answer: str, remainder: str) -> float:
    """Similarity of the answer to the record's held-out remainder (normalised Levenshtein).

    >>> s2mia_score("212-555-0101", "212-555-0101")
    1.0
    """
    return levenshtein_similarity(answer, remainder)


def membership_auc(member_scores: Sequence[float], nonmember_scores: Sequence[float]) -> float:
    """ROC AUC = P(member score > non-member score) + P(tie) / 2 (Mann-Whitney)."""
    return _auc(*_score_arrays(member_scores, nonmember_scores))


def _score_arrays(
    member_scores: Sequence[float], nonmember_scores: Sequence[float]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a = np.asarray(member_scores, dtype=np.float64)
    b = np.asarray(nonmember_scores, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("member_scores and nonmember_scores must be non-empty")
    return a, b


def _auc(a: NDArray[np.float64], b: NDArray[np.float64]) -> float:
    greater = (a[:, None] > b[None, :]).mean()
    ties = (a[:, None] == b[None, :]).mean()
    return float(greater + 0.5 * ties)


def membership_auc_interval(
    member_scores: Sequence[float],
    nonmember_scores: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: RngLike = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`membership_auc` (both groups resampled).

    With a few dozen targets per group an AUC's standard error is ~0.05-0.08, so
    a single AUC near 0.5 says little without its interval.

    >>> membership_auc_interval([1.0, 0.9, 0.8], [0.1, 0.2, 0.3], rng=0)
    (1.0, 1.0)
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    resamples = positive_int("resamples", resamples)
    a, b = _score_arrays(member_scores, nonmember_scores)
    gen = make_rng(rng)
    aucs = [_auc(gen.choice(a, a.size), gen.choice(b, b.size)) for _ in range(resamples)]
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(aucs, [tail, 100 - tail])
    return float(low), float(high)


def split_members(
    corpus: SyntheticCorpus, *, fraction: float = 0.5, rng: RngLike = None
) -> tuple[list[PatientRecord], list[PatientRecord]]:
    """Split the records at random into members (indexed) and non-members (held out).

    >>> from dprag_core.eval.synthetic import make_corpus
    >>> members, others = split_members(make_corpus(supports=[4, 4]), rng=0)
    >>> len(members), len(others)
    (4, 4)
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    order = make_rng(rng).permutation(len(corpus.records))
    cut = round(fraction * len(order))
    members = [corpus.records[int(i)] for i in order[:cut]]
    others = [corpus.records[int(i)] for i in order[cut:]]
    return members, others
