"""Per-privacy-unit budget ledgers for multi-query DP (MuRAG, docs/design.md §5).

``charge(query_id, units, cost)`` debits every unit or none (atomically, also
across processes for the SQLite and PostgreSQL backends); ``remaining``,
``active``, ``audit_log``, ``total_spent`` and ``status`` read the state.
Unknown units start with ``budget_per_unit``. :class:`SQLiteLedger` is the
default persistent backend; :class:`PostgresLedger` imports psycopg lazily.
Both keep their data in :mod:`dprag_core.accounting.stores`.

>>> led = InMemoryLedger(budget_per_unit=10.0)
>>> all(led.charge(f"q{i}", ["doc"], 0.1).granted for i in range(100))
True
>>> led.remaining(["doc"]), led.charge("q100", ["doc"], 0.1).granted
({'doc': 0.0}, False)
"""

from dprag_core.accounting.ledger.active import charge_active
from dprag_core.accounting.ledger.base import AuditEntry, ChargeResult, Ledger
from dprag_core.accounting.ledger.memory import InMemoryLedger
from dprag_core.accounting.ledger.postgres import PostgresLedger
from dprag_core.accounting.ledger.sqlite import SQLiteLedger
from dprag_core.accounting.status import LedgerStatus
from dprag_core.accounting.stores.errors import LedgerOutcomeUnknown, LedgerUnavailable
from dprag_core.accounting.stores.postgres import PostgresTimeouts

__all__ = [
    "AuditEntry",
    "ChargeResult",
    "InMemoryLedger",
    "Ledger",
    "LedgerOutcomeUnknown",
    "LedgerStatus",
    "LedgerUnavailable",
    "PostgresLedger",
    "PostgresTimeouts",
    "SQLiteLedger",
    "charge_active",
]
