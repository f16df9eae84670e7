"""An embedding function of another dimension than the stored vectors is refused when the
LangChain app is built, on every store of the table, before anything is charged; an empty
LanceDB store is refused with the fix instead of an AttributeError.

Before: the chain was built, and the first query was charged, then failed in the store.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from retrieval_audit import UNITS, Recorder, accountant
from store_cases import DIM, LC_KINDS, QUESTION, lc_store, needs_pg, random_rows

from dprag_core.accounting.accountant import CorpusAccountant
from langchain_dprag import DPRAGChain, DPRetriever
from langchain_dprag.dimensions import PROBE, stored_dimension

EMBEDDING_ATTRIBUTE = {  # where each store keeps its embedding function
    "inmemory": "embedding",
    "faiss": "embedding_function",
    "chroma": "_embedding_function",
    "pgvector": "embedding_function",
    "qdrant": "_embeddings",
    "lancedb": "_embedding",
    "milvus": "embedding_func",
}


SEEN: list[str] = []


class Counting(DeterministicFakeEmbedding):
    """A model of another dimension that records (in SEEN) what it was asked to embed."""

    def embed_query(self, text: str) -> list[float]:
        SEEN.append(text)
        return super().embed_query(text)


def _chain(store: Any, budget: CorpusAccountant) -> DPRAGChain:
    return DPRAGChain(vectorstore=store, mechanism=Recorder(UNITS), unit_key="ref",
                      accountant=budget)  # fmt: skip


@pytest.mark.parametrize("kind", LC_KINDS)
def test_an_embedding_of_another_dimension_is_refused_when_built(
    request: pytest.FixtureRequest, kind: str
) -> None:
    pg = request.getfixturevalue("pg_url") if needs_pg(kind) else None
    store = lc_store(kind, random_rows(), pg)
    assert stored_dimension(store) == DIM
    budget = accountant()
    _chain(store, budget)  # the model the vectors were made with: built
    SEEN.clear()
    family = kind.partition("_")[0]
    if family == "pgvector2":  # PGVectorStore (v2) keeps its model in the store it wraps
        store._PGVectorStore__vs.embedding_service = Counting(size=DIM - 3)
    else:
        setattr(store, EMBEDDING_ATTRIBUTE[family], Counting(size=DIM - 3))
    for build in (
        lambda: _chain(store, budget),
        lambda: DPRetriever(vectorstore=store, epsilon=1.0, accountant=budget, k=4),
    ):
        with pytest.raises(ValueError, match=f"{DIM} dimensions, but its embedding function "
                                             f"gives {DIM - 3}"):  # fmt: skip
            build()
    assert budget.queries == 0 and budget.spent_epsilon == 0.0
    assert SEEN == [PROBE, PROBE]  # a public text, once per build: never a question


def test_an_empty_lancedb_store_is_refused_with_the_fix() -> None:
    import lancedb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.vectorstores import LanceDB

    store = LanceDB(
        connection=lancedb.connect(tempfile.mkdtemp(prefix="dprag-lance-")),
        embedding=DeterministicFakeEmbedding(size=DIM),
    )
    budget = accountant()
    with pytest.raises(ValueError, match=r"LanceDB \(empty\): .* no table yet .*add the texts"):
        _chain(store, budget)
    assert budget.queries == 0
    store.add_texts(["A:1 one record"], metadatas=[{"ref": "r1"}])
    assert _chain(store, budget).invoke(QUESTION).epsilon is not None  # now it is built
