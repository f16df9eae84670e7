"""A LlamaIndex query bundle that carries the query's id (:mod:`dprag_core.query_ids`).

A query's id names its charges to the corpus budget and the per-unit ledger,
so that a retry after ``LedgerOutcomeUnknown`` with the same id is charged
once. LlamaIndex hands the ``QueryBundle`` to every stage of a query (the
query engine, the retriever, the node postprocessors), so the id travels in
it: ``DPQueryEngine.query(DPQueryBundle(question, query_id="req-42"))``, and
in a pipeline of your own ``query_engine.query(DPQueryBundle(...))`` reaches
:class:`~llamaindex_dprag.postprocessors.DPThresholdPostprocessor` and
:class:`~llamaindex_dprag.postprocessors.PrivacyBudgetPostprocessor` unchanged.
A plain string or ``QueryBundle`` gets a fresh id.

>>> bundle = DPQueryBundle("Who treats Ann?", query_id="req-42")
>>> str(bundle), query_id_of(bundle), query_id_of(QueryBundle("Who?"))
('Who treats Ann?', 'req-42', None)
"""

from __future__ import annotations

import dataclasses

from llama_index.core.schema import QueryBundle

__all__ = ["DPQueryBundle", "query_id_of"]


@dataclasses.dataclass
class DPQueryBundle(QueryBundle):
    """A ``QueryBundle`` with the query's id (None: a fresh id when the query is charged)."""

    query_id: str | None = None


def query_id_of(bundle: QueryBundle | None) -> str | None:
    """The id a bundle carries, or None (a plain ``QueryBundle``, no bundle)."""
    return getattr(bundle, "query_id", None)
