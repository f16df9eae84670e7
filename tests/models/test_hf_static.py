"""The static-cache engines: the same tokens as the eager engine, growth, pooling, refusals.

``engine="static"`` runs everywhere (the CPU tests below); ``"cuda_graphs"``
replays the same decode step as a CUDA graph and is checked against ``"eager"``
where a GPU is present (skipped otherwise).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
import torch

from dprag_core.algorithms import DPSparseVote, DPVote
from dprag_core.models import hf_static
from dprag_core.models.hf import ENGINES, Engine, HFStaticSession, HFTextModel, HFTokenModel
from dprag_core.retrieval import ScoredDocument

GRAPH_ENGINES = [name for name, spec in ENGINES.items() if spec.graphs]
"""The engines that replay CUDA graphs (refused off CUDA)."""

PROMPTS = [
    "Alice",
    "Question: What disease does Bob Durand have?\nAnswer:",
    "Context: Chloé takes metformin.",
]


@pytest.fixture
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets of 4 slots and 2 of headroom, so that a few steps make a batch grow."""
    monkeypatch.setattr(hf_static, "BUCKET", 4)
    monkeypatch.setattr(hf_static, "HEADROOM", 2)


def _same_run(eager: HFTokenModel, other: HFTokenModel, steps: int, atol: float) -> None:
    """Both engines give the same greedy tokens and log-probabilities, step by step."""
    a, b = eager.prefill(PROMPTS), other.prefill(PROMPTS)
    for step in range(steps):
        np.testing.assert_array_equal(a.greedy(), b.greedy())
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol, rtol=0)
        token = int(a.greedy()[step % len(PROMPTS)])
        a.step(token)
        b.step(token)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_static_matches_eager_across_growth(
    kind: str, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, small_buckets: None
) -> None:
    model = tiny_hf_models[kind]
    static = HFTokenModel(model, tiny_tokenizer, engine="static")
    session = static.prefill(PROMPTS)
    assert isinstance(session, HFStaticSession)
    first_length = session._batch.length
    del session
    _same_run(HFTokenModel(model, tiny_tokenizer), static, steps=12, atol=1e-5)
    grown = static.prefill(PROMPTS)
    for _ in range(12):
        grown.step(0)
    assert grown._batch.length > first_length  # 12 steps do not fit in 2 slots of headroom


def test_text_generation_matches_eager(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any):
    model = tiny_hf_models["llama"]
    eager = HFTextModel(model, tiny_tokenizer).generate(PROMPTS, max_new_tokens=80)
    static = HFTextModel(model, tiny_tokenizer, engine="static")
    assert static.generate(PROMPTS, max_new_tokens=80) == eager


def _docs(n: int) -> list[ScoredDocument]:
    return [
        ScoredDocument(id=f"d{i}", text=f"Alice takes aspirin {i}.", score=1.0) for i in range(n)
    ]


@pytest.mark.parametrize("selection", ["limited_domain", "exponential"])
def test_mechanism_transcripts_match_eager(
    selection: str, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    model = tiny_hf_models["qwen2"]
    runs = []
    for engine in ("eager", "static"):
        tm = HFTokenModel(model, tiny_tokenizer, engine=engine)
        common: dict[str, Any] = {"m": 4, "k": 1, "epsilon": 40.0, "max_new_tokens": 6}
        delta = 0.0 if selection == "exponential" else 1e-4
        sparse = DPSparseVote(tm, delta=delta, epsilon_token=5.0, selection=selection, **common)
        vote = DPVote(tm, delta=1e-4, epsilon_token=5.0, **common)
        runs.append([m.answer("Who takes aspirin?", _docs(4), rng=7) for m in (sparse, vote)])
    for a, b in zip(*runs, strict=True):
        assert (a.text, a.details) == (b.text, b.details)


def test_pool_reuses_and_separates_batches(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any):
    tm = HFTokenModel(tiny_hf_models["gpt2"], tiny_tokenizer, engine="static")
    first = tm.prefill(PROMPTS)
    batch = first._batch
    second = tm.prefill(PROMPTS)  # concurrent session of the same shape: its own buffers
    assert second._batch is not batch
    del first
    gc.collect()
    third = tm.prefill(PROMPTS)  # the released batch is reused
    assert third._batch is batch
    assert second._batch is not third._batch


def test_bad_engines_are_refused(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any):
    model = tiny_hf_models["llama"]
    with pytest.raises(ValueError, match="engine must be one of"):
        HFTokenModel(model, tiny_tokenizer, engine="fast")
    if not torch.cuda.is_available():
        for engine in GRAPH_ENGINES:
            with pytest.raises(ValueError, match=rf"{engine}.*CUDA device"):
                HFTokenModel(model, tiny_tokenizer, engine=engine)


def test_non_sdpa_attention_is_refused(tiny_tokenizer: Any):
    from tiny_models import build_model

    model = build_model("llama", tiny_tokenizer)
    model.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match="engine='static' needs attn_implementation='sdpa'"):
        HFTokenModel(model, tiny_tokenizer, engine="static")
    assert HFTokenModel(model, tiny_tokenizer).engine == "eager"  # the default still works


def test_cache_length_rounds_up_to_buckets() -> None:
    assert hf_static.cache_length(1) % hf_static.BUCKET == 0
    assert hf_static.cache_length(300) >= 300 + hf_static.HEADROOM
    assert hf_static.cache_length(300) - (300 + hf_static.HEADROOM) < hf_static.BUCKET


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize(
    ("kind", "engine"), [("llama", "cuda_graphs"), ("qwen2", "cuda_graphs"), ("llama", "compiled")]
)
def test_graph_engines_match_eager_on_gpu(
    kind: str, engine: Engine, tiny_tokenizer: Any, small_buckets: None
) -> None:
    from tiny_models import build_model

    model = build_model(kind, tiny_tokenizer).to("cuda")
    graphs = HFTokenModel(model, tiny_tokenizer, engine=engine)
    _same_run(HFTokenModel(model, tiny_tokenizer), graphs, steps=12, atol=1e-4)
    text = HFTextModel(model, tiny_tokenizer)
    assert HFTextModel(model, tiny_tokenizer, engine=engine).generate(
        PROMPTS, max_new_tokens=40
    ) == text.generate(PROMPTS, max_new_tokens=40)


def test_text_model_on_a_token_model_shares_its_pool(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine="static")
    text = HFTextModel.on(tm)
    assert text.token_model is tm and tm._pool is not None
    assert text.generate(PROMPTS, max_new_tokens=4) == HFTextModel(
        tiny_hf_models["llama"], tiny_tokenizer
    ).generate(PROMPTS, max_new_tokens=4)
    with pytest.raises(TypeError, match="token_model must be an HFTokenModel"):
        HFTextModel.on(object())  # type: ignore[arg-type]
