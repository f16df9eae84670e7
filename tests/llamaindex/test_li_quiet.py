"""A zero embedding in a real ``SimpleVectorStore`` makes numpy warn ("invalid value
encountered", a ``RuntimeWarning``) when the store is searched: shown for a direct query
(the positive control), never from the query engine's private section."""

from __future__ import annotations

import warnings

from li_helpers import DIM, QUESTION, HashEmbedding, corpus_nodes
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from llamaindex_dprag import DPQueryEngine


def test_a_zero_embedding_warns_nothing_from_inside() -> None:
    nodes = [*corpus_nodes(), TextNode(id_="x", text="zero", embedding=[0.0] * DIM)]
    index = VectorStoreIndex(nodes=nodes, embed_model=HashEmbedding())
    budget = InMemoryCorpusAccountant(Budget(10.0, 1e-3))
    engine = DPQueryEngine.from_index(index, mechanism=ToyMechanism(k=3), budget=budget)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        index.as_retriever(similarity_top_k=3).retrieve(QUESTION)
        control = [str(w.message) for w in seen]
        seen.clear()
        engine.query(QUESTION)
    assert control and "invalid value" in control[0]
    assert [str(w.message) for w in seen] == []
