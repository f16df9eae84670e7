"""Word-level voting (``unit="word"``): the word rule, the ballot, the exact word decision,
end-to-end transcripts on a scripted model with lookahead, and bad input.

The statistical audits of the word decision are in test_words_audit.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from fake_token_model import EOS, FakeTokenModel
from scipy.stats import chisquare
from toy_mechanisms import WORD_VOTE_ARGS, word_dpvote

from dprag_core import Budget, DPAnswer, PrivateRAG, ScoredDocument
from dprag_core.accounting import InMemoryCorpusAccountant
from dprag_core.algorithms import DPSparseVote, VoteRAG
from dprag_core.algorithms._words import WordSplitter, word_ballot
from dprag_core.models.checks import check_lookahead_model
from dprag_core.retrieval.capabilities import HonoursK
from tests.algorithms.test_dpvote import _docs

# ---------------------------------------------------------------- the word rule


def _bytes(text: str) -> list[int]:
    return list(text.encode())


@pytest.fixture(scope="module")
def byte_split() -> WordSplitter:
    return WordSplitter(FakeTokenModel([]), max_tokens=8)


def test_word_ends_before_the_next_whitespace_led_token(byte_split: WordSplitter) -> None:
    assert byte_split.word(_bytes(" Kir is")) == tuple(_bytes(" Kir"))
    assert byte_split.word(_bytes("Kir\nis")) == tuple(_bytes("Kir"))
    assert byte_split.word(_bytes("ok, then")) == tuple(_bytes("ok,"))  # punctuation stays
    assert byte_split.word([*_bytes("ab"), EOS, *_bytes("cd")]) == tuple(_bytes("ab"))
    assert byte_split.word(_bytes("  x")) == (32,)  # a leading space is the word's first token


def test_end_token_first_is_the_end_word(byte_split: WordSplitter) -> None:
    assert byte_split.word([EOS, *_bytes("abc")]) == (EOS,)


def test_word_is_cut_at_max_tokens() -> None:
    split = WordSplitter(FakeTokenModel([]), max_tokens=3)
    assert split.word(_bytes("Kirzyafil is")) == tuple(_bytes("Kir"))
    assert split.word(_bytes("ab")) == tuple(_bytes("ab"))  # a shorter continuation is whole


def test_complete_is_the_lookahead_stop_rule(byte_split: WordSplitter) -> None:
    done = np.array([_bytes("ab c"), [EOS, 97, 98, 99]])
    assert byte_split.complete(done)
    assert not byte_split.complete(np.array([_bytes("ab c"), _bytes("abcd")]))
    assert not byte_split.complete(np.array([_bytes("a")]))  # one token: the word may go on


@pytest.fixture(scope="module")
def reader() -> Any:
    from dprag_core.eval.workbench import load_models

    return load_models(None)[0]


def test_word_rule_on_the_shipped_reader_tokenizer(reader: Any) -> None:
    split = WordSplitter(reader, max_tokens=8)
    ids = reader.encode(" Kirzyafil is the drug.")
    pieces = [reader.decode([i]) for i in ids]
    kir = pieces.index(" is")
    assert kir > 1  # the entity is several BPE pieces: one word, one decision
    word = split.word(ids)
    assert word == tuple(ids[:kir]) and reader.decode(list(word)) == " Kirzyafil"
    drug = ids[pieces.index(" the") + 1 :]
    assert reader.decode(list(split.word(drug))) == " drug."
    (eos,) = reader.eos_token_ids
    assert split.word([eos, *ids]) == (eos,)
    assert split.word([*ids[:2], eos]) == tuple(ids[:2])
    assert WordSplitter(reader, max_tokens=2).word(ids) == tuple(ids[:2])


# ---------------------------------------------------------------- the ballot


def test_ballot_numbers_words_in_sorted_tuple_order() -> None:
    voters = [(9,), (3, 4), (3,), (3, 4), (12, 1)]
    ballot = word_ballot(voters, public=None, m=5)
    assert ballot.words == [(3,), (3, 4), (9,), (12, 1)]
    assert ballot.counts.dense().tolist() == [1, 2, 1, 1] + [0] * 5  # m zero-count slots
    assert ballot.public is None
    # the numbering depends only on the set of words, not on the voters' order
    again = word_ballot(list(reversed(voters)), public=None, m=5)
    assert again.words == ballot.words
    assert again.counts.dense().tolist() == ballot.counts.dense().tolist()


def test_public_word_without_a_voter_is_bottom_only_when_selected() -> None:
    ballot = word_ballot([(5,), (5,)], public=(2, 7), m=2)
    assert ballot.words == [(2, 7), (5,)] and ballot.public == 0
    assert ballot.counts.dense().tolist() == [0, 2, 0, 0]
    assert ballot.chosen(1, private=True) == (5,)
    assert ballot.chosen(0, private=True) is None  # the selection never releases a 0-count word
    assert ballot.chosen(0, private=False) == (2, 7)  # the free path releases the public word
    for slot in (2, 3):
        assert ballot.chosen(slot, private=True) is None  # the slots
    for outside in (4, -1):
        assert ballot.chosen(outside, private=True) is None  # out of range
        assert ballot.chosen(outside, private=False) is None


def test_public_word_a_voter_proposes_counts_its_votes() -> None:
    ballot = word_ballot([(5,), (2, 7)], public=(2, 7), m=2)
    assert ballot.public == 0 and ballot.counts.count(0) == 1
    assert ballot.chosen(0, private=True) == ballot.chosen(0, private=False) == (2, 7)


# ---------------------------------------------------------------- the exact word decision


def word_decision_probabilities(
    voter_words: list[tuple[int, ...]], *, epsilon: float, delta: float, m: int
) -> dict[tuple[int, ...] | None, float]:
    """Closed form of DPVote's word decision (LimitedDomain, k̄ = m, Δ0 = 2, non-monotone).

    With at most m voters every proposed word is among the top k̄ and h[k̄+1] = 0, so
    the decision is a Gumbel-max (softmax with scale b = 2/ε) over the proposed
    words' counts, the m − (#words) zero-count slots (score 0, released as ⊥) and
    h⊥ = 0 + 2 + b·ln(min(2, m)/δ) (⊥).
    """
    b = 2.0 / epsilon
    counts = {w: voter_words.count(w) for w in set(voter_words)}
    weights: dict[tuple[int, ...] | None, float] = {w: math.exp(c / b) for w, c in counts.items()}
    h_bottom = 2.0 + b * math.log(min(2, m) / delta)
    weights[None] = (m - len(counts)) + math.exp(h_bottom / b)
    total = sum(weights.values())
    return {w: v / total for w, v in weights.items()}


def test_dpvote_word_decision_matches_the_closed_form() -> None:
    voters = [(7, 8, 9), (7, 8, 9), (3,), (4, 4)]  # three words of 3, 1 and 2 tokens
    mech: Any = word_dpvote(
        FakeTokenModel([("", "a")]),
        m=4,
        epsilon=2.0,
        delta=0.5,
        epsilon_token=2.0,
        delta_token=0.5,
    )
    ballot = word_ballot(voters, public=None, m=mech.m)
    exact = word_decision_probabilities(
        voters, epsilon=mech.epsilon_token, delta=mech.delta_token, m=mech.m
    )
    assert min(exact.values()) > 0.05  # every outcome is seen often enough to be tested
    gen = np.random.default_rng(20)
    draws = 40_000
    seen: dict[tuple[int, ...] | None, int] = dict.fromkeys(exact, 0)
    for _ in range(draws):
        choice = mech._choose(ballot.counts, ballot.public, None, gen)
        assert choice.private
        seen[None if choice.token is None else ballot.chosen(choice.token, private=True)] += 1
    outcomes = list(exact)
    observed = [seen[o] for o in outcomes]
    assert chisquare(observed, [exact[o] * draws for o in outcomes]).pvalue > 1e-3
    # The same draws reject the decision with the monotone calibration (b = 1/ε, +1).
    b = 1.0 / mech.epsilon_token
    wrong = {w: math.exp(voters.count(w) / b) for w in set(voters)}
    wrong[None] = 1 + math.exp((1 + b * math.log(2 / mech.delta_token)) / b)
    total = sum(wrong.values())
    assert chisquare(observed, [wrong[o] / total * draws for o in outcomes]).pvalue < 1e-9


# ---------------------------------------------------------------- end to end


def _word_vote(fake: FakeTokenModel, **kw: Any) -> Any:
    return word_dpvote(fake, **{"m": 30, **kw})


def _word_sparse(fake: FakeTokenModel, **kw: Any) -> DPSparseVote:
    return DPSparseVote(fake, **{**WORD_VOTE_ARGS, "m": 40, **kw})


def test_dpvote_releases_the_voters_words_one_decision_each() -> None:
    fake = FakeTokenModel([("", "Kirzyafil is a drug")])
    mech = _word_vote(fake)
    items = list(mech.stream("What?", _docs(30), rng=0))
    answer = items[-1]
    assert isinstance(answer, DPAnswer)
    assert answer.text == "Kirzyafil is a drug" == "".join(items[:-1])  # type: ignore[arg-type]
    d = answer.details
    assert d["unit"] == "word" and d["stop_reason"] == "eos"
    assert d["private_words"] == 5  # four words, then the end
    assert d["private_tokens"] == len("Kirzyafil is a drug") + 1  # every token of a private word
    assert d["tokens_generated"] == len("Kirzyafil is a drug")
    # one lookahead per decision; the session itself steps once per released token
    assert fake.lookahead_calls == 5 and fake.steps == d["tokens_generated"]
    assert fake.sessions[0].appended == _bytes("Kirzyafil is a drug")


def test_dpvote_stops_after_c_max_private_words() -> None:
    fake = FakeTokenModel([("", "alpha beta gamma delta epsilon zeta eta theta")])
    mech = _word_vote(fake, epsilon=10.0, epsilon_token=2.0, max_word_tokens=8)
    answer = mech.answer("What?", _docs(30), rng=1)
    d = answer.details
    assert d["c_max"] == 5 and d["private_words"] == 5 <= d["c_max"]
    assert d["stop_reason"] == "budget"
    assert answer.text == "alpha beta gamma delta epsilon"
    assert d["private_tokens"] == d["tokens_generated"] == len(answer.text)


def test_sparse_vote_releases_agreed_words_free_and_pays_per_private_word() -> None:
    # Voters and the public prompt agree on the frame; only the voters know the name.
    fake = FakeTokenModel([("Context", "The drug is Kirzyafil"), ("", "The drug is Bob")])
    answer = _word_sparse(fake).answer("Which drug?", _docs(40), rng=2)
    d = answer.details
    assert answer.text == "The drug is Kirzyafil"
    assert d["private_words"] == 1  # " Kirzyafil": one decision for its ten tokens
    assert d["private_tokens"] == len(" Kirzyafil")
    assert d["stop_reason"] == "eos"  # voters and public agree on the end: free


def test_sparse_vote_free_public_word_is_released_even_without_a_vote() -> None:
    # No voter proposes the public word "Bob"; with threshold 0 the sparse vector lets it
    # through for free about half the time, and then it is released as "Bob": a free
    # decision never ends the answer with ⊥ (that would depend on the votes).
    fake = FakeTokenModel([("Context", "Kirzyafil"), ("", "Bob")])
    mech = _word_sparse(fake, threshold=0.0, max_new_tokens=3)  # the first word only
    outcomes = [mech.answer("Which drug?", _docs(40), rng=seed) for seed in range(30)]
    free = [a for a in outcomes if a.text.startswith("Bob")]
    assert free and all(a.details["private_words"] == 0 for a in free)
    for a in outcomes:  # every ⊥ comes from the private selection, which paid for it
        if a.details["stop_reason"] == "null_token":
            assert a.details["private_words"] == 1


def test_sparse_vote_agreeing_voters_spend_nothing() -> None:
    fake = FakeTokenModel([("", "The answer is plain.")])
    answer = _word_sparse(fake).answer("What?", _docs(40), rng=3)
    assert answer.text == "The answer is plain."
    assert answer.details["private_words"] == answer.details["private_tokens"] == 0


@pytest.mark.parametrize(
    ("limit", "text"),
    [(4, "Kirz"), (9, "Kirzyafil"), (10, "Kirzyafil "), (11, "Kirzyafil i"), (12, "Kirzyafil is")],
)
def test_max_new_tokens_cuts_the_last_word(limit: int, text: str) -> None:
    fake = FakeTokenModel([("", "Kirzyafil is good")])
    answer = _word_vote(fake, max_new_tokens=limit).answer("What?", _docs(30), rng=4)
    assert answer.text == text
    assert answer.details["tokens_generated"] == limit
    assert answer.details["stop_reason"] == "max_tokens"
    assert answer.details["private_tokens"] == limit


def test_voters_in_disagreement_release_bottom() -> None:
    rules = [(f"tok{i} ", f"word{i} more") for i in range(8)]
    fake = FakeTokenModel(rules)
    docs = [ScoredDocument(id=f"d{i}", text=f"tok{i} ", score=1.0) for i in range(8)]
    mech = _word_vote(fake, m=8, epsilon=10.0, epsilon_token=1.0)
    answer = mech.answer("What?", docs, rng=5)
    assert answer.text == ""
    d = answer.details
    assert d["stop_reason"] == "null_token"
    assert d["private_words"] == d["private_tokens"] == 1  # the ⊥ release was paid for


def test_token_unit_reports_no_words() -> None:
    fake = FakeTokenModel([("", "ab")])
    answer = _word_vote(fake, unit="token").answer("What?", _docs(30), rng=0)
    assert answer.text == "ab" and answer.details["unit"] == "token"
    assert "private_words" not in answer.details and fake.lookahead_calls == 0


# ---------------------------------------------------------------- bad input


class _PlainSession:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def greedy(self) -> np.ndarray:
        return np.asarray(self._inner.greedy())

    def step(self, token: int) -> None:
        self._inner.step(token)


class _NoLookahead(FakeTokenModel):
    """A TokenModel whose sessions cannot look ahead (it withdraws the declaration)."""

    check_lookahead = None  # type: ignore[assignment]

    def prefill(self, prompts: Sequence[str]) -> _PlainSession:  # type: ignore[override]
        return _PlainSession(super().prefill(prompts))


class _Undeclared:
    """Sessions that could look ahead, from a model that does not declare it."""

    def __init__(self) -> None:
        self._inner = FakeTokenModel([])
        self.vocab_size, self.eos_token_ids = self._inner.vocab_size, self._inner.eos_token_ids
        self.encode, self.decode = self._inner.encode, self._inner.decode

    def prefill(self, prompts: Sequence[str]) -> Any:
        return self._inner.prefill(prompts)


def _fake() -> FakeTokenModel:
    return FakeTokenModel([("", "a")])


BAD: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("unit-sentence", lambda: _word_vote(_fake(), unit="sentence"), ValueError, "unit"),
    ("unit-none", lambda: _word_sparse(_fake(), unit=None), ValueError, "unit"),
    ("voterag-unit", lambda: VoteRAG(_fake(), m=2, k=1, unit="words"), ValueError, "unit"),
    (
        "voterag-no-lookahead",
        lambda: VoteRAG(_NoLookahead([]), m=2, k=1, unit="word"),
        TypeError,
        "model",
    ),
    ("max-word-0", lambda: _word_vote(_fake(), max_word_tokens=0), ValueError, "max_word_tokens"),
    (
        "max-word-neg",
        lambda: _word_sparse(_fake(), max_word_tokens=-1),
        ValueError,
        "max_word_tokens",
    ),
    (
        "max-word-bool",
        lambda: _word_vote(_fake(), max_word_tokens=True),
        TypeError,
        "max_word_tokens",
    ),
    (
        "max-word-float",
        lambda: _word_vote(_fake(), max_word_tokens=2.5),
        TypeError,
        "max_word_tokens",
    ),
    (
        "word-exponential",
        lambda: _word_sparse(_fake(), selection="exponential", delta=0.0),
        ValueError,
        "selection",
    ),
    ("no-lookahead-vote", lambda: _word_vote(_NoLookahead([])), TypeError, "model"),
    ("no-lookahead-sparse", lambda: _word_sparse(_NoLookahead([])), TypeError, "model"),
    ("undeclared-lookahead", lambda: _word_vote(_Undeclared()), TypeError, "model"),
]


def _retriever(question: str, k: int) -> list[ScoredDocument]:
    return _docs(k)


@pytest.mark.parametrize(("case", "build", "error", "names"), BAD, ids=[c[0] for c in BAD])
def test_bad_word_settings_are_refused_before_any_charge(
    case: str, build: Callable[[], Any], error: type[Exception], names: str
) -> None:
    acc = InMemoryCorpusAccountant(Budget(100.0, 1e-2))
    with pytest.raises(error, match=names) as info:
        PrivateRAG(build(), HonoursK(_retriever), accountant=acc)
    assert acc.spent_epsilon == 0.0 and acc.spent_delta == 0.0 and acc.queries == 0
    assert "doc 0" not in str(info.value)


def test_a_valid_word_mechanism_is_charged_once_per_query() -> None:
    """The control for the table above: the same accountant does see a real query."""
    acc = InMemoryCorpusAccountant(Budget(100.0, 1e-2))
    mech = _word_vote(FakeTokenModel([("", "Kirzyafil")]))
    answer = PrivateRAG(mech, HonoursK(_retriever), accountant=acc).answer("What?", rng=0)
    assert answer.text == "Kirzyafil"
    assert acc.queries == 1 and acc.spent_epsilon == mech.epsilon
    # a model whose sessions look ahead passes the construction-time check
    assert check_lookahead_model(FakeTokenModel([])) is not None
