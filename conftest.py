"""Every test, doctest and subprocess it starts keeps its budgets in a folder of its own.

Budgets opened by name, and the register of store names
(:mod:`dprag_core.accounting.stores.places`), live in the per-user budget
directory; the suite must never write to the user's own, and one test's
stores must not clash with another's names.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dprag_core.accounting.stores.places import BUDGET_DIR_ENV


def pytest_configure(config: pytest.Config) -> None:
    """Before any fixture (module-scoped ones too): a budget directory for this process."""
    os.environ[BUDGET_DIR_ENV] = tempfile.mkdtemp(prefix="dprag-test-budgets-")


@pytest.fixture(autouse=True)
def budget_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh budget directory for each test (and each doctest)."""
    folder = tmp_path_factory.mktemp("budgets")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BUDGET_DIR_ENV, str(folder))
        yield folder
