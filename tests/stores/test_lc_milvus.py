"""langchain-milvus's ``Milvus`` on Milvus Lite: what is refused, with the fix, before any charge.

The store rows, filters, cells, adversarial cases and audits run in the shared
suites (``milvus_*`` kinds of tests/stores/store_cases.py and cell_stores.py);
here: an approximate index (langchain-milvus's default ``AUTOINDEX``, an
``HNSW``) and a store with no collection yet are refused when the chain is
built, naming the fix, and the registration reads the collection's size,
dimension and primary keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from milvus_stores import lc_milvus
from retrieval_audit import UNITS, Recorder, accountant
from store_cases import DIM, QUESTION, TableEmbeddings, _documents, random_rows

from langchain_dprag import DPRAGChain
from langchain_dprag.stores import STORES, read_store
from langchain_dprag.vectorstores import open_store


@pytest.mark.parametrize("index", ["AUTOINDEX", "HNSW"])
def test_an_approximate_index_is_refused_with_the_fix(tmp_path: Path, index: str) -> None:
    rows = random_rows(8)
    store = lc_milvus(tmp_path, TableEmbeddings(rows), _documents(rows)[0], index=index)
    budget = accountant()
    with pytest.raises(ValueError, match=rf"{index} index is approximate.*index_type.*FLAT"):
        DPRAGChain(vectorstore=store, mechanism=Recorder(UNITS), unit_key="ref",
                   accountant=budget)  # fmt: skip
    with pytest.raises(ValueError, match="approximate"):
        open_store(store, exact_search=True)  # a declaration does not override what is read
    assert budget.queries == 0 and budget.spent_epsilon == 0.0


def test_a_store_without_a_collection_is_refused_with_the_fix(tmp_path: Path) -> None:
    store = lc_milvus(tmp_path, TableEmbeddings(random_rows(4)))
    with pytest.raises(ValueError, match=r"does not exist yet.*add the texts first"):
        open_store(store)


def test_count_dimension_and_ids_are_read_from_the_collection(tmp_path: Path) -> None:
    rows = random_rows(6)
    docs = _documents(rows)[0]
    store = lc_milvus(tmp_path, TableEmbeddings(rows), docs, metric="IP")
    assert (STORES.count(store), STORES.dimension(store)) == (6, DIM)
    reading = read_store(store)
    assert reading.facts.metric == "inner_product" and reading.own_search_exact
    found = reading.searcher()(QUESTION, 6)
    assert sorted(str(d.id) for d, _ in found) == sorted(str(d.id) for d in docs)
