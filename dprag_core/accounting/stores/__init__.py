"""Durable storage for corpus budgets and per-unit ledgers: SQLite files, PostgreSQL schemas.

One package for both kinds of budget: exact integer amounts and checked ids
(:mod:`.amounts`), the errors and how they name a store (:mod:`.errors`),
the retries a budget object accepts (:mod:`.retries`), a SQLite file of
stores (:mod:`.sqlite`), PostgreSQL connections with bounded waits
(:mod:`.postgres`) and a PostgreSQL store's schema and grants
(:mod:`.pgschema`). The budgets themselves are
:mod:`dprag_core.accounting.corpus_sqlite`,
:mod:`dprag_core.accounting.corpus_postgres` and
:mod:`dprag_core.accounting.ledger`.

>>> from dprag_core.accounting.stores import LedgerUnavailable, PostgresTimeouts
>>> PostgresTimeouts().statement
10.0
"""

from dprag_core.accounting.stores.errors import LedgerOutcomeUnknown, LedgerUnavailable
from dprag_core.accounting.stores.postgres import PostgresTimeouts

__all__ = ["LedgerOutcomeUnknown", "LedgerUnavailable", "PostgresTimeouts"]
