"""A NaN embedding in a real ``InMemoryVectorStore`` makes LangChain warn
("NaN found in input arrays", a ``RuntimeWarning``) when the store is searched: shown for a
direct search (the positive control), never from a chain's or a retriever's private section."""

from __future__ import annotations

import warnings

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, HashingEmbeddings, corpus
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.budget import Budget
from langchain_dprag import DPRAGChain, DPRetriever


class NaNFor(HashingEmbeddings):
    """NaN for a text with "NAN" in it (a broken embedding call)."""

    def embed_query(self, text: str) -> list[float]:
        return [float("nan")] * self.dim if "NAN" in text else super().embed_query(text)


def test_a_nan_embedding_warns_nothing_from_inside() -> None:
    store = InMemoryVectorStore(NaNFor())
    store.add_documents([*corpus(), Document(page_content="NAN record", id="x")])
    budget = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    chain = DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget)
    retriever = DPRetriever(
        vectorstore=store, ledger=InMemoryLedger(budget_per_unit=9.0), tau=0.0, epsilon_query=1.0
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        store.similarity_search_with_score(QUESTION, k=3)
        control = [str(w.message) for w in seen]
        seen.clear()
        chain.invoke(QUESTION)
        list(chain.stream(QUESTION))
        retriever.invoke(QUESTION)
    assert control and "NaN found" in control[0]
    assert [str(w.message) for w in seen] == []
