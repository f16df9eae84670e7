"""DPAnswerVote and AnswerVote: one decision per whole answer (algorithms/answer_vote.py).

The three tests of docs/new-mechanism.md, on worst-case neighbouring ballots (one
voter's key moves: a near tie, a key nobody else holds, a voter that abstains, a
count at LimitedDomain's threshold):

1. **exact**: the sampler (:meth:`DPAnswerVote.select`, the production path) against
   the closed form of LimitedDomain over the ballot (Gumbel-max = softmax over the
   voted keys, the zero-count slots and h⊥), and the closed forms of D and D'
   against the claim: the hockey-stick divergence at ε is at most δ;
2. **audit** (:func:`dprag_core.audit.audit_epsilon`) of ``select``'s draws, and end to
   end through :meth:`DPAnswerVote.answer` (partition, model, keys, selection);
3. **mutations** the same checks catch: LimitedDomain's ln term dropped, its noise
   halved (the monotone form), and releasing the winning voter's own wording
   instead of the canonical key.

Also: the key map, voter failure as abstention, padding voters, bad input.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from answer_vote_audit import HalfNoise, KeyRecorder, NoLnTerm, Reader, audit_keys, ranking

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import AnswerVote, DPAnswerVote
from dprag_core.algorithms.answer_keys import ABSTAIN, answer_key, render_key, stem
from dprag_core.algorithms.contract import conformance
from dprag_core.audit import audit_epsilon
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.sparse_vote import MAX_CHANGED
from dprag_core.pipeline import PrivateRAG
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.partition import partition_voters
from dprag_core.testing.mechanisms import WorstCaseAudit, ask

EPSILON, DELTA, M = 2.0, 1e-3, 20
TRIALS = 200_000
# b = 2/ε = 1, h⊥ = 2 + ln(2/δ) = 9.6 (the (k̄+1)-th count is 0 with k̄ = m)
H_BOTTOM = 2 + (2 / EPSILON) * math.log(MAX_CHANGED / DELTA)


def mechanism(**changes: Any) -> DPAnswerVote:
    settings: dict[str, Any] = {"m": M, "k": 1, "epsilon": EPSILON, "delta": DELTA, **changes}
    return DPAnswerVote(Reader(), **settings)


# -- the key map ---------------------------------------------------------------------------

TREATMENT = "What treatment is recommended for Snurfosis?"
DISEASE = "I have fever and chills. What is my disease?"


@pytest.mark.parametrize(
    ("answer", "question", "key"),
    [
        ("The recommended treatment for Snurfosis is metformin.", TREATMENT, "metformin"),
        ("Metformin.", TREATMENT, "metformin"),
        ("metformin", TREATMENT, "metformin"),
        ("Snurfosis is treated with Metformin!", TREATMENT, "metformin"),
        ("Kirzyafil is the treatment recommended for Snurfosis.", TREATMENT, "kirzyafil"),
        ("Treatment for Snurfosis: Quinine", TREATMENT, "quinine"),
        ("The disease is Brainpynopathy, which is rare.", DISEASE, "brainpynopathy"),
        ("The correct answer is: Brainpynopathy.", DISEASE, "brainpynopathy"),
        ("Reegraitis is the disease.", DISEASE, "reegraitis"),
        ("Quinine. It is also used for malaria.", TREATMENT, "quinine"),
        ("Dr. Who is the answer", "Who is it?", "dr"),
        ("Venus.", "Is Mars or Venus larger?", "venus"),
        ("Ann's phone number is 555-0101.", "What is Ann's phone number?", "555-0101"),
        ("The record does not mention a treatment.", TREATMENT, ABSTAIN),
        ("I don't know.", TREATMENT, ABSTAIN),
        ("I’m sorry, I cannot help with that.", TREATMENT, ABSTAIN),
        ("There is no information about Snurfosis.", TREATMENT, ABSTAIN),
        ("", TREATMENT, ABSTAIN),
        ("The the a.", TREATMENT, ABSTAIN),
    ],
)
def test_answer_key(answer: str, question: str, key: str | None) -> None:
    assert answer_key(answer, question) == key


def test_answer_key_reads_only_its_arguments_and_caps_the_words() -> None:
    long = "alpha beta gamma delta epsilon zeta eta theta"
    assert answer_key(long, "Which?") == "alpha beta gamma delta epsilon zeta"
    assert answer_key(long, "Which?", max_words=2) == "alpha beta"
    with pytest.raises(ValueError, match="max_words"):
        answer_key(long, "Which?", max_words=0)
    assert stem("treating") == stem("treated") == stem("treatment") == "treat"
    assert render_key("judi dench") == "Judi Dench"


# -- the exact law -------------------------------------------------------------------------


def exact_law(
    keys: Sequence[str], *, m: int = M, epsilon: float = EPSILON, delta: float = DELTA
) -> dict[str | None, float]:
    """LimitedDomain over the ballot in closed form: each voted key, and ⊥ (None).

    Candidates: every voted key and m - (voted keys) zero-count slots (k̄ = m; the
    (k̄+1)-th count is 0), and h⊥ = 2 + b·ln(2/δ) with b = 2/ε; the Gumbel-max picks
    candidate i with probability exp(c_i/b) / Z. Zero-count slots and h⊥ are ⊥.
    """
    b = 2 / epsilon
    counts = Counter(keys)
    h_bottom = 2 + b * math.log(min(MAX_CHANGED, m) / delta)
    weights = {key: math.exp(c / b) for key, c in counts.items()}
    rest = (m - len(counts)) * 1.0 + math.exp(h_bottom / b)
    total = sum(weights.values()) + rest
    law: dict[str | None, float] = {key: w / total for key, w in weights.items()}
    law[None] = rest / total
    return law


def hockey_stick(p: dict[str | None, float], q: dict[str | None, float], epsilon: float) -> float:
    """The least δ with P(S) ≤ e^ε Q(S) + δ for every set of outputs S."""
    return sum(max(0.0, v - math.exp(epsilon) * q.get(o, 0.0)) for o, v in p.items())


def draws(mech: DPAnswerVote, keys: Sequence[str], *, seed: int) -> list[str | None]:
    return mech.select(keys, rng=seed, size=TRIALS)


TIE = (["a"] * 10 + ["b"] * 9, ["a"] * 9 + ["b"] * 10)  # one voter moves from a to b
# ... from the minority key b to the dominant a: b's probability moves by nearly e^ε
SKEW = (["a"] * 12 + ["b"] * 8, ["a"] * 13 + ["b"] * 7)
NEW_KEY = (["a"] * 10, ["a"] * 9 + ["c"])  # ... from a to a key nobody else holds
ABSTAINS = (["a"] * 10, ["a"] * 9)  # ... from a to abstaining
EDGE = (["a"] * 10, ["a"] * 9 + ["b"])  # a's count on either side of h⊥ = 9.6
LONE = (["a"], [])  # the only voter that answers abstains instead: a key of one vote
PAIRS = {
    "tie": TIE,
    "skew": SKEW,
    "new-key": NEW_KEY,
    "abstains": ABSTAINS,
    "edge": EDGE,
    "lone": LONE,
}


@pytest.mark.parametrize("keys", [TIE[0], NEW_KEY[1], ["a"] * 14 + ["b"] * 3], ids=str)
def test_sampler_matches_the_closed_form(keys: list[str]) -> None:
    law = exact_law(keys)
    seen = Counter(draws(mechanism(), keys, seed=3))
    for output, p in law.items():
        sd = math.sqrt(p * (1 - p) / TRIALS)
        assert abs(seen[output] / TRIALS - p) <= 5 * sd + 1e-9, (output, seen[output], p)
    assert set(seen) <= set(law)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_closed_form_is_within_the_claim(name: str) -> None:
    d, d_prime = PAIRS[name]
    p, q = exact_law(d), exact_law(d_prime)
    assert hockey_stick(p, q, EPSILON) <= DELTA
    assert hockey_stick(q, p, EPSILON) <= DELTA


def test_closed_form_of_the_skewed_pair_spends_epsilon() -> None:
    """A voter leaving the minority key for the dominant one: b's privacy loss nears ε
    (in a near tie it is ε/2: the normaliser does not move)."""
    p, q = exact_law(SKEW[0]), exact_law(SKEW[1])
    loss = max(abs(math.log(p[o] / q[o])) for o in p)
    assert 0.95 * EPSILON < loss <= EPSILON + 1e-12
    p, q = exact_law(TIE[0]), exact_law(TIE[1])
    assert max(abs(math.log(p[o] / q[o])) for o in p) == pytest.approx(EPSILON / 2)


def test_mutation_without_the_ln_term_breaks_the_closed_form() -> None:
    """h⊥ = 2 (ln(2/δ) dropped): a key held by one voter is released far beyond δ."""
    no_ln = MAX_CHANGED  # the law with δ = Δ0, where ln(Δ0/δ) = 0
    p, q = exact_law(LONE[0], delta=no_ln), exact_law(LONE[1], delta=no_ln)
    assert hockey_stick(p, q, EPSILON) > 50 * DELTA


# -- the statistical audit -----------------------------------------------------------------


def labels(outputs: Sequence[str | None]) -> np.ndarray:
    code = {None: -1, "a": 0, "b": 1, "c": 2}
    return np.array([code.get(o, 3) for o in outputs])


def audit(mech: DPAnswerVote, pair: tuple[list[str], list[str]]) -> float:
    on_d = labels(draws(mech, pair[0], seed=11))
    on_d_prime = labels(draws(mech, pair[1], seed=12))
    return audit_epsilon(on_d, on_d_prime, delta=mech.delta).epsilon_lower_bound


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_audit_within_the_claim(name: str) -> None:
    bound = audit(mechanism(), PAIRS[name])
    assert bound <= EPSILON, bound
    if name == "skew":
        assert bound > 0.7 * EPSILON  # the audit has power on this pair


def test_audit_catches_the_dropped_ln_term() -> None:
    assert audit(NoLnTerm(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA), LONE) > EPSILON


def test_audit_catches_halved_noise() -> None:
    # the skewed shape at the halved scale (b = 1/ε = 0.5): a gap of 2 votes, not 4
    pair = (["a"] * 11 + ["b"] * 9, ["a"] * 12 + ["b"] * 8)
    assert audit(HalfNoise(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA), pair) > EPSILON


def test_select_draws_what_answer_releases() -> None:
    """``answer`` makes one ``select`` draw after the partition, from the same generator."""
    mech = mechanism()
    docs = corpus(["Aspirin."] * 10 + ["Ibuprofen."] * 10)
    outcomes = set()
    for seed in range(40):
        released = mech.answer("Which drug?", docs, rng=seed)
        gen = make_rng(seed)
        partition_voters(docs, m=M, k=1, rng=gen)
        keys = ["aspirin"] * 10 + ["ibuprofen"] * 10
        expected = mech.select(keys, rng=gen)[0]
        assert released.text == ("" if expected is None else render_key(expected))
        outcomes.add(released.text)
    assert len(outcomes) >= 2


# -- end to end through answer(): partition, model, keys, selection ------------------------


def corpus(texts: Sequence[str], *, prefix: str = "u") -> list[ScoredDocument]:
    """One chunk per unit, ranked in the order given."""
    return [
        ScoredDocument(f"{prefix}{i}", text, 0.9 - i / 1000, unit=f"{prefix}{i}")
        for i, text in enumerate(texts)
    ]


def wording_pair(m: int) -> tuple[list[ScoredDocument], list[ScoredDocument]]:
    """D: m units answering "Aspirin."; D' = D plus a unit ranked first answering "ASPIRIN!"
    (the same key, another wording), which pushes D's last unit out of the top m."""
    d = corpus(["Aspirin."] * m)
    added = ScoredDocument("new", "ASPIRIN!", 0.99, unit="new")
    return d, [added, *d]


