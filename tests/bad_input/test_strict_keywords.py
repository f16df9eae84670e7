"""A misspelt keyword is refused by every public constructor of the core app and both adapters.

Each row passes one typo (``unit_kye=``, ``public_fallbak=``, ``source_id=``, ...)
to a constructor or factory that users call, and expects a ``TypeError`` naming
the typo and the nearest valid keyword, with nothing charged. Before issue 25
item 4, ``DPRAGChain(unit_kye="patient")`` ran with ``unit_key=None`` (each
chunk its own privacy unit: a weaker guarantee than configured, silently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from toy_mechanisms import ToyMechanism

from dprag_core import Budget, InMemoryCorpusAccountant, PrivateRAG, ScoredDocument
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.datastore import DPSimHashDatastore
from dprag_core.retrieval.capabilities import HonoursK
from langchain_dprag import (
    DPDatastoreClassifier,
    DPRAGChain,
    DPRAGOutput,
    DPRetriever,
    LangChainTextModel,
    condense_question,
    condensed_chat,
)
from llamaindex_dprag import (
    DPDatastoreQueryEngine,
    DPQueryEngine,
    DPThresholdPostprocessor,
    LlamaIndexTextModel,
    PrivacyBudgetPostprocessor,
)


@HonoursK
def retriever(question: str, k: int) -> list[ScoredDocument]:
    return [ScoredDocument(f"d{i}", "text", 0.9 - i / 10) for i in range(k)]


class Parts:
    """One of each thing a constructor needs, and the budget no row may touch."""

    def __init__(self) -> None:
        self.acc = InMemoryCorpusAccountant(Budget(5.0, 1e-5))
        self.store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        self.store.add_texts(["a fact", "another fact"])
        self.index = VectorStoreIndex.from_documents(
            [Document(text="a fact"), Document(text="another fact")],
            embed_model=MockEmbedding(embed_dim=8),
        )
        keys = np.random.default_rng(0).normal(size=(20, 4))
        self.release = DPSimHashDatastore.release(
            keys, (keys[:, 0] > 0).astype(int), num_classes=2, epsilon=1.0, tables=2, bits=3, rng=0
        )

    def chain(self, **kw: Any) -> DPRAGChain:
        return DPRAGChain(
            mechanism=ToyMechanism(k=2), vectorstore=self.store, accountant=self.acc, **kw
        )

    def engine(self, **kw: Any) -> DPQueryEngine:
        return DPQueryEngine.from_index(
            self.index, mechanism=ToyMechanism(k=2), budget=self.acc, **kw
        )


Row = tuple[str, Callable[[Parts], object], str, str]

ROWS: list[Row] = [
    (
        "rag-fallback",
        lambda p: PrivateRAG(ToyMechanism(k=2), retriever, accountant=p.acc, public_fallbak=True),
        "public_fallbak",
        "public_fallback",
    ),
    (
        "rag-tokens",
        lambda p: PrivateRAG(ToyMechanism(k=2), retriever, accountant=p.acc, max_question_token=8),
        "max_question_token",
        "max_question_tokens",
    ),
    ("chain-unit", lambda p: p.chain(unit_kye="patient"), "unit_kye", "unit_key"),
    ("chain-fallback", lambda p: p.chain(public_fallbak=True), "public_fallbak", "public_fallback"),
    (
        "chain-honours",
        lambda p: p.chain(retriever_honors_k=True),
        "retriever_honors_k",
        "retriever_honours_k",
    ),
    ("output", lambda p: DPRAGOutput(answr="x"), "answr", "answer"),
    (
        "retriever-unit",
        lambda p: DPRetriever(vectorstore=p.store, epsilon=1.0, accountant=p.acc, unit_kye="u"),
        "unit_kye",
        "unit_key",
    ),
    (
        "retriever-fetch",
        lambda p: DPRetriever(vectorstore=p.store, epsilon=1.0, accountant=p.acc, fetchk=9),
        "fetchk",
        "fetch_k",
    ),
    ("engine-ids", lambda p: p.engine(source_id=True), "source_id", "source_ids"),
    (
        "engine-fallback",
        lambda p: p.engine(public_fallbak=True),
        "public_fallbak",
        "public_fallback",
    ),
    ("engine-unit", lambda p: p.engine(unit_kye="u"), "unit_kye", "unit_key"),
    ("engine-filters", lambda p: p.engine(filter=None), "filter", "filters"),
    (
        "engine-retriever",
        lambda p: DPQueryEngine.from_retriever(
            p.index.as_retriever(),
            mechanism=ToyMechanism(k=2),
            budget=p.acc,
            returns_everthing=True,
        ),
        "returns_everthing",
        "returns_everything",
    ),
    (
        "engine-init",
        lambda p: DPQueryEngine(
            mechanism=ToyMechanism(k=2), source=p.engine()._source, budgte=p.acc
        ),
        "budgte",
        "budget",
    ),
    (
        "chat-mode",
        lambda p: p.engine().as_chat_engine(chat_mod="context", llm=MockLLM()),
        "chat_mod",
        "chat_mode",
    ),
    (
        "post-unit",
        lambda p: DPThresholdPostprocessor(
            epsilon=1.0, score_range=(0, 1), budget=p.acc, unit_kye="u"
        ),
        "unit_kye",
        "unit_key",
    ),
    (
        "ledger-post",
        lambda p: PrivacyBudgetPostprocessor(
            ledger=InMemoryLedger(budget_per_unit=2.0), epsilon_qery=1.0, tau=0.5, k=2
        ),
        "epsilon_qery",
        "epsilon_query",
    ),
    (
        "condense",
        lambda p: condense_question(FakeListChatModel(responses=["q"]), input_kye="q"),
        "input_kye",
        "input_key",
    ),
    (
        "condensed-chat",
        lambda p: condensed_chat(
            p.chain(output="text"), FakeListChatModel(responses=["q"]), history_kye="h"
        ),
        "history_kye",
        "history_key",
    ),
    (
        "lc-model",
        lambda p: LangChainTextModel(FakeListChatModel(responses=["a"]), max_concurency=2),
        "max_concurency",
        "max_concurrency",
    ),
    (
        "li-model",
        lambda p: LlamaIndexTextModel(MockLLM(), max_tokens_kwargs="n"),
        "max_tokens_kwargs",
        "max_tokens_kwarg",
    ),
    (
        "lc-datastore",
        lambda p: DPDatastoreClassifier(
            store=p.release,
            embeddings=DeterministicFakeEmbedding(size=4),
            labels=["a", "b"],
            embedding=None,
        ),
        "embedding",
        "embeddings",
    ),
    (
        "li-datastore",
        lambda p: DPDatastoreQueryEngine(
            store=p.release, embed_model=MockEmbedding(embed_dim=4), labels=["a", "b"], label=["a"]
        ),
        "label",
        "labels",
    ),
]


@pytest.fixture(scope="module")
def parts() -> Parts:
    return Parts()


@pytest.mark.parametrize(("case", "build", "typo", "nearest"), ROWS, ids=[r[0] for r in ROWS])
def test_a_misspelt_keyword_names_the_nearest_and_spends_nothing(
    parts: Parts, case: str, build: Callable[[Parts], object], typo: str, nearest: str
) -> None:
    with pytest.raises(TypeError) as info:
        build(parts)
    message = str(info.value)
    assert f"unknown keyword argument {typo!r}" in message, message
    assert f"did you mean {nearest!r}?" in message, message
    assert parts.acc.queries == 0 and parts.acc.spent_epsilon == 0.0


def test_the_same_constructors_accept_the_right_keywords(parts: Parts) -> None:
    """Positive control: the rows' constructors work once the typo is fixed."""
    assert parts.chain(unit_key="patient").unit_key == "patient"
    assert parts.engine(source_ids=True).source_ids is True
    assert DPRAGOutput(answer="x").answer == "x"
    assert PrivateRAG(ToyMechanism(k=2), retriever, accountant=parts.acc, max_question_tokens=8)


def test_openai_compat_from_pretrained_names_its_own_keywords_too() -> None:
    """The factory's own keywords and the endpoint's are the valid ones (never ``self``)."""
    from dprag_core.models.openai_compat import OpenAICompatModel

    def build(**typo: Any) -> object:
        return OpenAICompatModel.from_pretrained("http://127.0.0.1:9/v1", "tok", model="m", **typo)

    with pytest.raises(TypeError, match="did you mean 'lookahead_tokens'"):
        build(lookahed_tokens=2)
    with pytest.raises(TypeError, match="did you mean 'check_tokenizer'"):
        build(check_tokeniser=False)
    with pytest.raises(TypeError, match="valid keywords: ") as info:
        build(zzz=1)
    valid = str(info.value).split("valid keywords: ")[1].split(", ")
    assert "self" not in valid and {"lookahead_tokens", "eos_token_ids", "api_key"} <= set(valid)
