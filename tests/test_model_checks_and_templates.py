"""A framework's own model is refused when a mechanism is built, with the wrapper to use;
an app's own prompt replaces a mechanism's per-document template (in a copy)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from fake_token_model import FakeTokenModel

from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import (
    DPICL,
    DPKSA,
    RAG,
    DPSparseVote,
    DPVote,
    MuRAG,
    NonRAG,
    VoteRAG,
)
from dprag_core.algorithms.templates import with_context_template
from dprag_core.models.checks import check_text_model, check_token_model, framework_of
from dprag_core.retrieval.documents import ScoredDocument

APP = "Use these notes:\n{context}\n---\nQ: {question}\nA:"
VOTING: dict[str, Any] = {
    "m": 2,
    "k": 1,
    "epsilon": 5.0,
    "delta": 1e-4,
    "epsilon_token": 1.0,
    "max_new_tokens": 2,
}


class Text:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.prompts.extend(prompts)
        return ["alpha"] * len(prompts)


def _framework_object(module: str, *, generate: bool = False) -> Any:
    """An object whose class lives in ``module`` (a LangChain chat model has ``generate``)."""
    namespace: dict[str, Any] = {"__module__": module}
    if generate:
        namespace["generate"] = lambda self, messages, **kw: None
    return type("ChatLike", (), namespace)()


@pytest.mark.parametrize(
    ("module", "wrapper"),
    [
        ("llama_index.llms.openai.base", "LlamaIndexTextModel(llm)"),
        ("langchain_openai.chat_models.base", "LangChainTextModel(model)"),
        ("langchain_core.language_models.fake_chat_models", "LangChainTextModel(model)"),
    ],
)
def test_text_mechanisms_refuse_a_framework_model_with_the_wrapper(
    module: str, wrapper: str
) -> None:
    raw = _framework_object(module, generate=True)  # has generate(), with another meaning
    with pytest.raises(TypeError, match="wrap it with " + re.escape(wrapper)):
        DPKSA(raw, epsilon=2.0)
    with pytest.raises(TypeError, match="must be a dprag TextModel"):
        NonRAG(raw)
    with pytest.raises(TypeError, match="must be a dprag TextModel"):
        RAG(raw, k=1)


@pytest.mark.parametrize("module", ["llama_index.core.llms.mock", "langchain_core.llms"])
def test_token_mechanisms_refuse_a_framework_model_with_what_to_use(module: str) -> None:
    raw = _framework_object(module)
    for build in (
        lambda: DPSparseVote(raw, **VOTING),
        lambda: DPVote(raw, **VOTING),
        lambda: DPICL(raw, epsilon=2.0, max_new_tokens=2),
    ):
        with pytest.raises(TypeError, match=r"HFTokenModel\.from_pretrained\(path\).*DPKSA\("):
            build()


def test_dprag_adapters_and_plain_models_pass() -> None:
    wrapper = _framework_object("llamaindex_dprag.llms", generate=True)
    assert framework_of(wrapper) is None and check_text_model(wrapper) is wrapper
    assert framework_of(_framework_object("langchain_dprag.models")) is None
    fake = FakeTokenModel([])
    assert check_token_model(fake) is fake
    with pytest.raises(TypeError, match=r"got Text: .*HFTokenModel"):
        check_token_model(Text())  # a text model has no next-token scores


# -- the app's own prompt -----------------------------------------------------------


def _docs(n: int) -> list[ScoredDocument]:
    return [ScoredDocument(f"d{i}", f"note {i}", 0.9 - i / 10) for i in range(n)]


def test_voters_get_the_apps_template_one_voter_each() -> None:
    fake = FakeTokenModel([("", "a")])
    original = DPSparseVote(fake, **VOTING)
    mech = with_context_template(original, APP)
    mech.answer("Who?", _docs(2), rng=0)
    voters, public = fake.prompts[0][:2], fake.prompts[0][2]
    assert sorted(voters) == sorted(
        APP.format(context=f"note {i}", question="Who?") for i in (0, 1)
    )
    assert public == original.public_template.format(question="Who?")  # unchanged
    assert original.template != APP  # the user's mechanism is not modified


def test_ksa_responses_and_murag_inner_get_the_template() -> None:
    text = Text()
    ksa = with_context_template(DPKSA(text, epsilon=5.0, n_docs=2), APP)
    ksa.answer("Who?", _docs(2), rng=0)
    assert APP.format(context="note 0", question="Who?") in text.prompts
    inner = VoteRAG(FakeTokenModel([]), m=2, k=1)
    ledger = InMemoryLedger(budget_per_unit=10.0)
    murag = MuRAG(
        DPSparseVote(FakeTokenModel([]), **{**VOTING, "delta": 0.0, "selection": "exponential"}),
        ledger=ledger,
        tau=0.0,
        epsilon_query=VOTING["epsilon"],
    )
    changed = with_context_template(murag, APP)
    assert changed.inner.template == APP  # type: ignore[attr-defined]
    assert changed.ledger is ledger and murag.inner.template != APP  # type: ignore[attr-defined]
    assert with_context_template(inner, APP).template == APP  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("Q: {question}", "must contain {context}"),
        ("{context} {query}", r"must only use the fields \{context\}, \{question\}"),
        ("{context} only", "must contain {question}"),
    ],
)
def test_a_template_needs_context_and_question(template: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        with_context_template(RAG(Text(), k=1), template)


def test_a_mechanism_without_documents_takes_no_context_template() -> None:
    with pytest.raises(ValueError, match="NonRAG builds no prompt from documents"):
        with_context_template(NonRAG(Text()), APP)
