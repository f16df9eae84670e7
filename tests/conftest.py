"""Shared fixtures: tiny offline transformers models (see tests/tiny_models.py).

torch/transformers are imported inside the fixtures, so tests that do not use
them do not pay for the import.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# gRPC's C core (Milvus Lite's client) logs keepalive GOAWAYs to file descriptor 2 from its
# own threads, at times no test controls: the harness reads that descriptor as a channel
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

SERVER_WIDE_LOCK = Path(tempfile.gettempdir()) / "dprag-test-postgres-server-wide.lock"


@pytest.fixture(autouse=True)
def _server_wide_rights_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    """A PostgreSQL test holds a shared lock; one marked ``server_wide_rights`` holds it
    alone. Such a test grants a role a right over every store of the server for a moment
    (``pg_write_all_data``, ``CREATEROLE``, membership in the owner), during which every
    store rightly refuses to open: no other worker's PostgreSQL test runs meanwhile."""
    if request.node.get_closest_marker("postgres") is None:
        yield
        return
    alone = request.node.get_closest_marker("server_wide_rights") is not None
    with SERVER_WIDE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer (no chat template), pad ``<pad>``, eos ``<eos>``."""
    from tiny_models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_chat_tokenizer() -> Any:
    """The same tokenizer with a Qwen-style chat template."""
    from tiny_models import build_tokenizer

    return build_tokenizer(chat=True)


@pytest.fixture(scope="session")
def tiny_hf_models(tiny_tokenizer: Any) -> dict[str, Any]:
    """Random-init GPT-2, Llama (padded vocab) and Qwen2 causal LMs, float32, eval mode."""
    from tiny_models import build_model

    return {kind: build_model(kind, tiny_tokenizer) for kind in ("gpt2", "llama", "qwen2")}


@pytest.fixture(scope="session")
def tiny_token_model(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> Any:
    """An ``HFTokenModel`` (tiny GPT-2, no chat template): the default real TokenModel."""
    from dprag_core.models.hf import HFTokenModel

    return HFTokenModel(tiny_hf_models["gpt2"], tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_chat_token_model(tiny_chat_tokenizer: Any) -> Any:
    """An ``HFTokenModel`` on a tiny Qwen2 whose tokenizer has a chat template."""
    from tiny_models import build_model

    from dprag_core.models.hf import HFTokenModel

    return HFTokenModel(build_model("qwen2", tiny_chat_tokenizer, seed=1), tiny_chat_tokenizer)


@pytest.fixture(scope="session")
def tiny_text_model(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> Any:
    """An ``HFTextModel`` (greedy) on the tiny Llama."""
    from dprag_core.models.hf import HFTextModel

    return HFTextModel(tiny_hf_models["llama"], tiny_tokenizer)
