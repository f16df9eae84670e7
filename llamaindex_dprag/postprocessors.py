"""DP document selection as LlamaIndex node postprocessors.

These compose with a user's own retriever and synthesizer::

    retriever = index.as_retriever(similarity_top_k=50)
    budget = SQLiteCorpusAccountant(name="records", total=Budget(10.0, 1e-5), create=True)
    nodes = DPThresholdPostprocessor(epsilon=1.0, score_range=(-1, 1), k=5,
                                     budget=budget).postprocess_nodes(retriever.retrieve(q))

Read what each one guarantees **on its own** before using it: both choose *which*
nodes go on, but the nodes they return still carry the private text (and their
ids are private too). Whatever is done with them next must be a DP generator
(DP-ICL, DPSparseVote, MuRAG's DP-RAG...) or the result is not private at all.
They also sit in the user's pipeline, where the retriever has already reported
the nodes to LlamaIndex's instrumentation: for a pipeline without side doors use
:class:`~llamaindex_dprag.query_engine.DPQueryEngine`.

Their charges are recorded under the query's id (:mod:`dprag_core.query_ids`):
the one a :class:`~llamaindex_dprag.bundles.DPQueryBundle` carries (so a retry
after ``LedgerOutcomeUnknown`` with the same id is charged once), else a fresh
one; the budget filter claims it in the ledger before it charges
(:func:`~dprag_core.pipeline.select_by_ledger`), so any other reuse is refused
whatever the filter would have charged. A misspelt keyword is a ``TypeError``
naming the nearest valid one.

Their public errors (``QueryIdReused``, ``PrivacyBudgetExhausted``, a budget
store's) are raised by the claim or the charge, before a node is read, and
whatever fails while selecting is the one fixed ``PrivateDataError``
(:func:`~dprag_core.pipeline.private_step`). The frames above them hold the
nodes the caller passed (LlamaIndex's own ``postprocess_nodes`` and its span,
whose handlers receive those nodes too): nothing else.

Which relation they keep: a postprocessor sees only the nodes it is given, so
its guarantee is conditional on that list being **complete**: every node
scoring above the lower end of ``score_range`` (threshold) or above ``tau``
(budget filter), e.g. a retriever with ``similarity_top_k`` at least the corpus
size, or a store query with that score cut-off. Then one added unit adds only
its own nodes, each node is judged by its own score, and a unit's best node
depends on that unit alone. A top-N list does not qualify: its cut depends on
the other nodes, so one added unit can push another out (a substitution, and
the selections then differ by two units). Nodes without a finite score or
without their ``unit_key`` are dropped (a function of that node alone), never
an error after the charge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.threshold import Utility
from dprag_core.pipeline import check_accountant, select_above_threshold, select_by_ledger
from dprag_core.retrieval.documents import ScoredDocument, admit
from dprag_core.retrieval.scores import ScoreScale
from dprag_core.retrieval.threshold import DPThreshold
from dprag_core.validation import positive_finite, positive_int, strict_init
from llamaindex_dprag.bundles import query_id_of
from llamaindex_dprag.units import check_score_range, node_unit, score_scale

__all__ = ["DPThresholdPostprocessor", "PrivacyBudgetPostprocessor"]


def _scored(
    nodes: Sequence[NodeWithScore], *, unit_key: str | None, scale: ScoreScale
) -> list[ScoredDocument]:
    # text stays out: selection needs ids, scores and units only; unusable nodes drop out
    docs = [
        admit(n.node.node_id, "", scale.convert(n.score), node_unit(n.node, unit_key), slot=slot)
        for slot, n in enumerate(nodes)
    ]
    return [d for d in docs if not d.is_padding]


def _pick(nodes: Sequence[NodeWithScore], chosen: Sequence[ScoredDocument]) -> list[NodeWithScore]:
    by_id = {n.node.node_id: n for n in nodes}
    return [by_id[d.id] for d in chosen if d.id in by_id]


class DPThresholdPostprocessor(BaseNodePostprocessor):
    """Keep the nodes scoring above a DP similarity threshold (Grislain's DP top-k / top-p).

    Wraps :class:`dprag_core.retrieval.threshold.DPThreshold`: a threshold τ
    is drawn with the continuous exponential mechanism over the public
    ``score_range`` (scores are clipped into it; ``score_direction="distance"``
    negates distances first) and the nodes scoring above τ are returned, best
    first. Its cost (``epsilon``) is charged to ``budget`` (a
    :class:`CorpusAccountant`, required: e.g. ``SQLiteCorpusAccountant("budget.db",
    total=Budget(10, 1e-5), create=True)``) *before* anything is computed; an exhausted
    budget raises :class:`PrivacyBudgetExhausted`. τ is a point of a public grid
    (:mod:`dprag_core.mechanisms.threshold`).

    Privacy units (``unit_key``, default: the node's source document) are
    selected whole: a unit scores its best node, and all its nodes go on.

    **What it guarantees on its own**: τ is ``epsilon``-DP (add/remove one
    privacy unit), so *which* units are selected differs between neighbouring
    corpora by at most the one unit: a downstream generator that is DP per unit
    of its input composes with it. This holds only if the incoming nodes are
    **every** node scoring above the lower end of ``score_range`` (a top-N
    retriever's cut depends on the data): give the retriever a large top-k or a
    score cut-off at that bound. **What it does not**: the selected nodes are the
    private documents themselves; their text, ids, scores and even their number
    are not DP and must not be shown to anyone. Only a DP generator may consume
    them (as :class:`~dprag_core.algorithms.icl.DPICL` does inside the query
    engine).

    >>> from llama_index.core.schema import TextNode
    >>> from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    >>> post = DPThresholdPostprocessor(epsilon=50.0, score_range=(0.0, 1.0), k=1,
    ...                                 budget=InMemoryCorpusAccountant(Budget(100.0)), rng=0)
    >>> nodes = [NodeWithScore(node=TextNode(id_=i, text=""), score=s)
    ...          for i, s in [("a", 0.9), ("b", 0.2)]]
    >>> [n.node.node_id for n in post.postprocess_nodes(nodes)]
    ['a']
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    epsilon: float
    score_range: tuple[float, float]
    score_direction: str = "similarity"
    utility: str = "top_k"
    k: int = 10
    p: float = 0.5
    alpha: float = 1.0
    unit_key: str | None = None
    accountant: CorpusAccountant = Field(exclude=True)

    _threshold: Any = PrivateAttr()
    _scale: Any = PrivateAttr()
    _rng: Any = PrivateAttr(default=None)

    @strict_init
    def __init__(
        self,
        *,
        epsilon: float,
        score_range: tuple[float, float],
        budget: CorpusAccountant,
        score_direction: str = "similarity",
        utility: str = "top_k",
        k: int = 10,
        p: float = 0.5,
        alpha: float = 1.0,
        unit_key: str | None = None,
        rng: RngLike = None,
    ) -> None:
        if score_range is None:
            raise ValueError("score_range is required: the public (low, high) range of the scores")
        scale = score_scale(score_direction=score_direction, score_range=score_range)
        if utility not in ("top_k", "top_p"):
            raise ValueError(f"utility must be 'top_k' or 'top_p', got {utility!r}")
        threshold = DPThreshold(
            epsilon=epsilon, bounds=scale, utility=cast(Utility, utility), k=k, p=p, alpha=alpha
        )
        fields: dict[str, Any] = {
            "epsilon": threshold.epsilon,
            "score_range": check_score_range(score_range),
            "score_direction": scale.direction,
            "utility": utility,
            "k": threshold.k,
            "p": threshold.p,
            "alpha": threshold.alpha,
            "unit_key": unit_key,
            "accountant": check_accountant(budget, parameter="budget"),
        }
        super().__init__(**fields)
        self._threshold = threshold
        self._scale = scale
        self._rng = None if rng is None else make_rng(rng)

    @classmethod
    def class_name(cls) -> str:
        return "DPThresholdPostprocessor"

    def cost(self) -> Budget:
        """The guarantee charged per call.

        >>> from dprag_core.accounting.accountant import InMemoryCorpusAccountant
        >>> DPThresholdPostprocessor(epsilon=0.5, score_range=(-1, 1), k=3,
        ...                          budget=InMemoryCorpusAccountant(Budget(1.0))).cost()
        Budget(epsilon=0.5, delta=0.0)
        """
        cost: Budget = self._threshold.cost()
        return cost

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        chosen = select_above_threshold(
            self._threshold,
            self.accountant,
            lambda: _scored(nodes, unit_key=self.unit_key, scale=self._scale),
            query_id=query_id_of(query_bundle),
            rng=self._rng,
        )
        return _pick(nodes, chosen)

    def __repr__(self) -> str:
        return f"DPThresholdPostprocessor(epsilon={self.epsilon}, utility={self.utility!r})"


class PrivacyBudgetPostprocessor(BaseNodePostprocessor):
    """MuRAG's per-document budget filter (Alg. 1, lines 3-6) as a node postprocessor.

    Every privacy unit has ``budget_per_unit`` in ``ledger`` (MuRAG: M·ε_q).
    For each call: units with less than ``epsilon_query`` left are dropped;
    every remaining node scoring above the public ``tau`` (fixed before any data
    is seen) has its unit charged ``epsilon_query`` atomically, in one ledger
    charge, *before* anything is returned; the best ``k`` of them are returned.
    ``score_direction`` / ``score_range`` convert store scores as elsewhere.

    **What it guarantees on its own**: only accounting. No unit ever takes part
    in more than ``budget_per_unit / epsilon_query`` answers, so if each answer
    uses its documents through an ``epsilon_query``-DP generator, each unit's
    total privacy loss stays within its budget (MuRAG's individual-DP
    accounting). **What it does not**: the selection is not randomised and not
    DP; the returned nodes (their text, ids, scores and number) are private, and
    the charge is only meaningful if an ``epsilon_query``-DP generator consumes
    them (e.g. DPSparseVote with that epsilon). Candidates the upstream
    retriever did not return above ``tau`` are neither charged nor used: give it
    a large enough top-k, or use ``MuRAG`` through
    :class:`~llamaindex_dprag.query_engine.DPQueryEngine`, which fetches every
    candidate above ``tau``.

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> from llama_index.core.schema import TextNode
    >>> post = PrivacyBudgetPostprocessor(ledger=InMemoryLedger(budget_per_unit=1.0),
    ...                                   epsilon_query=1.0, tau=0.5, k=2)
    >>> nodes = [NodeWithScore(node=TextNode(id_="a", text=""), score=0.9)]
    >>> len(post.postprocess_nodes(nodes)), len(post.postprocess_nodes(nodes))
    (1, 0)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    epsilon_query: float
    tau: float
    k: int
    unit_key: str | None = None
    score_direction: str = "similarity"
    score_range: tuple[float, float] | None = None
    ledger: Ledger = Field(exclude=True)

    _scale: Any = PrivateAttr()

    @strict_init
    def __init__(
        self,
        *,
        ledger: Ledger,
        epsilon_query: float,
        tau: float,
        k: int,
        unit_key: str | None = None,
        score_direction: str = "similarity",
        score_range: tuple[float, float] | None = None,
    ) -> None:
        if not isinstance(ledger, Ledger):  # a look-alike's charge could not be trusted
            raise TypeError(
                "ledger must be a dprag Ledger (dprag_core.accounting.ledger: InMemoryLedger, "
                f"SQLiteLedger, PostgresLedger), got {type(ledger).__name__}"
            )
        scale = score_scale(score_direction=score_direction, score_range=score_range)
        fields: dict[str, Any] = {
            "epsilon_query": positive_finite("epsilon_query", epsilon_query),
            "tau": scale.check_threshold(tau),
            "k": positive_int("k", k),
            "unit_key": unit_key,
            "score_direction": scale.direction,
            "score_range": check_score_range(score_range),
            "ledger": ledger,
        }
        super().__init__(**fields)
        self._scale = scale

    @classmethod
    def class_name(cls) -> str:
        return "PrivacyBudgetPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        best = select_by_ledger(  # claims the id before reading the nodes
            lambda: _scored(nodes, unit_key=self.unit_key, scale=self._scale),
            ledger=self.ledger,
            tau=self.tau,
            cost=self.epsilon_query,
            k=self.k,
            query_id=query_id_of(query_bundle),
        )
        return _pick(nodes, best)

    def __repr__(self) -> str:
        return (
            f"PrivacyBudgetPostprocessor(epsilon_query={self.epsilon_query}, tau={self.tau}, "
            f"k={self.k})"
        )
