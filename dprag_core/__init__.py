"""dprag_core: framework-neutral differentially private RAG.

Imports only numpy and dp_accounting; the transformers backend
(:mod:`dprag_core.models.hf`) and the framework adapters load lazily.

The face holds what an app builds with: the budget and its durable stores, the
pipeline, the query, document and answer types, and the errors an app catches. The
mechanisms are in :mod:`dprag_core.algorithms` (their base ``Mechanism`` too),
the accountants' base and the PostgreSQL budget in :mod:`dprag_core.accounting`,
the data owner's debug switch in :mod:`dprag_core.errors`.

>>> import dprag_core
>>> dprag_core.Budget(1.0).epsilon
1.0
"""

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.corpus_sqlite import SQLiteCorpusAccountant
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PrivateDataError
from dprag_core.pipeline import PrivateRAG
from dprag_core.query_ids import Query
from dprag_core.retrieval.documents import ScoredDocument

__all__ = [
    "Budget",
    "DPAnswer",
    "InMemoryCorpusAccountant",
    "PrivacyBudgetExhausted",
    "PrivateDataError",
    "PrivateRAG",
    "Query",
    "SQLiteCorpusAccountant",
    "ScoredDocument",
]
__version__ = "0.1.0"
