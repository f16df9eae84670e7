"""Engines from one table, and word-level voting on the static engine.

Every engine of :data:`~dprag_core.models.hf.ENGINES` builds its sessions from
the table (no per-engine branches elsewhere); the static engine appends a word
in one forward (:meth:`~dprag_core.models.hf_static.StaticBatch.write`), and
word-level transcripts on it equal the eager engine's, voters disagreeing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from dprag_core.algorithms import DPSparseVote, DPVote, VoteRAG
from dprag_core.models import LookaheadModel
from dprag_core.models.hf import ENGINES, HFStaticSession, HFTokenModel, HFTokenSession
from dprag_core.models.hf_cache import DynamicBackend
from dprag_core.models.hf_static import StaticBackend
from dprag_core.retrieval import ScoredDocument

PROMPTS = [
    "Alice",
    "Question: What disease does Bob Durand have?\nAnswer:",
    "Context: Chloé takes metformin.",
]


def test_the_table_names_every_engine_and_its_backend(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    assert list(ENGINES) == ["eager", "static", "cuda_graphs", "compiled"]
    assert [s.static for s in ENGINES.values()] == [False, True, True, True]
    assert [s.graphs for s in ENGINES.values()] == [False, False, True, True]
    assert [s.compiled for s in ENGINES.values()] == [False, False, False, True]
    for name, backend in (("eager", DynamicBackend), ("static", StaticBackend)):
        tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine=name)
        session = tm.prefill(PROMPTS)
        assert type(session) is ENGINES[name].session
        assert isinstance(session._backend, backend)
        assert isinstance(tm, LookaheadModel)
    assert ENGINES["eager"].session is HFTokenSession
    assert ENGINES["static"].session is HFStaticSession


def test_a_word_is_written_in_one_forward_on_the_static_engine(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_hf_models["qwen2"]
    static = HFTokenModel(model, tiny_tokenizer, engine="static")
    eager = HFTokenModel(model, tiny_tokenizer)
    s, e = static.prefill(PROMPTS), eager.prefill(PROMPTS)
    word = [int(t) for t in s.lookahead(4)[1]]
    calls: list[int] = []
    forward = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].shape[1]))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counted)
    s.extend(word)
    assert calls == [4]  # one forward of the 4 tokens, not 4 decode steps
    monkeypatch.undo()
    e.extend(word)
    for _ in range(4):  # the same tokens and, up to rounding, the same distributions
        np.testing.assert_array_equal(s.greedy(), e.greedy())
        np.testing.assert_allclose(s.logprobs, e.logprobs, atol=1e-5, rtol=0)
        token = int(e.greedy()[2])
        s.step(token)
        e.step(token)
    batch = s._batch  # type: ignore[attr-defined]
    filled = batch.length - s._free_slots  # type: ignore[attr-defined]
    assert {int(layer.cumulative_length) for layer in batch.layers} == {filled}
    assert bool((batch.mask[..., filled:] == batch.closed).all())
    assert bool((batch.mask[..., :filled] != batch.closed).any(dim=-1).all())


def _docs() -> list[ScoredDocument]:
    texts = ["Alice takes aspirin.", "Bob has asthma.", "Chloé takes metformin.", "Alice"] * 2
    return [ScoredDocument(id=f"d{i}", text=t, score=1.0) for i, t in enumerate(texts)]


def _word_runs_agree(model: Any, tokenizer: Any, engine: str) -> None:
    """Word-level VoteRAG, DPVote and DPSparseVote give ``engine`` the eager transcripts."""
    runs = []
    for name in ("eager", engine):
        tm = HFTokenModel(model, tokenizer, engine=name)
        words: dict[str, Any] = {"m": 4, "k": 2, "max_new_tokens": 12, "unit": "word"}
        dp: dict[str, Any] = {"epsilon": 60.0, "delta": 1e-4, "epsilon_token": 8.0, **words}
        mechs = [VoteRAG(tm, **words), DPVote(tm, **dp), DPSparseVote(tm, **dp)]
        runs.append(
            [m.answer("Who takes aspirin?", _docs(), rng=seed) for m in mechs for seed in (0, 3)]
        )
    proposals = set()
    for a, b in zip(*runs, strict=True):
        assert (a.text, dict(a.details)) == (b.text, dict(b.details))
        proposals.add(a.text)
    assert len(proposals) > 1  # the transcripts are not all alike


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_word_transcripts_on_static_equal_eager(
    kind: str, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    _word_runs_agree(tiny_hf_models[kind], tiny_tokenizer, "static")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("engine", [n for n, spec in ENGINES.items() if spec.graphs])
def test_word_transcripts_on_graph_engines_equal_eager(engine: str, tiny_tokenizer: Any) -> None:
    from tiny_models import build_model

    _word_runs_agree(build_model("llama", tiny_tokenizer).to("cuda"), tiny_tokenizer, engine)


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_a_one_token_word_reuses_the_lookaheads_first_step(
    engine: str,
    tiny_hf_models: dict[str, Any],
    tiny_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every row began its lookahead with the chosen token: no forward, and the session is
    bit for bit a twin's that stepped it; a step in between, or a row that began with
    another token, and the token is appended by a forward as usual."""
    model = tiny_hf_models["llama"]
    tm = HFTokenModel(model, tiny_tokenizer, engine=engine)
    same = [PROMPTS[1]] * 3  # the rows agree
    looked, twin = tm.prefill(same), tm.prefill(same)
    calls: list[int] = []
    forward = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].shape[1]))
        return forward(*args, **kwargs)

    for _ in range(3):
        table = looked.lookahead(4)
        token = int(table[0, 0])
        assert (table[:, 0] == token).all()
        monkeypatch.setattr(model, "forward", counted)
        looked.extend([token])
        monkeypatch.undo()
        twin.step(token)
        np.testing.assert_array_equal(looked.greedy(), twin.greedy())
        np.testing.assert_array_equal(looked.logprobs, twin.logprobs)
    assert calls == []
    looked.lookahead(4)
    looked.step(int(looked.greedy()[0]))  # a step in between: the kept first step is stale
    twin.step(int(twin.greedy()[0]))
    monkeypatch.setattr(model, "forward", counted)
    looked.extend([int(looked.greedy()[0])])
    assert calls == [1]
    monkeypatch.undo()
    twin.step(int(twin.greedy()[0]))
    np.testing.assert_array_equal(looked.logprobs, twin.logprobs)
    mixed = tm.prefill(PROMPTS)
    table = mixed.lookahead(3)
    assert len(set(table[:, 0].tolist())) > 1
    monkeypatch.setattr(model, "forward", counted)
    mixed.extend([int(table[0, 0])])  # rows that began otherwise: one forward
    assert calls == [1, 1]
