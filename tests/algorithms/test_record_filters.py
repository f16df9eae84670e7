"""The public per-record filter of answer-level voting (``record_filter=``, ``filter_depth=``).

The mechanism reads the top ``filter_depth``·m·k candidates, keeps the first m·k
that the filter keeps (each judged alone) and partitions those; a voter with none
abstains, its prompt still sent. One added or removed unit still moves at most
one vote: checked on random neighbouring corpora (the kept lists differ by one
substitution, x pushing a kept record out of the pool included), and by the
selection audit through ``PrivateRAG`` (tests/answer_vote_audit.py), where a
mutant whose filter reads the other records too, and one whose pool depth depends
on how many records the top m·k keep, are caught.
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
from dprag_core.algorithms.answer_vote import DEFAULT_FILTER_DEPTH
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


def neighbours(
    gen: np.random.Generator, size: int, pool: Sequence[str]
) -> tuple[list[ScoredDocument], list[ScoredDocument], ScoredDocument]:
    """A ranking D of ``size`` random records and D' = D + x at a random rank."""
    d = docs_of([pool[int(i)] for i in gen.integers(0, len(pool), size=size)])
    x = ScoredDocument("x", pool[int(gen.integers(0, len(pool)))], 0.0, unit="x")
    rank = int(gen.integers(0, size + 1))
    return d, [*d[:rank], x, *d[rank:]], x


TOPICS = [ON, OFF, "Snurfosis: «I don't know.»", "Snurfosis: «Heparin.»"]


@pytest.mark.parametrize("seed", range(30))
def test_the_kept_records_of_neighbours_differ_by_one_substitution(seed: int) -> None:
    """Depth 1-5, k 1-3, stores shorter and longer than the pool: the first m·k kept
    records of the top depth·m·k lose at most one unit and gain at most x."""
    gen = np.random.default_rng(seed)
    m, k, depth = int(gen.integers(2, 6)), int(gen.integers(1, 4)), int(gen.integers(1, 6))
    size = int(gen.integers(1, 2 * depth * m * k + 2))
    d, d_prime, x = neighbours(gen, size, TOPICS)
    mech = AnswerVote(Reader(), m=m, k=k, record_filter=mentions_subject, filter_depth=depth)
    n = mech.candidates_needed()
    assert n == depth * m * k
    before = {doc.unit for doc in mech.kept(QUESTION, d[:n])}  # what the pipeline hands over
    after = {doc.unit for doc in mech.kept(QUESTION, d_prime[:n])}
    assert len(before) <= m * k and len(after) <= m * k
    assert after - before <= {x.unit} and len(before - after) <= 1


@pytest.mark.parametrize("seed", range(20))
def test_one_added_unit_moves_at_most_one_vote_from_a_deeper_pool(seed: int) -> None:
    """k = 1, depth 3: the voters' keys of D and D' = D + x differ by at most one vote."""
    gen = np.random.default_rng(seed)
    depth = 3
    d, d_prime, _ = neighbours(gen, int(gen.integers(M, depth * M + 5)), TOPICS)
    mech = AnswerVote(Reader(), m=M, k=1, record_filter=mentions_subject, filter_depth=depth)
    n = mech.candidates_needed()
    before = Counter(mech.keys(QUESTION, d[:n], rng=0))
    after = Counter(mech.keys(QUESTION, d_prime[:n], rng=1))
    assert sum((before - after).values()) <= 1 and sum((after - before).values()) <= 1


