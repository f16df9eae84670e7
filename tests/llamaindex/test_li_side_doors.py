"""CANARY per side door around LlamaIndex LLM calls (DP-KSA's prompts hold the documents).

Provider DEBUG loggers (the engine's filter covered only ``llama_index.*``),
the global handler (``set_global_handler("simple")`` prints every LLM prompt),
and the traceback of an error (``capture_locals``, frames, cause, context).
Each has a positive control (a plain LlamaIndex call leaks) and the DP engine
showing nothing (the global handler was already covered by the callback guard:
its test keeps it so); the budget is required, and checks come before the charge.
"""

from __future__ import annotations

import logging
from typing import Any

import llama_index.core
import pytest
from li_helpers import CANARY, QUESTION, FailingLLM, QuestionLLM, leaks
from llama_index.core.base.llms.types import CompletionResponse
from private_frames import reachable_text
from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms.ksa import DPKSA
from dprag_core.budget import Budget
from dprag_core.errors import PrivateDataError, reveal_private_errors
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel
from llamaindex_dprag._quiet import PrivateStageError


class LoggingLLM(QuestionLLM):
    """Logs its request at DEBUG the way the openai client does."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        logging.getLogger("openai._base_client").debug("Request options: %s", prompt)
        logging.getLogger("httpcore.http11").debug("send_request_body %s", prompt)
        return super().complete(prompt, formatted, **kwargs)


def engine(index: Any, llm: Any, **kw: Any) -> DPQueryEngine:
    model = LlamaIndexTextModel(llm, max_concurrency=1)
    kw.setdefault("budget", InMemoryCorpusAccountant(Budget(100.0, 0.5)))
    return DPQueryEngine.from_index(index, mechanism=DPKSA(model, epsilon=5.0, n_docs=4), **kw)


def test_provider_debug_loggers(index: Any, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    LoggingLLM().complete(f"Context: {CANARY}")
    assert CANARY in caplog.text
    caplog.clear()
    engine(index, LoggingLLM()).query(QUESTION)
    "".join(engine(index, LoggingLLM(), streaming=True).query(QUESTION).response_gen)  # type: ignore[union-attr]
    assert leaks(caplog.text) == [] and "Request options" not in caplog.text


def test_global_handler(index: Any, capsys: Any) -> None:
    llama_index.core.set_global_handler("simple")
    try:
        QuestionLLM().complete(f"Context: {CANARY}")
        assert CANARY in capsys.readouterr().out
        engine(index, QuestionLLM()).query(QUESTION)
        assert CANARY not in capsys.readouterr().out
    finally:
        llama_index.core.global_handler = None


@pytest.mark.parametrize("streaming", [False, True])
def test_errors_hold_no_private_frame(index: Any, streaming: bool) -> None:
    dp = engine(index, FailingLLM(), streaming=streaming)
    with pytest.raises(PrivateDataError) as info:
        response = dp.query(QUESTION)
        "".join(response.response_gen)  # type: ignore[union-attr]
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert leaks(reachable_text(info.value)) == []
    with reveal_private_errors(), pytest.raises(ValueError) as raw:  # positive control
        engine(index, FailingLLM()).query(QUESTION)
    assert CANARY in reachable_text(raw.value)


def test_one_error_class_and_a_required_budget(index: Any) -> None:
    assert PrivateStageError is PrivateDataError
    with pytest.raises(ValueError, match=r'budget=SQLiteCorpusAccountant\(name="<corpus>"'):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism())
    with pytest.raises(TypeError, match="budget must be a CorpusAccountant, got Budget"):
        DPQueryEngine.from_index(index, mechanism=ToyMechanism(), budget=Budget(1.0))  # type: ignore[arg-type]


def test_long_question_refused_before_the_charge(index: Any) -> None:
    acc = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    dp = DPQueryEngine.from_index(
        index, mechanism=ToyMechanism(), budget=acc, max_question_tokens=16
    )
    with pytest.raises(ValueError, match="max_question_tokens=16"):
        dp.query("Which treatment? " * 20)
    with pytest.raises(ValueError, match="lone surrogate"):
        dp.query("Which" + chr(0xD800))
    assert acc.queries == 0
