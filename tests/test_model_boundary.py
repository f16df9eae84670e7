"""The model boundary is by type: a LangChain ``LLM`` or a LlamaIndex ``CustomLLM`` subclass
defined in the app's own module (here: this test module) is refused when a mechanism is
built, naming the wrapper; so is any model carrying framework callbacks. On the code before,
the check read the class's own module name, so these were accepted and LangChain's callbacks
then received every voter's private prompt. A user's own plain TextModel is put in the public
envelope: its prompts are cut to ``max_prompt_bytes`` before it sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fake_token_model import FakeTokenModel
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.llms import LLM
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

from dprag_core.algorithms import DPICL, DPKSA, DPAnswerVote, DPSparseVote, NonRAG
from dprag_core.models.checks import check_text_model, framework_of
from dprag_core.models.text_envelope import PublicEnvelope
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag import LangChainTextModel
from llamaindex_dprag import LlamaIndexTextModel

SECRET = "qx44canary-brunhilde"


class AppLLM(LLM):
    """An app's own LangChain LLM, defined outside any LangChain package."""

    @property
    def _llm_type(self) -> str:
        return "app"

    def _call(self, prompt: str, stop: list[str] | None = None, **kwargs: Any) -> str:
        return "aspirin"


class AppCustomLLM(CustomLLM):
    """An app's own LlamaIndex LLM."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="aspirin")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield CompletionResponse(text="aspirin", delta="aspirin")


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.prompts: list[str] = []

    def on_llm_start(self, serialized: Any, prompts: list[str], **kwargs: Any) -> None:
        self.prompts.extend(prompts)


class Traced:
    """A plain text model that carries callbacks (as a framework object does)."""

    def __init__(self) -> None:
        self.callback_manager = object()

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return ["x"] * len(prompts)


class Plain:
    """An app's own TextModel: records what it receives."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.prompts.extend(prompts)
        return ["aspirin"] * len(prompts)


BUILDERS = {
    "DPKSA": lambda m: DPKSA(m, epsilon=5.0, n_docs=2),
    "DPAnswerVote": lambda m: DPAnswerVote(m, m=2, k=1, epsilon=5.0, delta=1e-4),
    "NonRAG": lambda m: NonRAG(m),
}
TOKEN_BUILDERS = {
    "DPSparseVote": lambda m: DPSparseVote(
        m, m=2, k=1, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=2
    ),
    "DPICL": lambda m: DPICL(m, epsilon=2.0, max_new_tokens=2),
}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=list(BUILDERS))
def test_an_apps_own_framework_model_is_refused_with_the_wrapper(build: Any) -> None:
    recorder = Recorder()
    lc, li = AppLLM(callbacks=[recorder]), AppCustomLLM()
    assert framework_of(lc) == "LangChain" and framework_of(li) == "LlamaIndex"
    with pytest.raises(TypeError, match=r"wrap it with LangChainTextModel\(model\)"):
        build(lc)
    with pytest.raises(TypeError, match=r"wrap it with LlamaIndexTextModel\(llm\)"):
        build(li)
    with pytest.raises(TypeError, match="carries framework callbacks"):
        build(Traced())
    assert recorder.prompts == []
    build(LangChainTextModel(lc))  # wrapped: accepted
    build(LlamaIndexTextModel(li))


@pytest.mark.parametrize("build", TOKEN_BUILDERS.values(), ids=list(TOKEN_BUILDERS))
def test_token_mechanisms_refuse_them_too(build: Any) -> None:
    for model in (AppLLM(), AppCustomLLM()):
        with pytest.raises(TypeError, match=r"HFTokenModel\.from_pretrained"):
            build(model)
    traced = FakeTokenModel([("", "ab")])
    traced.callbacks = [Recorder()]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="carries framework callbacks"):
        build(traced)


def test_the_wrapped_model_sends_nothing_to_its_callbacks() -> None:
    recorder = Recorder()
    ksa = DPKSA(LangChainTextModel(AppLLM(callbacks=[recorder])), epsilon=5.0, n_docs=2)
    docs = [ScoredDocument(f"d{i}", f"{SECRET} record {i}", 0.9) for i in range(2)]
    ksa.answer("Which drug?", docs, rng=0)
    assert recorder.prompts == []


def test_a_plain_text_model_gets_the_public_envelope() -> None:
    plain = Plain()
    ksa = DPKSA(plain, epsilon=5.0, n_docs=2)
    assert isinstance(ksa.model, PublicEnvelope) and ksa.model.inner is plain
    docs = [ScoredDocument("d0", "x" * 100_000 + SECRET, 0.9), ScoredDocument("d1", "y", 0.8)]
    ksa.answer("Which drug?", docs, rng=0)
    assert plain.prompts and max(len(p.encode()) for p in plain.prompts) <= 16384
    mine = PublicEnvelope(plain, max_prompt_bytes=100)  # the user's own width stays
    assert check_text_model(mine) is mine
    assert check_text_model(LangChainTextModel(AppLLM())).__class__ is LangChainTextModel
