"""A new user's typical mistakes on the documented paths get an error that names the fix.

Issue 27 item 5: no bare framework error (a pydantic ``ValidationError``, an
unexplained ``TypeError``, a ``ModuleNotFoundError`` without the extra to
install) reaches the user of README.md, docs/langchain.md or docs/llamaindex.md,
and nothing is charged. Each case was found by trying the documented paths.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from pydantic import ValidationError
from toy_mechanisms import ToyMechanism

from dprag_core import Budget, InMemoryCorpusAccountant
from langchain_dprag import DPRAGChain, DPRetriever
from llamaindex_dprag import DPQueryEngine


@pytest.fixture
def acc() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(5.0, 1e-5))


@pytest.fixture
def store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_texts(["a fact", "another fact"])
    return store


def refused(build: Callable[[], object], kind: type[Exception]) -> str:
    with pytest.raises(Exception) as info:
        build()
    assert type(info.value) is kind, repr(info.value)  # a ValidationError is a ValueError too
    assert not isinstance(info.value, ValidationError)
    return str(info.value)


def test_a_chain_option_out_of_its_range_names_the_values(
    store: InMemoryVectorStore, acc: InMemoryCorpusAccountant
) -> None:
    message = refused(
        lambda: DPRAGChain(
            mechanism=ToyMechanism(k=2), vectorstore=store, accountant=acc, output="txt"
        ),
        ValueError,
    )
    assert message == "DPRAGChain: output must be 'object', 'text' or 'dict', got 'txt'"
    message = refused(
        lambda: DPRAGChain(
            mechanism=ToyMechanism(k=2), vectorstore=store, accountant=acc, input_key=3
        ),
        TypeError,
    )
    assert message == "DPRAGChain: input_key must be a valid string, got int"
    assert acc.spent_epsilon == 0.0


def test_a_wrong_choice_is_shown_only_when_it_is_a_short_word(
    store: InMemoryVectorStore, acc: InMemoryCorpusAccountant
) -> None:
    """A document (or a long text) passed by mistake is named by its type, never quoted."""
    secret = "qx81canary-lorenzo's record"
    for wrong, shown in ((LCDocument(page_content=secret), "Document"), (secret * 3, "str")):
        message = refused(
            lambda wrong=wrong: DPRAGChain(  # type: ignore[misc]
                mechanism=ToyMechanism(k=2), vectorstore=store, accountant=acc, output=wrong
            ),
            ValueError,
        )
        assert message == f"DPRAGChain: output must be 'object', 'text' or 'dict', got {shown}"
    message = refused(lambda: DPRAGChain(vectorstore=store, accountant=acc), TypeError)  # type: ignore[call-arg]
    assert message == "DPRAGChain needs mechanism=..., a required keyword argument"


@pytest.mark.parametrize("kind", ["chain", "retriever"])
def test_a_bare_budget_or_no_budget_says_how_to_make_one(
    kind: str, store: InMemoryVectorStore
) -> None:
    def build(accountant: object) -> object:
        if kind == "chain":
            return DPRAGChain(mechanism=ToyMechanism(k=2), vectorstore=store, accountant=accountant)
        return DPRetriever(vectorstore=store, epsilon=1.0, accountant=accountant)

    message = refused(lambda: build(Budget(5.0)), TypeError)
    assert message.startswith("accountant must be a CorpusAccountant, got Budget")
    assert 'SQLiteCorpusAccountant(name="<corpus>"' in message
    if kind == "chain":  # the chain's own check, raised as it is (pydantic wrapped it)
        message = refused(lambda: build(None), ValueError)
        assert "charges a corpus budget on every query: pass accountant=" in message


def test_positional_arguments_are_refused_naming_the_keywords(
    store: InMemoryVectorStore, acc: InMemoryCorpusAccountant
) -> None:
    message = refused(lambda: DPRAGChain(store, mechanism=ToyMechanism(k=2)), TypeError)  # type: ignore[misc]
    assert message.startswith("DPRAGChain takes keyword arguments only (")
    assert "vectorstore=..." in message and "accountant=..." in message


def test_a_misspelt_pick_is_refused_and_an_input_key_passes(
    store: InMemoryVectorStore, acc: InMemoryCorpusAccountant
) -> None:
    chain = DPRAGChain(mechanism=ToyMechanism(k=2), vectorstore=store, accountant=acc)
    message = refused(lambda: chain.pick("answr"), ValueError)
    assert "no key 'answr'; did you mean 'answer'?" in message
    refused(lambda: chain.pick(["epsilon", "delat"]), ValueError)
    assert chain.pick("answer").invoke("a question") == "2 candidates"
    picked = chain.pick(["answer", "chat_history"]).invoke(
        {"question": "a question", "chat_history": ["hi"]}
    )
    assert picked == {"answer": "2 candidates", "chat_history": ["hi"]}


def test_a_query_that_is_not_text_is_refused_before_anything_is_charged(
    acc: InMemoryCorpusAccountant,
) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text="a fact"), Document(text="another fact")],
        embed_model=MockEmbedding(embed_dim=8),
    )
    engine = DPQueryEngine.from_index(index, mechanism=ToyMechanism(k=2), budget=acc)
    fix = "query takes a question string or a QueryBundle (DPQueryBundle(question, query_id="
    assert refused(lambda: engine.query(5), TypeError).startswith(fix)  # type: ignore[arg-type]
    assert refused(lambda: asyncio.run(engine.aquery(["q"])), TypeError).startswith(fix)  # type: ignore[arg-type]
    assert acc.spent_epsilon == 0.0


@pytest.mark.parametrize(
    ("module", "blocked", "call", "extra"),
    [
        ("langchain_dprag", "langchain_core", None, "langchain"),
        ("llamaindex_dprag", "llama_index", None, "llamaindex"),
        ("dprag_core.models.hf", "torch", None, "hf"),
        ("dprag_core.models.endpoint", "httpx", None, "server"),
        ("langchain_dprag.vectorstores", "faiss", "faiss_inner_product", "langchain-faiss,faiss"),
        ("dprag_core.eval.embeddings", "sentence_transformers", "MiniLMEmbedder", "demo"),
        ("dprag_core.retrieval.faiss_corpus", "faiss", "FaissCorpus", "faiss"),
        ("llamaindex_dprag.vector_stores", "faiss", "cosine_faiss_store", "llamaindex,faiss"),
        ("dprag_core.accounting.stores.postgres", "psycopg", "psycopg_module", "postgres"),
    ],
)
def test_a_missing_extra_names_the_pip_install(
    module: str, blocked: str, call: str | None, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n == blocked or n.startswith(f"{blocked}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)  # import of it fails, as when not installed
    if call is None:
        monkeypatch.delitem(sys.modules, module, raising=False)

        def run() -> object:
            return importlib.import_module(module)
    else:
        function = getattr(importlib.import_module(module), call)

        def run() -> object:
            if call == "faiss_inner_product":
                return function([], DeterministicFakeEmbedding(size=4))
            if call in ("FaissCorpus", "cosine_faiss_store"):
                return function(dim=4)
            return function()

    message = refused(run, ModuleNotFoundError)
    fix = f"needs {blocked}, which is not installed: pip install 'dprag[{extra}]'"
    assert message.endswith(fix), message
