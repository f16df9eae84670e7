"""One ``Query`` (question, id, retry, rng), handed to the mechanism as an argument.

The apps build one Query per query when its public part is done and pass it to
``Mechanism.answer`` / ``stream``; MuRAG hands its id and retry flag to the
ledger filter. Nothing about a query travels in a context variable, so a
mechanism stepped in another thread reads the values it was handed. Ids and
retries end to end: tests/test_query_ids.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from query_support import murag
from toy_mechanisms import ToyMechanism

import dprag_core
from dprag_core import PrivateRAG, Query
from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.errors import PrivateDataError
from dprag_core.mechanisms.rng import RngLike
from dprag_core.query_ids import as_query
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ScoredDocument(f"d{i}", f"record {i}", 0.9 - i / 10) for i in range(4)]


@HonoursK
def retriever(question: str, k: int) -> list[ScoredDocument]:
    return DOCS[:k]


class Recorder(ToyMechanism):
    """Keeps every Query it is handed; fails once first when ``fail_first``."""

    def __init__(self, *, k: int = 2, fail_first: bool = False) -> None:
        super().__init__(k=k)
        self.handed: list[Query] = []
        self.fail_first = fail_first

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        self.handed.append(as_query(query, rng=rng))
        if self.fail_first:
            self.fail_first = False
            raise ConnectionError("endpoint lost")
        return super().answer(query, docs, rng=rng)


def _run(app: PrivateRAG, mode: str, **kw: object) -> DPAnswer:
    if mode == "answer":
        return app.answer("Who treats Ann?", **kw)  # type: ignore[arg-type]
    *_, last = app.stream("Who treats Ann?", **kw)  # type: ignore[arg-type]
    assert isinstance(last, DPAnswer)
    return last


@pytest.mark.parametrize(
    ("fields", "error", "named"),
    [
        ({"question": " "}, ValueError, "question"),
        ({"question": 7}, ValueError, "question"),
        ({"id": " "}, ValueError, "query_id"),
        ({"id": "q" * 961}, ValueError, "query_id"),
        ({"id": 7}, TypeError, "query_id"),
        ({"retry": 1}, TypeError, "retry"),
        ({"rng": 7}, TypeError, "rng"),
        ({"rng": np.random.RandomState(0)}, TypeError, "rng"),
    ],
)
def test_a_query_checks_each_field_when_built(
    fields: dict[str, object], error: type[Exception], named: str
) -> None:
    values: dict[str, object] = {"question": "Who?", **fields}
    with pytest.raises(error, match=named):
        Query(**values)  # type: ignore[arg-type]


def test_a_plain_question_becomes_a_fresh_query() -> None:
    first, second = as_query("Who?"), as_query("Who?")
    assert first.question == "Who?" and not first.retry
    assert first.id != second.id and len(first.id) == 36
    seeded = [as_query("Who?", rng=3).rng.integers(1 << 30) for _ in range(2)]
    assert seeded[0] == seeded[1]  # a seed is a generator seeded with it
    given = Query("Who?", id="q-1")
    assert as_query(given) is given
    with pytest.raises(TypeError, match="rng must be None when query is a Query"):
        as_query(given, rng=0)
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        as_query(" ")


def test_a_query_shows_its_public_fields_only() -> None:
    query = Query("Who?", id="q-1", rng=np.random.default_rng(0))
    assert repr(query) == "Query(question='Who?', id='q-1', retry=False)"
    assert query == Query("Who?", id="q-1")  # the generator is not compared
    with pytest.raises(AttributeError):
        query.id = "q-2"  # type: ignore[misc]


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_the_app_hands_the_mechanism_its_query(mode: str) -> None:
    mechanism = Recorder()
    app = PrivateRAG(mechanism, retriever, accountant=InMemoryCorpusAccountant(Budget(10.0, 1e-3)))
    gen = np.random.default_rng(5)
    _run(app, mode, query_id="req-1", rng=gen)
    _run(app, mode)
    (mine, fresh) = mechanism.handed
    assert (mine.question, mine.id, mine.retry) == ("Who treats Ann?", "req-1", False)
    assert mine.rng is gen  # the caller's generator, handed through
    assert fresh.id not in {"req-1", ""} and fresh.rng is not gen


@pytest.mark.parametrize("mode", ["answer", "stream"])
def test_an_accepted_retry_is_handed_retry_true(mode: str) -> None:
    mechanism = Recorder(fail_first=True)
    app = PrivateRAG(mechanism, retriever, accountant=InMemoryCorpusAccountant(Budget(10.0, 1e-3)))
    with pytest.raises(PrivateDataError):
        _run(app, mode, query_id="req-2")
    _run(app, mode, query_id="req-2")
    assert [(q.id, q.retry) for q in mechanism.handed] == [("req-2", False), ("req-2", True)]


def test_murag_stepped_in_another_thread_charges_under_the_query_it_was_handed() -> None:
    """The stream is opened here and stepped in a worker thread, which shares no context."""
    ledger = InMemoryLedger(budget_per_unit=10.0)
    items: Iterator[str | DPAnswer] = murag(ledger).stream(Query("Who?", id="t-1"), DOCS)
    with ThreadPoolExecutor(max_workers=1) as pool:
        released = pool.submit(list, items).result()
    last = released[-1]
    assert isinstance(last, DPAnswer) and last.details["query_id"] == "t-1"
    assert {e.query_id for e in ledger.audit_log()} == {"t-1"}


def test_murag_called_with_a_question_charges_a_fresh_id_each_time() -> None:
    ledger = InMemoryLedger(budget_per_unit=10.0)
    mechanism = murag(ledger)
    ids = {mechanism.answer("Who?", DOCS, rng=0).details["query_id"] for _ in range(2)}
    assert len(ids) == 2 and {e.query_id for e in ledger.audit_log()} == ids


def _context_variables() -> dict[str, str]:
    """``{path:name: annotation}`` of every ContextVar the three packages create."""
    found: dict[str, str] = {}
    for package in ("dprag_core", "langchain_dprag", "llamaindex_dprag"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                value = getattr(node, "value", None)
                called = isinstance(value, ast.Call) and "ContextVar" in ast.unparse(value.func)
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and called:
                    target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
                    kind = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else ""
                    found[f"{path.relative_to(ROOT)}:{ast.unparse(target)}"] = kind
    return found


def test_no_context_variable_carries_a_query_value() -> None:
    """Only the three switches of a private section remain: none holds an id, retry or rng."""
    assert dprag_core.Query is Query
    assert _context_variables() == {
        "dprag_core/errors.py:_REVEAL": "ContextVar[bool]",  # the data owner's debug switch
        "dprag_core/quiet_logs.py:_MUTED": "ContextVar[bool]",  # inside a quiet section
        "llamaindex_dprag/_quiet.py:_PRIVATE": "ContextVar[bool]",  # inside a private section
    }
