"""Privacy accounting: composition bounds, RDP curves, calibration, the corpus accountant.

>>> from dprag_core.accounting import max_compositions
>>> from dprag_core.budget import Budget
>>> max_compositions(Budget(0.1), Budget(10.0, 1e-6)).count
346
"""

from dprag_core.accounting.accountant import CorpusAccountant, InMemoryCorpusAccountant
from dprag_core.accounting.calibration import per_token_epsilon
from dprag_core.accounting.composition import (
    BOUNDS,
    MAX_COUNT,
    CompositionCount,
    advanced_composition,
    composition_fits,
    max_compositions,
    max_rdp_compositions,
    optimal_composition,
    rdp_composition,
    sequential_composition,
)
from dprag_core.accounting.corpus_postgres import PostgresCorpusAccountant
from dprag_core.accounting.corpus_sqlite import SQLiteCorpusAccountant
from dprag_core.accounting.rdp import (
    DEFAULT_ORDERS,
    approximate_rdp_to_dp,
    bounded_range_rdp,
    gaussian_rdp,
    pure_dp_rdp,
    rdp_to_dp,
)
from dprag_core.accounting.status import BudgetStatus, ChargeRecord, LedgerStatus

__all__ = [
    "BOUNDS",
    "DEFAULT_ORDERS",
    "MAX_COUNT",
    "BudgetStatus",
    "ChargeRecord",
    "CompositionCount",
    "CorpusAccountant",
    "InMemoryCorpusAccountant",
    "LedgerStatus",
    "PostgresCorpusAccountant",
    "SQLiteCorpusAccountant",
    "advanced_composition",
    "approximate_rdp_to_dp",
    "bounded_range_rdp",
    "composition_fits",
    "gaussian_rdp",
    "max_compositions",
    "max_rdp_compositions",
    "optimal_composition",
    "per_token_epsilon",
    "pure_dp_rdp",
    "rdp_composition",
    "rdp_to_dp",
    "sequential_composition",
]
