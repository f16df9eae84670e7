"""DPVote / DPSparseVote on a scripted fake TokenModel and end to end on tiny HF models."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fake_token_model import FakeTokenModel
from scipy.stats import chisquare

from dprag_core import Budget, DPAnswer
from dprag_core.accounting.dpvote import token_limit
from dprag_core.algorithms import DPSparseVote, DPVote
from dprag_core.mechanisms.exponential import exponential_probabilities
from dprag_core.mechanisms.sparse_vote import SparseVoteRule
from dprag_core.retrieval import ScoredDocument


def _docs(n: int, text: str = "doc") -> list[ScoredDocument]:
    return [ScoredDocument(id=f"d{i}", text=f"{text} {i}", score=1.0 - i / 100) for i in range(n)]


def _sparse(model: Any, **kw: Any) -> DPSparseVote:
    args: dict[str, Any] = {
        "m": 40,
        "k": 1,
        "epsilon": 40.0,
        "delta": 1e-4,
        "epsilon_token": 8.0,
        "max_new_tokens": 32,
    }
    args.update(kw)
    return DPSparseVote(model, **args)


@pytest.mark.parametrize("selection", ["limited_domain", "exponential"])
def test_voters_agreeing_with_public_spend_nothing(selection: str) -> None:
    fake = FakeTokenModel([("", "The answer is plain.")])
    mech = _sparse(fake, selection=selection, delta=0.0 if selection == "exponential" else 1e-4)
    chunks = list(mech.stream("What?", _docs(40), rng=0))
    answer = chunks[-1]
    assert isinstance(answer, DPAnswer)
    assert answer.text == "The answer is plain."
    assert "".join(c for c in chunks[:-1] if isinstance(c, str)) == answer.text
    assert answer.details["private_tokens"] == 0
    assert answer.details["stop_reason"] == "eos"
    assert answer.details["tokens_generated"] == len("The answer is plain.")
    # One session of m + 1 rows (voters then public), one step per released token (then EOS).
    assert len(fake.sessions) == 1 and len(fake.prompts[0]) == 41
    assert "Context" not in fake.prompts[0][-1]
    assert fake.steps == answer.details["tokens_generated"]
    assert fake.sessions[0].appended == list(answer.text.encode())
    assert answer.guarantee == mech.query_cost()


def test_disagreeing_voters_spend_and_stop_at_c_max() -> None:
    fake = FakeTokenModel([("Context", "x" * 50), ("", "y" * 50)])
    mech = _sparse(fake, epsilon=10.0, epsilon_token=2.0, max_new_tokens=40)
    expected = token_limit(
        epsilon=10.0, delta=1e-4, epsilon_token=2.0, delta_token=mech.delta_token
    )
    answer = mech.answer("What?", _docs(40), rng=1)
    d = answer.details
    assert d["c_max"] == expected.count == 5 and d["c_max_bound"] == expected.bound
    assert d["private_tokens"] == d["tokens_generated"] == 5
    assert d["stop_reason"] == "budget"
    assert answer.text == "xxxxx"
    assert answer.guarantee == Budget(10.0, 1e-4)


def test_sparse_vote_mixes_free_and_private_tokens() -> None:
    # Voters and the public model agree on "Yes, " then the voters know the name.
    fake = FakeTokenModel([("Context", "Yes, Alice"), ("", "Yes, Bobby")])
    answer = _sparse(fake).answer("Who?", _docs(40), rng=2)
    assert answer.text == "Yes, Alice"
    assert answer.details["private_tokens"] == len("Alice")


def test_max_tokens_stop() -> None:
    fake = FakeTokenModel([("", "z" * 50)])
    answer = _sparse(fake, max_new_tokens=7).answer("What?", _docs(40), rng=0)
    assert answer.text == "z" * 7 and answer.details["stop_reason"] == "max_tokens"
    assert fake.steps == 6


def test_limited_domain_null_token_stops_dpvote() -> None:
    # Every voter votes a different token: no count clears LimitedDomain's threshold.
    rules = [(f"tok{i} ", chr(ord("a") + i) * 5) for i in range(8)]
    fake = FakeTokenModel(rules)
    docs = [ScoredDocument(id=f"d{i}", text=f"tok{i} ", score=1.0) for i in range(8)]
    mech = DPVote(fake, m=8, k=1, epsilon=10.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=8)
    answer = mech.answer("What?", docs, rng=3)
    assert answer.text == ""
    assert answer.details["stop_reason"] == "null_token"
    assert answer.details["private_tokens"] == 1  # the ⊥ release itself was paid for


def test_dpvote_spends_every_token_and_stops_at_c_max() -> None:
    fake = FakeTokenModel([("", "w" * 30)])
    mech = DPVote(fake, m=30, k=1, epsilon=10.0, delta=1e-4, epsilon_token=2.0, max_new_tokens=20)
    answer = mech.answer("What?", _docs(30), rng=4)
    assert answer.details["c_max"] == 5
    assert answer.details["private_tokens"] == answer.details["tokens_generated"] == 5
    assert answer.details["stop_reason"] == "budget"
    assert len(fake.prompts[0]) == 30  # DPVote needs no public row


def test_eos_chosen_privately_stops() -> None:
    fake = FakeTokenModel([("Context", "ok"), ("", "ok, and more")])
    answer = _sparse(fake).answer("What?", _docs(40), rng=5)
    assert answer.text == "ok"
    assert answer.details["stop_reason"] == "eos"
    assert answer.details["private_tokens"] == 1


def test_stream_holds_back_partial_characters() -> None:
    fake = FakeTokenModel([("", "café 😀 ok")])
    items = list(_sparse(fake).stream("What?", _docs(40), rng=0))
    chunks = [c for c in items if isinstance(c, str)]
    assert all("\ufffd" not in c for c in chunks)
    assert "".join(chunks) == "café 😀 ok" == items[-1].text


def test_partition_is_used_and_padding_fills_voters() -> None:
    fake = FakeTokenModel([("", "a")])
    _sparse(fake).answer("What?", _docs(3, "secret"), rng=0)
    voter_prompts = fake.prompts[0][:-1]
    assert sum("secret" in p for p in voter_prompts) == 3
    assert len(voter_prompts) == 40


def test_details_hold_no_document_text() -> None:
    fake = FakeTokenModel([("Context", "x" * 4), ("", "y" * 4)])
    answer = _sparse(fake).answer("What?", _docs(40, "PRIVATE-CANARY"), rng=0)
    assert "PRIVATE-CANARY" not in repr(answer.details)
    assert "PRIVATE-CANARY" not in repr(answer)


def test_exponential_selection_is_softmax_of_counts() -> None:
    """Spent runs pick token j with probability softmax(eps_sel * counts / 2), eps_sel = eps/2."""
    counts = np.array([0, 3, 1, 0, 2], dtype=np.int64)
    eps_token, runs = 2.0, 200_000
    rule = SparseVoteRule(
        epsilon_token=eps_token,
        delta_token=0.0,
        threshold=6.0,
        m=6,
        selection="exponential",
        runs=runs,
        rng=7,
    )
    tokens, spent = rule.decide(counts, public=0)
    assert spent.mean() > 0.8
    observed = np.bincount(tokens[spent], minlength=counts.size)
    half = eps_token / 2
    exact = np.exp(half * counts / 2) / np.exp(half * counts / 2).sum()
    np.testing.assert_allclose(
        exponential_probabilities(counts, epsilon=half, sensitivity=1.0), exact, rtol=1e-12
    )
    assert chisquare(observed, exact * observed.sum()).pvalue > 1e-4
    # The same test rejects a selection calibrated with eps instead of eps/2.
    wrong = np.exp(eps_token * counts / 2) / np.exp(eps_token * counts / 2).sum()
    assert chisquare(observed, wrong * observed.sum()).pvalue < 1e-12


def test_exponential_variant_is_pure() -> None:
    mech = DPSparseVote(
        FakeTokenModel([("", "a")]),
        m=4,
        k=1,
        epsilon=10.0,
        delta=0.0,
        epsilon_token=1.0,
        selection="exponential",
        max_new_tokens=4,
    )
    assert mech.query_cost() == Budget(10.0, 0.0)
    assert mech.limit.count == 10 and mech.limit.bound == "sequential"
    with_delta = DPSparseVote(
        FakeTokenModel([("", "a")]),
        m=4,
        k=1,
        epsilon=10.0,
        delta=1e-4,
        epsilon_token=1.0,
        selection="exponential",
        max_new_tokens=4,
    )
    assert with_delta.limit.bound == "mixed_rdp" and with_delta.limit.count > 10


def _model() -> FakeTokenModel:
    return FakeTokenModel([("", "a")])


BASE = {"m": 4, "k": 1, "epsilon": 10.0, "delta": 1e-4, "epsilon_token": 1.0, "max_new_tokens": 8}


@pytest.mark.parametrize("cls", [DPVote, DPSparseVote])
@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"m": 0}, ValueError, "m must be an integer >= 1"),
        ({"k": 0}, ValueError, "k must be an integer >= 1"),
        ({"m": 2.5}, TypeError, "m must be an integer"),
        ({"epsilon": 0.0}, ValueError, "epsilon must be a finite number > 0"),
        ({"epsilon": float("nan")}, ValueError, "epsilon must be"),
        ({"epsilon_token": 11.0}, ValueError, "epsilon_token must be <= epsilon"),
        ({"epsilon_token": -1.0}, ValueError, "epsilon_token must be a finite number > 0"),
        ({"delta": 0.0}, ValueError, r"delta must be in \(0, 1\)"),
        ({"delta": 1.5}, ValueError, "delta must be in"),
        ({"delta_token": 1e-3}, ValueError, "delta_token must be in"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be an integer >= 1"),
        ({"template": "no fields"}, ValueError, "template must contain"),
        ({"template": "{context} {question} {other}"}, ValueError, "template must only use"),
        ({"delta_token": 0.99e-4, "epsilon_token": 10.0, "delta": 1e-4}, None, ""),
    ],
)
def test_bad_input(cls: type, change: dict[str, Any], error: type | None, match: str) -> None:
    kwargs = {**BASE, **change}
    if error is None:
        cls(_model(), **kwargs)
        return
    with pytest.raises(error, match=match):
        cls(_model(), **kwargs)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"selection": "gumbel"}, "selection must be one of"),
        ({"threshold": -1.0}, "threshold must be a finite number >= 0"),
        ({"threshold": 5.0}, r"threshold must be in \[0, m=4\]"),
        ({"selection": "exponential", "delta_token": 1e-6}, "delta_token must be 0"),
    ],
)
def test_sparse_bad_input(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DPSparseVote(_model(), **{**BASE, **change})


def test_bad_question_and_model() -> None:
    mech = DPSparseVote(_model(), **BASE)
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        mech.answer("  ", _docs(4))
    with pytest.raises(TypeError, match="TokenModel"):
        DPVote(object(), **BASE)  # type: ignore[arg-type]


def test_candidates_needed_and_repr() -> None:
    mech = DPSparseVote(_model(), **{**BASE, "k": 3})
    assert mech.candidates_needed() == 12
    assert "DPSparseVote(m=4, k=3" in repr(mech)


# --- end to end on tiny transformers models ---------------------------------------------


@pytest.mark.parametrize("selection", ["limited_domain", "exponential"])
def test_end_to_end_tiny_hf(tiny_token_model: Any, selection: str) -> None:
    mech = DPSparseVote(
        tiny_token_model,
        m=6,
        k=2,
        epsilon=50.0,
        delta=1e-4 if selection == "limited_domain" else 0.0,
        epsilon_token=4.0,
        selection=selection,  # type: ignore[arg-type]
        max_new_tokens=6,
    )
    docs = [
        ScoredDocument(id=f"p{i}", text=f"Patient {i} takes aspirin.", score=1 - i / 20)
        for i in range(9)
    ]
    items = list(mech.stream("Which drug?", docs, rng=0))
    answer = items[-1]
    assert isinstance(answer, DPAnswer)
    assert "".join(i for i in items[:-1] if isinstance(i, str)) == answer.text
    d = answer.details
    assert d["stop_reason"] in {"eos", "null_token", "budget", "max_tokens"}
    assert d["private_tokens"] <= d["c_max"] and d["tokens_generated"] <= 6


def test_end_to_end_chat_model_dpvote(tiny_chat_token_model: Any) -> None:
    mech = DPVote(
        tiny_chat_token_model,
        m=3,
        k=1,
        epsilon=30.0,
        delta=1e-4,
        epsilon_token=10.0,
        max_new_tokens=4,
    )
    answer = mech.answer("Which drug?", _docs(3), rng=0)
    assert answer.guarantee == Budget(30.0, 1e-4)
    assert answer.details["tokens_generated"] <= 3


def test_sparse_vote_hf_matches_public_when_voters_agree(tiny_token_model: Any) -> None:
    """With identical (empty) voter documents and a public template equal to the voter one,
    every voter agrees with the public row: no private token, text = greedy decoding."""
    template = "Q: {question}\nA:{context}"
    mech = DPSparseVote(
        tiny_token_model,
        m=5,
        k=1,
        epsilon=40.0,
        delta=1e-4,
        epsilon_token=20.0,
        max_new_tokens=6,
        template=template,
        public_template="Q: {question}\nA:",
    )
    answer = mech.answer("Which drug?", [], rng=0)
    session = tiny_token_model.prefill(["Q: Which drug?\nA:"])
    ids = []
    for _ in range(answer.details["tokens_generated"]):
        tok = int(session.logprobs[0].argmax())
        ids.append(tok)
        session.step(tok)
    assert answer.details["private_tokens"] == 0
    assert answer.text == tiny_token_model.decode(ids)


def test_exponential_selection_skips_padded_vocabulary() -> None:
    counts = np.zeros(10, dtype=np.int64)
    allowed = np.arange(10) < 7  # ids 7..9: padded logit rows (-inf in the public row)
    rule = SparseVoteRule(
        epsilon_token=1.0,
        delta_token=0.0,
        threshold=2.0,
        m=2,
        selection="exponential",
        runs=20_000,
        allowed=allowed,
        rng=0,
    )
    tokens, spent = rule.decide(counts, public=0)
    assert spent.any() and tokens[spent].max() < 7


def test_end_to_end_padded_vocab_llama(tiny_hf_models: Any, tiny_tokenizer: Any) -> None:
    from dprag_core.models.hf import HFTokenModel

    model = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer)
    mech = DPSparseVote(
        model,
        m=4,
        k=1,
        epsilon=100.0,
        delta=0.0,
        epsilon_token=0.5,
        selection="exponential",
        max_new_tokens=8,
    )
    answer = mech.answer("Which drug?", _docs(4), rng=0)
    assert answer.details["tokens_generated"] + (answer.details["stop_reason"] == "eos") >= 1


@pytest.mark.parametrize("threshold", [None, float("inf"), float("nan")])
def test_sparse_vote_rule_names_a_bad_threshold(threshold: object) -> None:
    with pytest.raises((TypeError, ValueError), match="threshold"):
        SparseVoteRule(
            epsilon_token=1.0,
            delta_token=0.0,
            threshold=threshold,  # type: ignore[arg-type]
            m=4,
            selection="exponential",
        )