def test_x_pushing_a_kept_record_out_of_the_pool_moves_one_vote() -> None:
    """The pool (depth 2, m = 4: 8 records) ends with a kept heparin record; an
    off-topic x ranked first pushes it out: that voter abstains, the others keep theirs."""
    d = docs_of([ON, OFF, OFF, ON, OFF, OFF, OFF, "Snurfosis: «Heparin.»", ON])
    x = ScoredDocument("x", OFF, 0.95, unit="x")
    mech = AnswerVote(Reader(), m=4, k=1, record_filter=mentions_subject, filter_depth=2)
    n = mech.candidates_needed()
    assert [doc.id for doc in mech.kept(QUESTION, d[:n])] == ["r0", "r3", "r7"]
    assert [doc.id for doc in mech.kept(QUESTION, [x, *d][:n])] == ["r0", "r3"]
    assert sorted(mech.keys(QUESTION, d[:n], rng=0)) == ["aspirin", "aspirin", "heparin"]
    assert sorted(mech.keys(QUESTION, [x, *d][:n], rng=0)) == ["aspirin", "aspirin"]


def test_a_deeper_pool_reaches_records_below_the_top_m() -> None:
    """12 off-topic records rank above the fact's 8: depth 1 finds none of them, depth 4
    all 8 (and the 12 off-topic voters' records never reach a voter)."""
    docs = docs_of([OFF] * 12 + [ON] * 8)
    shallow = AnswerVote(Reader(), m=4, k=1, record_filter=mentions_subject, filter_depth=1)
    deep = AnswerVote(Reader(), m=4, k=1, record_filter=mentions_subject, filter_depth=4)
    assert shallow.keys(QUESTION, docs[: shallow.candidates_needed()], rng=0) == []
    assert deep.keys(QUESTION, docs[: deep.candidates_needed()], rng=0) == ["aspirin"] * 4


