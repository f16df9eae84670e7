"""Every package face is pinned: its ``__all__`` is exactly the list below.

As LangChain's partner packages do (``tests/unit_tests/test_imports.py``), a
name joins or leaves a package's face only by editing this table, so the public
API cannot grow or shrink by accident. A face holds what users build with;
helpers stay importable from their own modules. A package that starts
exporting names without a row here fails too.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def words(text: str) -> list[str]:
    """A face as written below: its names in sorted order, separated by white space."""
    return text.split()


FACES: dict[str, list[str]] = {
    "dprag_core": words("""
        Budget DPAnswer InMemoryCorpusAccountant PrivacyBudgetExhausted PrivateDataError
        PrivateRAG Query SQLiteCorpusAccountant ScoredDocument
    """),
    "dprag_core.accounting": words("""
        BOUNDS BudgetStatus ChargeRecord CompositionCount CorpusAccountant DEFAULT_ORDERS
        InMemoryCorpusAccountant LedgerStatus MAX_COUNT PostgresCorpusAccountant
        SQLiteCorpusAccountant advanced_composition approximate_rdp_to_dp bounded_range_rdp
        composition_fits gaussian_rdp max_compositions max_rdp_compositions
        optimal_composition per_token_epsilon pure_dp_rdp rdp_composition rdp_to_dp
        sequential_composition
    """),
    "dprag_core.accounting.ledger": words("""
        AuditEntry ChargeResult InMemoryLedger Ledger LedgerOutcomeUnknown LedgerStatus
        LedgerUnavailable PostgresLedger PostgresTimeouts SQLiteLedger charge_active
    """),
    "dprag_core.accounting.stores": words(
        "LedgerOutcomeUnknown LedgerUnavailable PostgresTimeouts"
    ),
    "dprag_core.algorithms": words("""
        AnswerVote DPAnswerVote DPICL DPKSA DPSparseVote DPVote KSA Mechanism MuRAG MuRAGAda
        NaiveMulti NonRAG RAG VoteRAG
    """),
    "dprag_core.datastore": words(
        "DPSimHashDatastore SimHashIndex embedding_keys token_distribution_keys"
    ),
    "dprag_core.mechanisms": words("""
        AboveThreshold RngLike SparseVoteRule discrete_laplace exponential_mechanism
        exponential_probabilities gaussian gumbel laplace limited_domain_top1 make_rng
    """),
    "dprag_core.models": words("""
        LogprobModel LogprobSession LookaheadModel LookaheadSession PerPromptTextModel TextModel
        TokenModel
        TokenSession
    """),
    "dprag_core.retrieval": words("""
        DPThreshold HonoursK PADDING_PREFIX Retriever ScoredDocument partition_voters
        retrieve_above stable_id
    """),
    "langchain_dprag": words("""
        COSINE COSINE_DISTANCE DPDatastoreClassifier DPRAGChain DPRAGOutput DPRetriever
        L2_UNIT LangChainTextModel NEGATIVE_INNER_PRODUCT NormalizedEmbeddings RELEVANCE
        SQUARED_L2_UNIT ScoreFunction condense_question condensed_chat faiss_inner_product
    """),
    "llamaindex_dprag": words("""
        COSINE_RANGE DPAsyncStreamingResponse DPDatastoreQueryEngine DPQueryBundle
        DPQueryEndEvent DPQueryEngine DPQueryStartEvent DPResponse DPStreamingResponse
        DPThresholdPostprocessor EngineOptions LlamaIndexTextModel
        PrivacyBudgetPostprocessor cosine_faiss_store
    """),
}


def packages() -> list[str]:
    """Every package (a folder with ``__init__.py``) of the three import packages."""
    found = []
    for top in ("dprag_core", "langchain_dprag", "llamaindex_dprag"):
        found.append(top)
        found += [
            info.name for info in pkgutil.walk_packages([str(ROOT / top)], f"{top}.") if info.ispkg
        ]
    return sorted(found)


@pytest.mark.parametrize("package", sorted(FACES))
def test_the_face_is_exactly_the_pinned_list(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == FACES[package]
    assert len(set(module.__all__)) == len(module.__all__), f"{package}.__all__ repeats a name"


@pytest.mark.parametrize("package", sorted(FACES))
def test_every_pinned_name_is_importable_from_the_face(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert sorted(set(namespace) - {"__builtins__"}) == FACES[package]


def test_every_package_that_exports_names_is_pinned() -> None:
    exporting = {p for p in packages() if hasattr(importlib.import_module(p), "__all__")}
    assert exporting == set(FACES)
