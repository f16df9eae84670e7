"""The public per-record filter of answer-level voting (``record_filter=``).

A voter reads only its records the filter keeps and abstains when it keeps none;
its prompt is still sent. The filter reads the question and one record, so one
added or removed unit still moves at most one vote: checked on random neighbouring
corpora, and by the selection audit through ``PrivateRAG`` (tests/answer_vote_audit.py),
where a mutant whose filter reads the other records too is caught.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from answer_vote_audit import DELTA, EPSILON, KeyRecorder, M, Reader, audit_keys

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import AnswerVote, DPAnswerVote
from dprag_core.algorithms.record_filters import mentions_subject, subject_words
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

QUESTION = "Which drug treats Snurfosis?"


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("What treatment is recommended for Reegraitis?", ("reegraitis",)),
        ("What is Ana Zorb's phone number?", ("ana", "zorb")),
        ("Which country colonised Angola?", ("angola",)),
        ("I have fever and chills. What is my disease?", ()),
        ("Who wrote Hamlet? Was it Marlowe?", ("hamlet", "marlowe")),
        ('"Reegraitis" is treated how?', ()),
        ("which drug treats snurfosis?", ()),
        ("Is Jean-Paul Sartre French?", ("jean-paul", "sartre", "french")),
    ],
)
def test_subject_words(question: str, words: tuple[str, ...]) -> None:
    assert subject_words(question) == words


@pytest.mark.parametrize(
    ("record", "kept"),
    [
        ("Ana has Snurfosis; she takes Zorbex.", True),
        ("SNURFOSIS: Zorbex.", True),
        ("Snurfosis's treatment is Zorbex.", True),
        ("Ana has Troozemia; she takes Pleozone.", False),
        ("Ana has Snurfosisa.", False),
        ("", False),
    ],
)
def test_mentions_subject(record: str, kept: bool) -> None:
    assert mentions_subject(QUESTION, record) is kept


def docs_of(texts: Sequence[str], prefix: str = "r") -> list[ScoredDocument]:
    return [
        ScoredDocument(f"{prefix}{i}", t, 0.9 - i / 1000, unit=f"{prefix}{i}")
        for i, t in enumerate(texts)
    ]


ON, OFF = "Snurfosis: «Aspirin.»", "Troozemia: «The drug is ibuprofen.»"


def test_off_topic_voters_abstain_but_are_prompted() -> None:
    """Without the filter the off-topic majority wins; with it, only on-topic voters vote."""
    docs = docs_of([ON] * 8 + [OFF] * 12)
    plain = AnswerVote(Reader(), m=20, k=1).answer(QUESTION, docs, rng=0)
    assert plain.text == "Ibuprofen"
    model = Reader()
    mech = DPAnswerVote(model, m=20, k=1, epsilon=5.0, delta=1e-4, record_filter=mentions_subject)
    assert mech.keys(QUESTION, docs, rng=0) == ["aspirin"] * 8
    assert model.calls == 20  # every voter's prompt is sent (one call per prompt)
    assert mech.answer(QUESTION, docs, rng=0).text == "Aspirin"


def test_a_voter_reads_only_its_kept_records() -> None:
    """k = 2: a voter holding one on-topic and one off-topic record reads the first only."""
    seen: list[str] = []

    class Recording(Reader):
        def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
            seen.extend(prompts)
            return super().generate(prompts, max_new_tokens=max_new_tokens)

    mech = AnswerVote(Recording(), m=2, k=2, record_filter=mentions_subject)
    mech.keys(QUESTION, docs_of([ON, OFF, OFF, OFF]), rng=0)
    assert len(seen) == 2
    assert sum(ON in p for p in seen) == 1 and not any(OFF in p for p in seen)


@pytest.mark.parametrize("seed", range(20))
def test_one_added_unit_moves_at_most_one_vote(seed: int) -> None:
    """Random corpora of on- and off-topic records, D' = D + one unit at a random rank."""
    gen = np.random.default_rng(seed)
    pool = [ON, OFF, "Snurfosis: «I don't know.»", "Snurfosis: «Heparin.»"]
    texts = [pool[int(i)] for i in gen.integers(0, len(pool), size=M)]
    d = docs_of(texts)
    added = ScoredDocument("new", pool[int(gen.integers(0, len(pool)))], 0.0, unit="new")
    rank = int(gen.integers(0, M + 1))
    d_prime = [*d[:rank], added, *d[rank:]][:M]
    mech = AnswerVote(Reader(), m=M, k=1, record_filter=mentions_subject)
    before, after = Counter(mech.keys(QUESTION, d, rng=0)), Counter(mech.keys(QUESTION, d_prime))
    assert sum((before - after).values()) <= 1 and sum((after - before).values()) <= 1


