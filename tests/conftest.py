"""Shared fixtures: tiny offline transformers models (see tests/tiny_models.py).

torch/transformers are imported inside the fixtures, so tests that do not use
them do not pay for the import.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer (no chat template), pad ``<pad>``, eos ``<eos>``."""
    from tiny_models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_chat_tokenizer() -> Any:
    """The same tokenizer with a Qwen-style chat template."""
    from tiny_models import build_tokenizer

    return build_tokenizer(chat=True)


@pytest.fixture(scope="session")
def tiny_hf_models(tiny_tokenizer: Any) -> dict[str, Any]:
    """Random-init GPT-2, Llama (padded vocab) and Qwen2 causal LMs, float32, eval mode."""
    from tiny_models import build_model

    return {kind: build_model(kind, tiny_tokenizer) for kind in ("gpt2", "llama", "qwen2")}


@pytest.fixture(scope="session")
def tiny_token_model(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> Any:
    """An ``HFTokenModel`` (tiny GPT-2, no chat template): the default real TokenModel."""
    from dprag_core.models.hf import HFTokenModel

    return HFTokenModel(tiny_hf_models["gpt2"], tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_chat_token_model(tiny_chat_tokenizer: Any) -> Any:
    """An ``HFTokenModel`` on a tiny Qwen2 whose tokenizer has a chat template."""
    from tiny_models import build_model

    from dprag_core.models.hf import HFTokenModel

    return HFTokenModel(build_model("qwen2", tiny_chat_tokenizer, seed=1), tiny_chat_tokenizer)


@pytest.fixture(scope="session")
def tiny_text_model(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> Any:
    """An ``HFTextModel`` (greedy) on the tiny Llama."""
    from dprag_core.models.hf import HFTextModel

    return HFTextModel(tiny_hf_models["llama"], tiny_tokenizer)
