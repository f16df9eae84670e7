"""Fixtures of the differential harness (tests/differential/test_differential_*.py).

The harness reuses the helpers of the adapter and store tests (lc_support,
li_helpers, store_cases): their folders go on ``sys.path`` here, as pytest puts
a test folder there for its own tests. PostgreSQL with pgvector is the store
tests' server (tests/stores/conftest.py: ``pg_url``), started only when a
pgvector cell runs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent.parent
for _folder in ("langchain", "llamaindex", "stores"):
    if str(TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(TESTS / _folder))


def _stores_conftest() -> Any:
    spec = importlib.util.spec_from_file_location(
        "stores_conftest_for_differential", TESTS / "stores" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pg_url = _stores_conftest().pg_url


@pytest.fixture(scope="session")
def lab(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> Iterator[Any]:
    """What every cell builds on: the tiny models, the reader (loaded once) and its tokenizer."""
    from worlds import Lab

    yield Lab(tiny_hf_models, tiny_tokenizer)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """torch on one thread: the models are tiny, and two threads on a busy machine wait on
    each other (a tiny forward took 35 times longer with two)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
