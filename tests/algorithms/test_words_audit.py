"""Statistical audit of one word decision of DPVote and DPSparseVote (``unit="word"``).

The audit method is docs/design.md §9. A word decision is (ε_token, δ_token)-DP
w.r.t. one substituted voter (its word moves from A to B: one count −1, another
+1) — the claim in
dprag_core/algorithms/_words.py and dpvote.py. The audit runs the production
path: :func:`~dprag_core.algorithms._words.word_ballot` numbers the voters'
words, the mechanism's rule decides — vectorised over trials with the
mechanism's own parameters: DPVote's ``vote_select``, DPSparseVote's
``SparseVoteRule`` with ``runs=TRIALS`` (a fresh rule, as at the start of an
answer); :func:`test_choose_is_the_audited_rule` checks that ``_choose`` draws
exactly these — and :meth:`WordBallot.chosen` maps the entry to the released
word (⊥ for a zero-count entry). The output of a trial is the released
word's label (⊥ = −1), and for DPSparseVote whether the decision was private
(``details["private_tokens"]`` shows it).

Worst-case pairs: two words of several tokens each in a near tie, the substituted
voter moving from one to the other (the exponential part of LimitedDomain: both
counts move, in opposite directions); and the threshold edge, where the
substituted voter leaves the common word for a word nobody else proposes (the
numbering of the ballot changes and the new word sits one vote above the
zero-count slots). The mutation counts a word once per token (a voter of an
L-token word moves L votes: sensitivity L): the same audit must exceed the claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from fake_token_model import FakeTokenModel
from toy_mechanisms import WORD_VOTE_ARGS

from dprag_core.algorithms import DPSparseVote, DPVote
from dprag_core.algorithms._words import Word, WordBallot, word_ballot
from dprag_core.audit import AuditResult, audit_epsilon
from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.mechanisms.sparse_vote import SparseVoteRule, vote_select

TRIALS = 200_000
EPS_TOKEN = 2.0
A, C, B, P = (7, 8, 9, 1), (7, 8, 9, 2), (5,), (3,)  # A, C: four tokens; B, P: one

Ballot = Callable[..., WordBallot]


def per_token_ballot(voter_words: Sequence[Word], *, public: Word | None, m: int) -> WordBallot:
    """MUTATION: :func:`word_ballot` counting each voter's word once per token."""
    fair = word_ballot(voter_words, public=public, m=m)
    number = {w: i for i, w in enumerate(fair.words)}
    votes = [number[w] for w in voter_words for _ in w]
    return WordBallot(
        fair.words, SparseCounts.from_votes(votes, size=fair.counts.size), fair.public
    )


class _FreeWordAsSelected(WordBallot):
    """MUTATION: a free public word no voter proposed is released as ⊥, like a selected
    zero-count entry (the free path's output then depends on the votes)."""

    def chosen(self, index: int, *, private: bool) -> Word | None:
        return super().chosen(index, private=True)


def free_as_selected_ballot(
    voter_words: Sequence[Word], *, public: Word | None, m: int
) -> WordBallot:
    """:func:`word_ballot` with :class:`_FreeWordAsSelected`'s release rule."""
    fair = word_ballot(voter_words, public=public, m=m)
    return _FreeWordAsSelected(fair.words, fair.counts, fair.public)


def _labels(words: Sequence[Word | None]) -> dict[Word | None, int]:
    return {w: (-1 if w is None else i) for i, w in enumerate(words)}


