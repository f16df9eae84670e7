"""dprag_core: framework-neutral differentially private RAG.

Imports only numpy and dp_accounting; the transformers backend
(:mod:`dprag_core.models.hf`) and the framework adapters load lazily.

>>> import dprag_core
>>> dprag_core.Budget(1.0).epsilon
1.0
"""

from dprag_core.accounting.accountant import CorpusAccountant, InMemoryCorpusAccountant
from dprag_core.accounting.corpus_sqlite import SQLiteCorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.errors import PrivateDataError, reveal_private_errors
from dprag_core.pipeline import PrivateRAG
from dprag_core.retrieval.documents import ScoredDocument

__all__ = [
    "Budget",
    "CorpusAccountant",
    "DPAnswer",
    "InMemoryCorpusAccountant",
    "Mechanism",
    "PrivacyBudgetExhausted",
    "PrivateDataError",
    "PrivateRAG",
    "SQLiteCorpusAccountant",
    "ScoredDocument",
    "reveal_private_errors",
]
__version__ = "0.1.0"