class RawWording(DPAnswerVote):
    """MUTATION: decides on the keys, then releases the wording of a voter with that key."""

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Any:
        query = as_query(query, rng=rng)
        question, gen = query.question, query.rng
        voters = partition_voters(docs, m=self.m, k=self.k, rng=gen)
        prompts = [self.template.format(context=v[0].text, question=question) for v in voters]
        answers = [a or "" for a in self._generate(prompts)]
        chosen = self.select([self.key(a, question) or "" for a in answers], rng=gen)[0]
        raw = next((a for a in answers if self.key(a, question) == chosen), "")
        return replace(self._answer(chosen, self.query_cost()), text=raw)


def end_to_end(
    mech: DPAnswerVote, docs: list[ScoredDocument], trials: int, seed: int
) -> np.ndarray:
    top = docs[: mech.candidates_needed()]
    gen = np.random.default_rng(seed)
    texts = [mech.answer("Which drug?", top, rng=gen).text for _ in range(trials)]
    code = {"": 0, "Aspirin": 1, "Aspirin.": 2, "ASPIRIN!": 3}
    return np.array([code.get(t, 4) for t in texts])


class TestEndToEndWording(WorstCaseAudit[DPAnswerVote, list[ScoredDocument]]):
    """The key, not the wording, is released: a neighbour that only rewords one answer
    changes nothing; the mutation that releases a voter's wording is caught (the kit's
    audit suite, through answer())."""

    epsilon = EPSILON
    delta = DELTA
    trials = 3000
    seed = 1

    def mechanism(self) -> DPAnswerVote:
        return DPAnswerVote(Reader(), m=16, k=1, epsilon=EPSILON, delta=DELTA)

    def mutant(self) -> DPAnswerVote:
        return RawWording(Reader(), m=16, k=1, epsilon=EPSILON, delta=DELTA)

    def pair(self) -> tuple[list[ScoredDocument], list[ScoredDocument]]:
        return wording_pair(16)  # 16 votes for "aspirin": above h⊥ = 9.6

    def sample(
        self, mech: DPAnswerVote, docs: list[ScoredDocument], trials: int, gen: np.random.Generator
    ) -> np.ndarray:
        top = docs[: mech.candidates_needed()]
        texts = [ask(mech, "Which drug?", top, rng=gen).text for _ in range(trials)]
        code = {"": 0, "Aspirin": 1, "Aspirin.": 2, "ASPIRIN!": 3}
        return np.array([code.get(t, 4) for t in texts])