def test_every_pool_record_is_judged_and_m_prompts_are_sent() -> None:
    """The filter judges the whole pool whatever it keeps (no early stop), and the model
    gets m prompts whether 0, some or more than m·k records are kept."""
    judged: list[str] = []

    def counting(question: str, text: str) -> bool:
        judged.append(text)
        return mentions_subject(question, text)

    prompts: list[str] = []

    class Prompts(Reader):
        def generate(self, batch: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
            prompts.extend(batch)
            return super().generate(batch, max_new_tokens=max_new_tokens)

    mech = AnswerVote(Prompts(), m=5, k=1, record_filter=counting, filter_depth=3)
    for texts, votes in (([OFF] * 30, 0), ([ON] * 30, 5), ([OFF, ON] * 15, 5), ([ON] * 2, 2)):
        judged.clear()
        prompts.clear()
        keys = mech.keys(QUESTION, docs_of(texts)[: mech.candidates_needed()], rng=0)
        assert len(judged) == min(len(texts), 15) and len(prompts) == 5 and len(keys) == votes


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
    (D + one on-topic unit ranked first, which pushes D's last, off-topic, unit out of
    the pool: depth 1, the top m)."""
    docs = [ScoredDocument(f"r{i}", t, 0.9, unit=f"u{i}") for i, t in enumerate([ON] * 9)]
    docs += [ScoredDocument(f"o{i}", OFF, 0.8, unit=f"o{i}") for i in range(M - 9)]
    return keys_through_private_rag(cls, docs, ScoredDocument("x", ON, 0.95, unit="x"), depth=1)


def keys_through_private_rag(
    cls: type[KeyRecorder], docs: list[ScoredDocument], x: ScoredDocument, *, depth: int
) -> tuple[list[str], list[str]]:
    """The keys that reached the selection through ``PrivateRAG`` for ``docs`` and for
    ``x`` ranked first in front of them (each app charged before it retrieves)."""
    seen = []
    for pool in (docs, [x, *docs]):
        mech = cls(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA,
                   record_filter=mentions_subject, filter_depth=depth)  # fmt: skip
        budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
        app = PrivateRAG(mech, HonoursK(lambda q, k, docs=pool: docs[:k]), accountant=budget)
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


HEPARIN = "Snurfosis: «Heparin.»"


class AdaptiveDepth(KeyRecorder):
    """MUTATION: the pool's depth depends on the other records: the filter reads deeper
    only when fewer than half of the top m·k are kept (an "only when needed" shortcut)."""

    def kept(self, question: str, docs: Sequence[ScoredDocument]) -> list[ScoredDocument]:
        top = docs[: self.m * self.k]
        if 2 * sum(self._keeps(question, d) for d in top) >= len(top):
            return [d for d in top if self._keeps(question, d)]
        return super().kept(question, docs)


def deep_pair_through_private_rag(cls: type[KeyRecorder]) -> tuple[list[str], list[str]]:
    """The keys that reached the selection, depth 2 (a pool of 40) through ``PrivateRAG``.

    D: ranks 0-19 hold 10 aspirin records (rank 19 one of them) among off-topic ones,
    ranks 20-38 nine more, rank 39 (the pool's last) a heparin record, ranks 40-44
    aspirin records below the pool. D' = D + an off-topic x ranked first: it pushes the
    heparin record out of the pool (one vote moves) and rank 19 out of the top 20.
    """
    texts = [ON, OFF] * 9 + [OFF, ON] + [ON, OFF] * 9 + [OFF, HEPARIN] + [ON] * 5
    x = ScoredDocument("x", OFF, 0.95, unit="x")
    return keys_through_private_rag(cls, docs_of(texts), x, depth=2)


def test_audit_with_a_deeper_pool_within_the_claim() -> None:
    keys_d, keys_d_prime = deep_pair_through_private_rag(KeyRecorder)
    assert sorted(keys_d) == ["aspirin"] * 19 + ["heparin"]  # the first 20 kept of 40
    assert keys_d_prime == ["aspirin"] * 19  # x pushed the heparin record out of the pool
    mech = DPAnswerVote(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mech, keys_d, keys_d_prime) <= EPSILON


def test_audit_catches_a_pool_depth_that_depends_on_the_records() -> None:
    keys_d, keys_d_prime = deep_pair_through_private_rag(AdaptiveDepth)
    assert (len(keys_d), len(keys_d_prime)) == (10, 19)  # one record moved nine votes
    mech = DPAnswerVote(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mech, keys_d, keys_d_prime) > EPSILON


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"filter_depth": 0}, ValueError, r"filter_depth must be an integer >= 1, got 0"),
        ({"filter_depth": -2}, ValueError, r"filter_depth must be an integer >= 1, got -2"),
        ({"filter_depth": 2.0}, TypeError, r"filter_depth must be an integer >= 1, got float"),
        ({"filter_depth": True}, TypeError, r"filter_depth must be an integer >= 1, got bool"),
        ({"filter_depth": "4"}, TypeError, r"filter_depth must be an integer >= 1, got str"),
        (
            {"filter_depth": 2, "record_filter": None},
            ValueError,
            r"filter_depth must be None without a record_filter .*got 2",
        ),
    ],
)
def test_a_bad_filter_depth_is_refused_when_built_spending_nothing(
    changes: dict[str, Any], error: type[Exception], match: str
) -> None:
    budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    for cls in (DPAnswerVote, AnswerVote):
        dp = {"epsilon": 5.0, "delta": 1e-4} if cls is DPAnswerVote else {}
        arguments = {"record_filter": mentions_subject, **dp, **changes}
        with pytest.raises(error, match=match):
            app = PrivateRAG(cls(Reader(), m=3, k=1, **arguments), HonoursK(lambda q, k: []),
                             accountant=budget)  # fmt: skip
            app.answer(QUESTION, rng=0)
    assert budget.spent_epsilon == 0.0 and budget.queries == 0


def test_the_default_depth() -> None:
    """With a filter and no depth: DEFAULT_FILTER_DEPTH; without a filter: m·k."""
    filtered = DPAnswerVote(Reader(), m=40, k=1, epsilon=5.0, delta=1e-4,
                            record_filter=mentions_subject)  # fmt: skip
    assert filtered.filter_depth == DEFAULT_FILTER_DEPTH
    assert filtered.candidates_needed() == DEFAULT_FILTER_DEPTH * 40
    plain = DPAnswerVote(Reader(), m=40, k=2, epsilon=5.0, delta=1e-4)
    assert (plain.filter_depth, plain.candidates_needed()) == (1, 80)


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
