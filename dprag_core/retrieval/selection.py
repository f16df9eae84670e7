"""The two DP document-selection steps, one function each.

:class:`~dprag_core.retrieval.threshold.DPThreshold`, :class:`~dprag_core.algorithms.murag.MuRAG`,
LangChain's ``DPRetriever`` and LlamaIndex's postprocessors all run these; the
adapters only translate their framework's documents to and from
:class:`~dprag_core.retrieval.documents.ScoredDocument`.

- **DP score threshold** (Grislain 2024): :func:`dp_threshold_select` draws τ
  with :func:`~dprag_core.mechanisms.threshold.dp_threshold` (a point of a
  public grid) from one score per privacy unit, the unit's best chunk clipped
  into the public range, and keeps every chunk of the units above τ.
  **Claim**: ε-DP (τ) w.r.t. add/remove (or substitution) of one privacy unit,
  Δ = 1, *provided* ``docs`` holds every unit scoring above the range's low end
  (units at or below it never count nor get selected). Given τ, neighbouring
  corpora then select sets that differ by that one unit; the selected documents
  remain private and may only feed a DP mechanism.
- **MuRAG ledger filter** (MuRAG Alg. 1, lines 3-8): :func:`ledger_filter`
  keeps the chunks scoring above the public τ, charges **every** such unit that
  can still afford ``cost`` in one atomic ledger charge
  (:func:`~dprag_core.accounting.ledger.charge_active`), and returns each charged
  unit's best chunk, the first ``k`` by (score, id). **Claim**: accounting only
  (Feldman & Zrnic's individual filter): a unit is charged on its own score
  alone, so no unit takes part in more answers than its budget allows; the
  selection is not randomised and is private data for an ``cost``-DP generator.
  Also only for a *complete* candidate list (every chunk above τ).

>>> docs = [ScoredDocument(id=i, text="", score=s) for i, s in [("a", 0.9), ("b", 0.2)]]
>>> [d.id for d in dp_threshold_select(docs, epsilon=50.0, scale=(0, 1), k=1, rng=0).documents]
['a']
>>> from dprag_core.accounting.ledger import InMemoryLedger
>>> led = InMemoryLedger(budget_per_unit=1.0)
>>> [d.id for d in ledger_filter(docs, ledger=led, tau=0.5, cost=1.0, k=2, query_id="q")]
['a']
>>> led.remaining(["a", "b"])
{'a': 0.0, 'b': 1.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from dprag_core.accounting.ledger import Ledger, charge_active
from dprag_core.mechanisms.rng import RngLike
from dprag_core.mechanisms.threshold import Utility, dp_threshold
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.scores import ScoreScale, as_scale
from dprag_core.retrieval.units import best_chunk_per_unit, group_by_unit
from dprag_core.validation import finite

__all__ = ["ThresholdSelection", "dp_threshold_select", "ledger_filter", "units_above"]


def units_above(
    docs: Sequence[ScoredDocument], tau: float, scale: ScoreScale | tuple[float, float]
) -> list[ScoredDocument]:
    """Every chunk of the units whose clipped best score exceeds ``tau``, best first.

    >>> docs = [ScoredDocument(id="a", text="", score=0.9, unit="u"),
    ...         ScoredDocument(id="b", text="", score=0.1, unit="u")]
    >>> [d.id for d in units_above(docs, 0.5, (0.0, 1.0))]
    ['a', 'b']
    """
    tau = finite("tau", tau)
    clip = as_scale(scale, parameter="scale").clip
    chosen = [
        doc
        for group in group_by_unit(docs).values()
        if clip(max(d.score for d in group)) > tau
        for doc in group
    ]
    return sorted(chosen, key=lambda d: -d.score)


class ThresholdSelection(NamedTuple):
    """What the DP threshold step returns: τ (the DP output) and the units above it."""

    tau: float
    documents: list[ScoredDocument]


def dp_threshold_select(
    docs: Sequence[ScoredDocument],
    *,
    epsilon: float,
    scale: ScoreScale | tuple[float, float],
    utility: Utility = "top_k",
    k: int = 10,
    p: float = 0.5,
    alpha: float = 1.0,
    rng: RngLike = None,
) -> ThresholdSelection:
    """The DP score-threshold step: DP τ, then every chunk of the units above it.

    τ is drawn from one score per unit, its best chunk's (the only step that
    reads the data). Claim and the completeness it needs: module docstring.
    Charge ε before releasing anything derived from the result.
    """
    groups = group_by_unit(docs)
    scores = np.array([max(d.score for d in g) for g in groups.values()], dtype=np.float64)
    bounds = as_scale(scale, parameter="scale").bounds
    tau = dp_threshold(
        scores, epsilon=epsilon, bounds=bounds, utility=utility, k=k, p=p, alpha=alpha, rng=rng
    )
    return ThresholdSelection(tau, units_above(docs, tau, bounds))


def ledger_filter(
    docs: Sequence[ScoredDocument],
    *,
    ledger: Ledger,
    tau: float,
    cost: float,
    k: int,
    query_id: str,
    retry: bool = False,
) -> list[ScoredDocument]:
    """MuRAG's ledger filter: charge every active unit above ``tau``, return the best ``k``.

    One best chunk per unit (a unit with c chunks must not take c slots: adding
    it would displace c other units), at most ``k``, never padded. Units
    without budget drop out silently (module docstring). A ``tau`` that is not
    a finite real is refused (nothing is charged); callers check it against
    their score range when built (:meth:`ScoreScale.check_threshold`).
    ``retry``: the query is an accepted retry, whose recorded charge stands
    (:func:`~dprag_core.accounting.ledger.charge_active`).
    """
    tau = finite("tau", tau)
    relevant = [d for d in docs if not d.is_padding and d.score > tau]
    units = (d.unit for d in relevant)
    charged = set(charge_active(ledger, query_id, units, cost, retry=retry))
    return best_chunk_per_unit(d for d in relevant if d.unit in charged)[:k]