def test_end_to_end_near_tie_within_the_claim() -> None:
    """Through answer(): 20 voters, 10 / 10 against 11 / 9 (D' = D + one unit ranked first)."""
    d = corpus(["Ibuprofen."] * 10 + ["Aspirin."] * 10)
    d_prime = [ScoredDocument("new", "Ibuprofen.", 0.99, unit="new"), *d]  # pushes out aspirin
    mech = mechanism()
    bound = audit_epsilon(
        end_to_end(mech, d, 3000, seed=5), end_to_end(mech, d_prime, 3000, seed=6), delta=DELTA
    ).epsilon_lower_bound
    assert bound <= EPSILON, bound


# -- voter failure, padding, the non-private counterpart, bad input -----------------------


class Filtered(Reader):
    """A hosted API whose content filter refuses any prompt mentioning ``word``."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        if any(self.word in p for p in prompts):
            self.calls += 1
            raise RuntimeError("content filter")
        return super().generate(prompts, max_new_tokens=max_new_tokens)


def test_a_failing_voter_abstains_instead_of_failing_the_query() -> None:
    model = Filtered("Forbidden")
    mech = DPAnswerVote(model, m=12, k=1, epsilon=20.0, delta=1e-4)
    docs = corpus(["Aspirin."] * 11 + ["Forbidden aspirin."])
    keys = mech.keys("Which drug?", docs, rng=0)
    assert keys == ["aspirin"] * 11  # the refused voter abstained
    assert model.calls == 12  # one call per prompt (a model of the app's own), never a resend
    clean = Filtered("Forbidden")
    DPAnswerVote(clean, m=12, k=1, epsilon=20.0, delta=1e-4).keys(
        "Which drug?", corpus(["Aspirin."] * 12), rng=0
    )
    assert clean.calls == model.calls  # the same schedule without the refused record
    assert mech.answer("Which drug?", docs, rng=0).text == "Aspirin"


def test_voter_errors_raise_lets_the_error_through() -> None:
    mech = DPAnswerVote(
        Filtered("Forbidden"), m=2, k=1, epsilon=5.0, delta=1e-4, voter_errors="raise"
    )
    with pytest.raises(RuntimeError, match="content filter"):
        mech.answer("Which drug?", corpus(["Forbidden.", "Aspirin."]), rng=0)


class Broken(Reader):
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return [None] * len(prompts)  # type: ignore[list-item]


def test_a_voter_without_a_string_abstains() -> None:
    mech = DPAnswerVote(Broken(), m=3, k=1, epsilon=5.0, delta=1e-4)
    answer = mech.answer("Which drug?", corpus(["Aspirin."] * 3), rng=0)
    assert (answer.text, answer.details["answer_source"]) == ("", "none")


def test_padding_voters_are_prompted_but_abstain() -> None:
    model = Reader()
    mech = DPAnswerVote(model, m=30, k=1, epsilon=50.0, delta=1e-4)
    assert mech.keys("Which drug?", corpus(["Aspirin."] * 3), rng=0) == ["aspirin"] * 3
    assert model.calls == 30  # m prompts, one call each (a model of the app's own)
    answer = AnswerVote(model, m=30, k=1).answer("Which drug?", corpus(["Aspirin."] * 3))
    assert answer.text == "Aspirin" and answer.epsilon == math.inf


def test_answer_vote_takes_the_most_frequent_key() -> None:
    docs = corpus(["Ibuprofen is the drug."] * 2 + ["Aspirin."] * 3 + ["I don't know."] * 5)
    answer = AnswerVote(Reader(), m=10, k=1).answer("Which drug?", docs, rng=1)
    assert answer.text == "Aspirin"
    assert dict(answer.details) == {
        "stop_reason": "answer",
        "answer_source": "documents",
        "m": 10,
        "k": 1,
        "unit": "answer",
    }


def test_details_are_public_and_say_where_the_answer_came_from() -> None:
    released = conformance(mechanism(epsilon=50.0), "Which drug?", corpus(["Aspirin."] * 20))
    assert released.text == "Aspirin"
    assert dict(released.details) == {
        "stop_reason": "answer",
        "answer_source": "documents",
        "m": M,
        "k": 1,
        "unit": "answer",
        "selection": "limited_domain",
    }
    nothing = conformance(mechanism(epsilon=0.1), "Which drug?", corpus(["Aspirin."] * 20))
    assert (nothing.text, nothing.details["stop_reason"]) == ("", "null_token")
    assert nothing.details["answer_source"] == "none"


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": float("nan")}, ValueError, "epsilon"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"m": 0}, ValueError, "m"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
        ({"voter_errors": "ignore"}, ValueError, "voter_errors"),
        ({"key": "metformin"}, TypeError, "key"),
        ({"template": "{question}"}, ValueError, "template"),
        ({"epsilom": 1.0}, TypeError, "epsilon"),
    ],
)
def test_bad_input_is_refused_when_built(changes: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        mechanism(**changes)


def test_a_key_map_returning_a_non_string_is_refused_when_built() -> None:
    with pytest.raises(TypeError, match="key must return"):
        mechanism(key=lambda answer, question: 3)


def test_a_key_map_failing_on_one_answer_makes_that_voter_abstain() -> None:
    """After the charge nothing may fail because of the documents: the voter abstains."""

    def picky(answer: str, question: str) -> str | None:
        if "Forbidden" in answer:
            raise RuntimeError(answer)
        return answer_key(answer, question)

    mech = mechanism(m=3, key=picky)
    assert mech.keys("Which drug?", corpus(["Aspirin.", "Forbidden.", "Aspirin."]), rng=0) == [
        "aspirin",
        "aspirin",
    ]


# -- through the app: PrivateRAG (the adapters: tests/langchain, tests/llamaindex) ----------


def through_private_rag(cls: type[KeyRecorder], name: str) -> tuple[list[str], list[str]]:
    """The keys that reached the selection for D and for D' (tests/answer_vote_audit.py)."""
    seen = []
    for new in (False, True):
        rows = ranking(name, with_new_unit=new)
        docs = [ScoredDocument(i, t, 0.9, unit=u) for i, u, t in rows]
        mech = cls(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
        budget = InMemoryCorpusAccountant(Budget(100.0, 0.5))
        app = PrivateRAG(mech, HonoursK(lambda question, k, docs=docs: docs[:k]), accountant=budget)
        app.answer("Which drug?", rng=0)
        assert budget.spent_epsilon == EPSILON  # charged before retrieval
        seen.append(mech.seen[0])
    return seen[0], seen[1]


@pytest.mark.parametrize("name", ["skew", "lone"])
def test_private_rag_audit_within_the_claim(name: str) -> None:
    keys_d, keys_d_prime = through_private_rag(KeyRecorder, name)
    assert Counter(keys_d) != Counter(keys_d_prime)  # one voter moved
    bound = audit_keys(mechanism(), keys_d, keys_d_prime)
    assert bound <= EPSILON and (name == "lone" or bound > 0.7 * EPSILON), bound


@pytest.mark.parametrize(("cls", "name"), [(NoLnTerm, "lone"), (HalfNoise, "skew-2")])
def test_private_rag_audit_catches_the_mutations(cls: type[KeyRecorder], name: str) -> None:
    keys_d, keys_d_prime = through_private_rag(cls, name)
    mutated = cls(Reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mutated, keys_d, keys_d_prime) > EPSILON