def _decide(
    mech: Any, counts: SparseCounts, public: int | None, runs: int, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` independent first decisions of ``mech``: entries (-1 = ⊥) and whether private."""
    if isinstance(mech, DPSparseVote):
        assert public is not None
        rule = SparseVoteRule(
            epsilon_token=mech.epsilon_token,
            delta_token=mech.delta_token,
            threshold=mech.threshold,
            m=mech.m,
            selection=mech.selection,
            runs=runs,
            rng=gen,
        )
        return rule.decide(counts, public=public)
    picks = vote_select(
        counts,
        selection="limited_domain",
        epsilon=mech.epsilon_token,
        delta=mech.delta_token,
        k_bar=mech.m,
        size=runs,
        rng=gen,
    )
    return picks, np.ones(runs, dtype=bool)


def _sample(
    mech: Any,
    ballot_of: Ballot,
    voters: Sequence[Word],
    labels: dict[Word | None, int],
    gen: np.random.Generator,
) -> np.ndarray:
    public = P if mech.uses_public else None
    ballot = ballot_of(voters, public=public, m=mech.m)
    entries, private = _decide(mech, ballot.counts, ballot.public, TRIALS, gen)
    pairs = np.unique(np.stack([entries, private.astype(np.intp)]), axis=1).T
    released = {(int(e), int(p)): labels[ballot.chosen(int(e), private=bool(p))] for e, p in pairs}
    outputs = [released[(int(e), int(p))] for e, p in zip(entries, private, strict=True)]
    return 2 * np.array(outputs) + private


def _audit(mech: Any, ballot_of: Ballot, d: list[Word], d_prime: list[Word]) -> AuditResult:
    labels = _labels([None, *sorted(set(d) | set(d_prime) | {P})])
    gen = np.random.default_rng(31)
    on_d = _sample(mech, ballot_of, d, labels, gen)
    on_d_prime = _sample(mech, ballot_of, d_prime, labels, gen)
    return audit_epsilon(on_d, on_d_prime, delta=mech.delta_token)


def _mech(cls: type[DPVote | DPSparseVote], m: int, delta_token: float, **extra: float) -> Any:
    settings = {
        "epsilon": EPS_TOKEN,
        "epsilon_token": EPS_TOKEN,
        "delta_token": delta_token,
        **extra,
    }
    return cls(
        FakeTokenModel([("", "a")]), **{**WORD_VOTE_ARGS, "m": m, "delta": delta_token, **settings}
    )


# DPVote, near tie: 27 voters, A 14 / C 13 against A 13 / C 14 (b = 2/ε = 1; h⊥ = 9.6 sits
# below both counts, so ⊥ is not what decides).
VOTE_TIE = ([A] * 14 + [C] * 13, [A] * 13 + [C] * 14)
# DPVote, threshold edge: 13 voters agree on A, or one leaves it for B, which nobody else proposes.
VOTE_EDGE = ([A] * 13, [A] * 12 + [B])
# DPSparseVote: the public word P has one vote (far below the threshold m/2: the rule spends),
# and the selection (ε_token/2, b = 2) meets A and C in a near tie.
SPARSE_TIE = ([P] + [A] * 13 + [C] * 13, [P] + [A] * 12 + [C] * 14)
# DPSparseVote, the SVT edge: the public word's count on either side of the threshold 13.5.
SPARSE_EDGE = ([P] * 14 + [A] * 13, [P] * 13 + [A] * 14)


@pytest.mark.parametrize(
    ("pair", "m", "delta_token"),
    [(VOTE_TIE, 27, 1e-3), (VOTE_EDGE, 13, 1e-4)],
    ids=["near-tie", "threshold-edge"],
)
def test_dpvote_word_decision_within_claim(
    pair: tuple[list[Word], list[Word]], m: int, delta_token: float
) -> None:
    result = _audit(_mech(DPVote, m, delta_token), word_ballot, *pair)
    assert 0.3 < result.epsilon_lower_bound <= EPS_TOKEN, result


def test_dpvote_mutation_counting_tokens_exceeds_claim() -> None:
    result = _audit(_mech(DPVote, 27, 1e-3), per_token_ballot, *VOTE_TIE)
    assert result.epsilon_lower_bound > EPS_TOKEN, result


@pytest.mark.parametrize("pair", [SPARSE_TIE, SPARSE_EDGE], ids=["near-tie", "svt-edge"])
def test_sparse_vote_word_decision_within_claim(pair: tuple[list[Word], list[Word]]) -> None:
    result = _audit(_mech(DPSparseVote, 27, 0.05), word_ballot, *pair)
    assert 0.2 < result.epsilon_lower_bound <= EPS_TOKEN, result


def test_sparse_vote_mutation_counting_tokens_exceeds_claim() -> None:
    result = _audit(_mech(DPSparseVote, 27, 0.05), per_token_ballot, *SPARSE_TIE)
    assert result.epsilon_lower_bound > EPS_TOKEN, result


# DPSparseVote, the free path: the public word P has one vote or none (that voter moves to
# B) and a low threshold lets it through for free: it must be released as P either way.
SPARSE_FREE = ([P] + [A] * 26, [B] + [A] * 26)


def test_sparse_vote_free_word_without_a_vote_is_still_released() -> None:
    result = _audit(_mech(DPSparseVote, 27, 1e-4, threshold=1.0), word_ballot, *SPARSE_FREE)
    assert result.epsilon_lower_bound <= EPS_TOKEN, result


def test_sparse_vote_mutation_free_word_as_bottom_exceeds_claim() -> None:
    mech = _mech(DPSparseVote, 27, 1e-4, threshold=1.0)
    result = _audit(mech, free_as_selected_ballot, *SPARSE_FREE)
    assert result.epsilon_lower_bound > EPS_TOKEN, result


@pytest.mark.parametrize(
    ("mech", "voters"),
    [(_mech(DPVote, 27, 1e-3), VOTE_TIE[0]), (_mech(DPSparseVote, 27, 0.05), SPARSE_EDGE[0])],
    ids=["DPVote", "DPSparseVote"],
)
def test_choose_is_the_audited_rule(mech: Any, voters: list[Word]) -> None:
    """The mechanism's ``_choose`` makes the decision the audit samples, draw for draw."""
    ballot = word_ballot(voters, public=P if mech.uses_public else None, m=mech.m)
    seen = set()
    for seed in range(60):
        gen = np.random.default_rng(seed)
        choice = mech._choose(ballot.counts, ballot.public, mech._start(gen), gen)
        entries, private = _decide(
            mech, ballot.counts, ballot.public, 1, np.random.default_rng(seed)
        )
        assert choice.token == (None if entries[0] == -1 else entries[0])
        assert choice.private == private[0]
        seen.add((choice.token, choice.private))
    assert len(seen) >= 2  # more than one outcome was compared
