"""LlamaIndex's ``MilvusVectorStore`` on Milvus Lite: the refusals, with the fix, before a charge.

The store rows, cells, adversarial cases and audits run in the shared suites
(``milvus_*`` kinds of tests/stores/store_cases.py and cell_stores.py); here: an
approximate index and a collection that does not exist yet are refused when the
engine is built, naming the fix, and the registration reads the collection's
size and dimension.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from milvus_stores import li_milvus
from retrieval_audit import UNITS, Recorder, accountant
from store_cases import DIM, li_embedding, li_nodes, random_rows

from llamaindex_dprag import DPQueryEngine
from llamaindex_dprag.stores import STORES, read_vector_store


def _index(store: object, n: int) -> object:
    from llama_index.core import StorageContext, VectorStoreIndex

    storage = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex(li_nodes(random_rows(n)), storage_context=storage,
                            embed_model=li_embedding())  # fmt: skip


@pytest.mark.parametrize("index", ["HNSW", "IVF_FLAT"])
def test_an_approximate_index_is_refused_with_the_fix(tmp_path: Path, index: str) -> None:
    budget = accountant()
    built = _index(li_milvus(tmp_path, DIM, index=index), 8)
    with pytest.raises(ValueError, match=rf"{index} index is approximate.*index_type.*FLAT"):
        DPQueryEngine.from_index(built, mechanism=Recorder(UNITS), budget=budget)
    with pytest.raises(ValueError, match="approximate"):
        DPQueryEngine.from_index(built, mechanism=Recorder(UNITS), budget=budget,
                                 exact_search=True)  # fmt: skip
    assert budget.queries == 0 and budget.spent_epsilon == 0.0


def test_a_collection_that_does_not_exist_yet_is_refused(tmp_path: Path) -> None:
    store = li_milvus(tmp_path, DIM)
    store.client.drop_collection(store.collection_name)
    assert "does not exist yet" in str(read_vector_store(store).facts.refused)


def test_count_and_dimension_are_read_from_the_collection(tmp_path: Path) -> None:
    store = li_milvus(tmp_path, DIM, metric="L2")
    _index(store, 5)
    assert (STORES.count(store), STORES.dimension(store)) == (5, DIM)
    facts = read_vector_store(store).facts
    assert facts.metric == "squared_l2" and facts.exact
