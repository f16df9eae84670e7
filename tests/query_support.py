"""Query-id and placeholder helpers for the tests of every entry point (core, both adapters).

:class:`InDoubtAccountant` is a real in-memory corpus budget with one injected
fault: its first charge is recorded, then reported as
:class:`~dprag_core.accounting.ledger.LedgerOutcomeUnknown` (a connection lost
after the commit). A retry with that same id records nothing new and returns
``False``, as the durable stores do for the retry of a charge they left in
doubt. It remembers every query id it was asked to charge.

:func:`bad_unit_documents` are documents whose defect depends on the data (a
privacy unit no ledger accepts): one among the retrieved must never make a
charged query fail (the one placeholder policy). :func:`murag` is a MuRAG over
a pure-DP stand-in inner mechanism (its answer: how many documents it got).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from toy_mechanisms import ToyMechanism

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.accounting.ledger import Ledger, LedgerOutcomeUnknown
from dprag_core.algorithms.murag import MuRAG
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument

BAD_UNITS = {
    "blank": " ",
    "nul": "patient\x00",
    "surrogate": "patient" + chr(0xD800),
    "too-long": "p" * 1025,
}
"""Privacy-unit ids a ledger refuses (blank, NUL, lone surrogate, over 1024 UTF-8 bytes)."""


class InDoubtAccountant(InMemoryCorpusAccountant):
    """First charge recorded, then reported in doubt; its retry returns False (module docstring)."""

    def __init__(self, total: Budget) -> None:
        super().__init__(total)
        self.ids: list[str | None] = []
        self.in_doubt: str | None = None
        self.failed = False

    def charge(self, cost: Budget, *, query_id: str | None = None) -> Any:
        self.ids.append(query_id)
        if query_id is not None and query_id == self.in_doubt:
            self.in_doubt = None
            return False  # recorded by the first attempt: nothing new
        receipt = super().charge(cost, query_id=query_id)
        if not self.failed:
            self.failed, self.in_doubt = True, query_id
            raise LedgerOutcomeUnknown("the connection was lost after the charge was sent")
        return receipt


class PureToy(ToyMechanism):
    """MuRAG's inner stand-in: pure epsilon-DP (cost (1, 0)), answers with its documents' count."""

    def query_cost(self) -> Budget:
        return Budget(1.0)

    def stream(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        result = self.answer(question, docs, rng=rng)
        yield result.text  # the chunks join to the answer's text (the contract)
        yield result


def murag(ledger: Ledger, *, tau: float = 0.5, k: int = 2) -> MuRAG:
    """MuRAG over :class:`PureToy`: every unit above ``tau`` charged 1, the best ``k`` answer."""
    return MuRAG(PureToy(k=k), ledger=ledger, tau=tau, epsilon_query=1.0, score_bounds=(-1, 1))
