"""Each mechanism asks the engine only for what it reads (docs/design.md §6).

Voting and greedy baselines read B greedy token ids per step; only DP-ICL (and
kNN-Prompting keys) read full distributions. A backend that knows nothing but
each row's greedy token (an OpenAI-compatible server at temperature 0) runs
every voting mechanism and is refused, at construction, by DP-ICL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from fake_token_model import FakeTokenModel

from dprag_core.algorithms import RAG, DPSparseVote, DPVote, NonRAG, VoteRAG
from dprag_core.algorithms.icl import DPICL
from dprag_core.models import LogprobModel, TokenModel
from dprag_core.retrieval import ScoredDocument


def _docs(n: int) -> list[ScoredDocument]:
    return [ScoredDocument(id=f"d{i}", text=f"doc {i}", score=1.0 - i / 100) for i in range(n)]


class GreedyOnly:
    """A TokenModel that knows each row's greedy token and nothing else (no logprobs)."""

    def __init__(self, inner: FakeTokenModel) -> None:
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)

    def prefill(self, prompts: Sequence[str]) -> Any:
        session = self.inner.prefill(prompts)

        class Session:
            greedy = session.greedy
            step = session.step

        return Session()


def _mechanisms(model: Any) -> dict[str, Any]:
    common = {"m": 8, "k": 1, "max_new_tokens": 6}
    budget = {"epsilon": 100.0, "epsilon_token": 8.0}
    return {
        "VoteRAG": VoteRAG(model, **common),
        "DPVote": DPVote(model, delta=1e-4, **budget, **common),
        "DPSparseVote LD": DPSparseVote(model, delta=1e-4, **budget, **common),
        "DPSparseVote EM": DPSparseVote(
            model, delta=0.0, selection="exponential", **budget, **common
        ),
        "RAG": RAG(model, k=2, max_new_tokens=6),
        "NonRAG": NonRAG(model, max_new_tokens=6),
    }


def test_voting_and_baselines_never_read_distributions() -> None:
    fake = FakeTokenModel([("Context", "agreed"), ("", "agreed")])
    for name, mech in _mechanisms(fake).items():
        answer = mech.answer("What?", _docs(8), rng=0)
        assert answer.text == "agreed", name
    assert fake.logprob_reads == 0


def test_dp_icl_reads_distributions() -> None:
    fake = FakeTokenModel([("", "ab")])
    DPICL(fake, epsilon=50.0, max_new_tokens=2, theta=0.0).answer("What?", [], rng=0)
    assert fake.logprob_reads > 0


def test_a_greedy_only_backend_runs_every_voting_mechanism() -> None:
    model = GreedyOnly(FakeTokenModel([("Context", "yes"), ("", "yes")]))
    assert isinstance(model, TokenModel) and not isinstance(model, LogprobModel)
    for name, mech in _mechanisms(model).items():
        assert mech.answer("What?", _docs(8), rng=1).text == "yes", name
    with pytest.raises(TypeError, match="LogprobModel"):
        DPICL(model, epsilon=4.0, max_new_tokens=2)  # type: ignore[arg-type]


def test_hf_voting_never_computes_full_distributions(
    tiny_token_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the HF engine a DP answer moves B token ids per step: no [B, V] log-softmax."""
    calls: list[int] = []
    original = torch.log_softmax

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "log_softmax", counting)
    for name, mech in _mechanisms(tiny_token_model).items():
        answer = mech.answer("Which drug?", _docs(8), rng=2)
        assert isinstance(answer.text, str), name
    assert calls == []
    session = tiny_token_model.prefill_logprobs(["Alice"])
    np.testing.assert_array_equal(session.greedy(), session.logprobs.argmax(axis=1))
    assert calls == [1]
