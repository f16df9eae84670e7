"""transformers forward compatibility: dprag's own model calls emit no deprecation warning.

transformers 5.2x renamed the forward's ``past_key_values=`` to ``cache=`` and warns
(``FutureWarning``) on the old name; dprag picks the name from the model's
signature once (:func:`~dprag_core.models.hf_cache.cache_argument`). The
generations below run with every FutureWarning and DeprecationWarning recorded,
on each CPU engine, token by token, word by word (lookahead and multi-token
appends) and through ``HFTextModel``; the first test shows that the recording
would catch the old name, so the check can fail.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from dprag_core.algorithms import DPSparseVote, VoteRAG
from dprag_core.models.hf import Engine, HFTextModel, HFTokenModel
from dprag_core.models.hf_cache import cache_argument
from dprag_core.retrieval import ScoredDocument

PROMPTS = ["Alice", "Question: What disease does Bob Durand have?\nAnswer:"]


def _deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    kinds = (FutureWarning, DeprecationWarning)
    return [str(w.message) for w in caught if issubclass(w.category, kinds)]


def test_the_old_argument_name_would_be_caught(tiny_hf_models: dict[str, Any]) -> None:
    model = tiny_hf_models["llama"]
    if cache_argument(model) != "cache":
        pytest.skip("this transformers takes past_key_values= without a warning")
    ids = torch.tensor([[5, 6, 7]])
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        model(input_ids=ids, past_key_values=None, use_cache=True)
    assert any("past_key_values" in text for text in _deprecations(caught))


def test_the_argument_is_read_from_the_signature() -> None:
    class Old:
        def forward(self, input_ids: Any, past_key_values: Any = None) -> None: ...

    class New:
        def forward(self, input_ids: Any, cache: Any = None) -> None: ...

    assert cache_argument(Old()) == "past_key_values"
    assert cache_argument(New()) == "cache"


@pytest.mark.parametrize("engine", ["eager", "static"])
@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_generation_emits_no_deprecation_warning(
    kind: str, engine: Engine, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    model = tiny_hf_models[kind]
    docs = [
        ScoredDocument(id=f"d{i}", text=f"Alice takes aspirin {i}.", score=1.0) for i in range(3)
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tm = HFTokenModel(model, tiny_tokenizer, engine=engine)
        session = tm.prefill(PROMPTS)
        session.lookahead(3)
        session.extend([int(t) for t in session.lookahead(3)[0]])
        session.step(int(session.greedy()[0]))
        VoteRAG(tm, m=3, k=1, max_new_tokens=6, unit="word").answer("Who?", docs, rng=0)
        HFTextModel.on(tm).generate(PROMPTS, max_new_tokens=4)
    assert _deprecations(caught) == []


def test_dp_mechanism_on_static_emits_no_deprecation_warning(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    tm = HFTokenModel(tiny_hf_models["qwen2"], tiny_tokenizer, engine="static")
    docs = [ScoredDocument(id=f"d{i}", text="Alice takes aspirin.", score=1.0) for i in range(4)]
    mech = DPSparseVote(tm, m=4, k=1, epsilon=40.0, delta=1e-4, epsilon_token=5.0, max_new_tokens=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mech.answer("Who takes aspirin?", docs, rng=1)
    assert _deprecations(caught) == []