class WholeCorpusFilter(KeyRecorder):
    """MUTATION: a filter that reads every retrieved record, not one: the voters vote only
    when most of the m records are on topic."""

    def keys(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> list[str]:
        keys = super().keys(question, docs, rng=rng)
        on_topic = sum(mentions_subject(question, d.text) for d in docs[: self.m])
        return keys if on_topic >= self.m / 2 else []


def through_private_rag(cls: type[KeyRecorder]) -> tuple[list[str], list[str]]:
    """The keys that reached the selection for D (9 on-topic, 11 off-topic records) and D'
    (D + one on-topic unit ranked first, which pushes D's last, off-topic, unit out)."""
    seen = []
    for new in (False, True):
        docs = [ScoredDocument(f"r{i}", t, 0.9, unit=f"u{i}") for i, t in enumerate([ON] * 9)]
        docs += [ScoredDocument(f"o{i}", OFF, 0.8, unit=f"o{i}") for i in range(M - 9)]
        if new:
            docs = [ScoredDocument("x", ON, 0.95, unit="x"), *docs]
        mech = cls(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA, record_filter=mentions_subject)
        budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
        app = PrivateRAG(mech, HonoursK(lambda q, k, docs=docs: docs[:k]), accountant=budget)
        app.answer(QUESTION, rng=0)
        assert budget.spent_epsilon == EPSILON  # charged before retrieval
        seen.append(mech.seen[0])
    return seen[0], seen[1]


def test_audit_with_the_filter_within_the_claim() -> None:
    keys_d, keys_d_prime = through_private_rag(KeyRecorder)
    assert (len(keys_d), len(keys_d_prime)) == (9, 10)  # the off-topic voters abstained
    mech = DPAnswerVote(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mech, keys_d, keys_d_prime) <= EPSILON


def test_audit_catches_a_filter_reading_other_records() -> None:
    keys_d, keys_d_prime = through_private_rag(WholeCorpusFilter)
    mech = DPAnswerVote(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mech, keys_d, keys_d_prime) > EPSILON


@pytest.mark.parametrize(
    ("record_filter", "match"),
    [("subject", "record_filter must be callable"), (lambda q, t: "yes", "must return a bool")],
)
def test_a_bad_filter_is_refused_when_built(record_filter: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        DPAnswerVote(Reader(), m=3, k=1, epsilon=5.0, delta=1e-4, record_filter=record_filter)


def test_a_filter_failing_on_one_record_drops_that_record() -> None:
    """After the charge nothing may fail because of the documents: that voter abstains."""

    def picky(question: str, text: str) -> bool:
        if "Forbidden" in text:
            raise RuntimeError(text)
        return True

    mech = AnswerVote(Reader(), m=3, k=1, record_filter=picky)
    docs = docs_of(["«Aspirin.»", "«Forbidden.»", "«Aspirin.»"])
    assert mech.keys(QUESTION, docs, rng=0) == ["aspirin", "aspirin"]


def test_a_filter_reads_a_public_number_of_a_record_s_bytes() -> None:
    """A 1 MB record reaches the filter as its last DEFAULT_PROMPT_BYTES bytes: the
    filter's work does not grow with a record's length."""
    lengths: list[int] = []

    def measuring(question: str, text: str) -> bool:
        lengths.append(len(text.encode("utf-8")))
        return mentions_subject(question, text)

    long = "x" * 1_000_000 + " " + ON
    mech = AnswerVote(Reader(), m=2, k=1, record_filter=measuring)
    lengths.clear()  # the check when built
    assert mech.keys(QUESTION, docs_of([long, ON]), rng=0) == ["aspirin", "aspirin"]
    assert max(lengths) <= DEFAULT_PROMPT_BYTES and min(lengths) == len(ON.encode("utf-8"))
