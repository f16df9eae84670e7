"""What dprag knows about a vector store, read from the store object, and the one refusal rule.

Every selection proof rests on two facts about the store that retrieval reads:

- **what a raw score is** (a similarity or a distance, which metric:
  :data:`~dprag_core.retrieval.scores.METRICS`), so that "higher = more
  relevant" holds after conversion and a public threshold means what it says;
- **that its search is exact**: the top k of one fixed ranking of (question,
  document) pairs. One added unit is then *inserted* into that ranking and the
  first n units change by one substitution. An approximate index (HNSW, IVF)
  gives no such bound: rebuilding it with one more document can push many
  others out of the top k.

Each adapter keeps one table (``langchain_dprag.stores``,
``llamaindex_dprag.stores``) that turns a store object into
:class:`StoreFacts`: its class, distance strategy, index type or collection
configuration say what its scores are and how to get exact results (its own
brute force, a flat index, Qdrant's ``exact=True``, pgvector with index scans
off, or the exact ranking computed from the vectors the store hands out). Never
the scores themselves: whether they rise or fall along one ranking depends on
the data.

What cannot be established is refused when the chain, engine or retriever is
built, never at query time, unless the user declares it (a score function or
direction for the metric, ``exact_search=True`` for exactness):
:func:`exactness` and :func:`refusal` word every such error the same way, naming
the store, what could not be established, and the one-line fix. A store dprag
*knows* to be approximate (``refused``) is refused even with ``exact_search=True``:
there is no opt-in to approximate retrieval, because its guarantee would be none
at all (docs/architecture.md, "Guarantees").

>>> facts = StoreFacts("InMemoryVectorStore", metric="cosine", exact="brute force")
>>> exactness(facts, declared=False, fix="-")
'brute force'
>>> exactness(StoreFacts("MyStore"), declared=True, fix="-")
'declared exact (exact_search=True)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dprag_core.retrieval.scores import METRICS

__all__ = [
    "DECLARED_EXACT",
    "StoreFacts",
    "describe_metric",
    "exactness",
    "first_inexact",
    "refusal",
    "refuse_empty",
    "require_declarations",
]

DECLARED_EXACT = "declared exact (exact_search=True)"


@dataclass(frozen=True)
class StoreFacts:
    """What an adapter's store table established about one store object.

    ``store``: its name with the configuration read (shown in errors; never
    data). ``metric``: a :data:`~dprag_core.retrieval.scores.METRICS` name, or
    ``None`` when the raw scores' meaning could not be established. ``exact``:
    how its results are exact, or ``None`` when that could not be established.
    ``refused``: a configuration dprag knows it cannot use (an approximate index
    that cannot be asked for exact results, a hybrid mode, ...), with the
    alternative; it wins over any declaration.

    >>> StoreFacts("Chroma (space 'l2')", metric="squared_l2").metric
    'squared_l2'
    """

    store: str
    metric: str | None = None
    exact: str | None = None
    refused: str | None = None

    def __post_init__(self) -> None:
        if self.metric is not None and self.metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")


def refusal(store: str, problem: str, fix: str) -> ValueError:
    """The build-time error: the store, what is wrong or unknown, the one-line fix.

    >>> str(refusal("MyStore", "dprag cannot establish X", "pass Y"))
    'MyStore: dprag cannot establish X. Fix: pass Y'
    """
    return ValueError(f"{store}: {problem}. Fix: {fix}")


def refuse_empty(store: str, count: int | None) -> None:
    """Refuse a store that holds no vector, when the app is built (``count``: None = unknown).

    An empty store (a wrong path, a collection name misspelt, an index not yet
    filled) would accept the app and charge ε for every query, each of which can
    only release nothing. So the adapters read how many vectors the store holds
    (its own count: FAISS ``ntotal``, Chroma ``count()``, ...) once, when the
    chain, retriever, query engine or :class:`~dprag_core.pipeline.PrivateRAG`
    is built, before any charge, and refuse a count of zero with this error.

    Why this is no leak: whether the corpus is empty is a property of the
    corpus, and on the neighbouring pair ∅ vs {x} the refusal tells x's presence
    with certainty, so it must not be observable by whoever sends questions. It
    is not: the check runs once, at build time, read by the operator who
    builds the app from the store they hold (the data owner, who sees the
    corpus anyway), never per query. An app that was built answers every query
    the same way whatever the store holds later (no query is refused or
    answered differently because the store has since been emptied or filled).
    It is a public precondition of serving, like the store's dimension
    (checked at the same time), not a query's output.

    >>> refuse_empty("FAISS", 3); refuse_empty("MyStore", None)
    >>> refuse_empty("FAISS", 0)
    Traceback (most recent call last):
    ...
    ValueError: FAISS: it holds no vector (an empty corpus: every query would be charged ...
    """
    if count == 0:
        raise refusal(
            store,
            "it holds no vector (an empty corpus: every query would be charged and could "
            "only release nothing; checked once, when the app is built, before any charge)",
            "add the documents to the store (or open the store that holds them) before "
            "building the app",
        )


def require_declarations(
    facts: StoreFacts, *, scores: bool, exact: bool, supported: str, fix: str
) -> None:
    """Refuse a store the table knows nothing about unless both facts are declared.

    ``scores``/``exact``: whether the user declared the score semantics and
    exactness; ``supported``: the stores the table reads; ``fix``: how to
    declare both.

    >>> require_declarations(StoreFacts("MyStore"), scores=True, exact=True, supported="", fix="")
    """
    unknown = facts.metric is None and facts.exact is None and facts.refused is None
    if unknown and not (scores and exact):
        raise refusal(
            facts.store,
            "dprag cannot establish what its scores are nor that its search is exact: it "
            f"reads {supported}",
            fix,
        )


def exactness(facts: StoreFacts, *, declared: bool, fix: str) -> str:
    """How ``facts.store``'s results are exact; ValueError when that is refused or unknown.

    ``declared``: the user's ``exact_search=True``, accepted only where dprag
    knows nothing (``facts.exact`` is None and nothing is ``refused``).
    ``fix``: the one-line fix to name for an unknown store.
    """
    if facts.refused is not None:
        raise ValueError(f"{facts.store}: {facts.refused}")
    if facts.exact is not None:
        return facts.exact
    if declared:
        return DECLARED_EXACT
    raise refusal(
        facts.store,
        "dprag cannot establish that its search is exact (its top k must be the exact top k "
        "of one ranking: with an approximate index one added document can push several "
        "others out, which the DP guarantee does not allow)",
        fix,
    )


def describe_metric(metric: str) -> str:
    """What ``metric``'s raw scores mean and which way they go, for messages.

    >>> describe_metric("cosine_distance")
    'cosine_distance: cosine distance 1 - cos, lower = closer'
    """
    info = METRICS[metric]
    way = "lower = closer" if info.direction == "distance" else "higher = closer"
    return f"{metric}: {info.meaning}, {way}"


def first_inexact(
    node: object,
    *,
    store_facts: Callable[[object], tuple[StoreFacts, bool] | None],
    children: Callable[[object], Iterable[object]],
) -> StoreFacts | None:
    """The first store under ``node`` whose *own* search is not exact, or None.

    For a promise about a retriever (``retriever_honours_k``,
    ``returns_everything``) that the adapters cannot see into: a retriever that
    runs a store's own search is no better than that search. ``store_facts(x)``
    is ``(facts, own_search_exact)`` when ``x`` is a store, else None;
    ``children(x)`` what else to look into (the retrievers, indexes and lists a
    retriever holds). A store is reported when the table knows it (a metric or a
    refusal) and its own search is not exact: an approximate index, or a store
    dprag searches exactly only through its own path (Chroma, pgvector, Qdrant,
    LanceDB). A store the table does not know is the user's promise.

    >>> facts = {"hnsw": (StoreFacts("HNSW", refused="approximate"), False)}
    >>> tree = {"retrievers": ["flat", "hnsw"]}
    >>> found = first_inexact(
    ...     tree,
    ...     store_facts=lambda x: facts.get(x) if isinstance(x, str) else None,
    ...     children=lambda x: x.get("retrievers", []) if isinstance(x, dict) else [],
    ... )
    >>> found.store
    'HNSW'
    """
    seen: set[int] = set()
    pending = [node]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        read = store_facts(current)
        if read is None:
            pending.extend(children(current))
            continue
        facts, own_exact = read
        known = facts.metric is not None or facts.refused is not None
        if known and not own_exact:
            return facts
    return None
