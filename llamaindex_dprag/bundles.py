"""A LlamaIndex query bundle that carries the query's id (:mod:`dprag_core.query_ids`).

A query's id names its charges to the corpus budget and the per-unit ledger,
so that a retry after ``LedgerOutcomeUnknown`` with the same id is charged
once. LlamaIndex hands the ``QueryBundle`` to every stage of a query (the
query engine, the retriever, the node postprocessors), so the id travels in
it: ``DPQueryEngine.query(question, query_id=...)`` builds a
:class:`DPQueryBundle`, and a pipeline of your own passes one to
``query_engine.query(DPQueryBundle(question, query_id=...))``, which reaches
:class:`~llamaindex_dprag.postprocessors.DPThresholdPostprocessor` and
:class:`~llamaindex_dprag.postprocessors.PrivacyBudgetPostprocessor` unchanged.
A plain string or ``QueryBundle`` gets a fresh id.

>>> bundle = with_query_id("Who treats Ann?", "request-42")
>>> bundle.query_str, query_id_of(bundle), query_id_of(QueryBundle("Who?"))
('Who treats Ann?', 'request-42', None)
"""

from __future__ import annotations

import dataclasses

from llama_index.core.schema import QueryBundle, QueryType

__all__ = ["DPQueryBundle", "query_id_of", "with_query_id"]


@dataclasses.dataclass
class DPQueryBundle(QueryBundle):
    """A ``QueryBundle`` with the query's id (None: a fresh id when the query is charged)."""

    query_id: str | None = None


def query_id_of(bundle: QueryBundle | None) -> str | None:
    """The id a bundle carries, or None (a plain ``QueryBundle``, no bundle)."""
    return getattr(bundle, "query_id", None)


def with_query_id(query: QueryType, query_id: str | None) -> QueryType:
    """``query`` carrying ``query_id`` (unchanged when it is None); a conflicting id is refused.

    >>> with_query_id(DPQueryBundle("Who?", query_id="a"), "b")
    Traceback (most recent call last):
    ...
    ValueError: query_id='b' differs from the id the query bundle carries ('a')
    """
    if query_id is None:
        return query
    if isinstance(query, str):
        return DPQueryBundle(query, query_id=query_id)
    carried = query_id_of(query)
    if carried is not None and carried != query_id:
        raise ValueError(
            f"query_id={query_id!r} differs from the id the query bundle carries ({carried!r})"
        )
    fields = {f.name: getattr(query, f.name) for f in dataclasses.fields(QueryBundle)}
    return DPQueryBundle(**fields, query_id=query_id)
