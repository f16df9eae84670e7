"""DPThreshold: DP document selection by a DP similarity threshold (Grislain 2024).

A selector, not an answering mechanism: it picks documents and never answers.
A standalone component (adapters expose it as a retriever and a node
postprocessor; :class:`dprag_core.algorithms.icl.DPICL` uses it first): the
validated parameters of the core step
:func:`dprag_core.retrieval.selection.dp_threshold_select`, which samples τ with
:func:`dprag_core.mechanisms.threshold.dp_threshold` and keeps every privacy
unit scoring above τ.

Privacy units: the mechanism needs one score per unit. A unit's score is the
**maximum** of its chunks' scores (clipped to the public bounds); the selection
keeps *all* chunks of the selected units, best first. Adding or removing one
unit then adds or removes one score and one group of chunks.

**Guarantee**: ``cost()`` = Budget(ε) — τ (a point of a public grid) is ε-DP
w.r.t. add/remove of one privacy unit when ``docs`` holds *every* unit scoring
above the lower bound s_lo (units at or below s_lo never count nor get selected:
retrieve with ``min_score = s_lo``); Δ = 1 also covers substitution. The
*selected documents* remain private data: they may only feed a DP mechanism
(DPICL), never be shown as such. With the complete candidate set, given τ the
selections of neighbouring corpora differ by the one unit; with a data-dependent
top-N candidate list one added unit can push another out and the selections
differ by two units, which no downstream claim accounts for: adapters therefore
fetch every unit above s_lo. Padding documents are ignored.

>>> sel = DPThreshold(epsilon=50.0, bounds=(0.0, 1.0), k=2)
>>> docs = [ScoredDocument(id=str(i), text="", score=s) for i, s in enumerate([0.9, 0.8, 0.1])]
>>> [d.id for d in sel.select(docs, rng=0)]
['0', '1']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.mechanisms.threshold import Utility
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.scores import ScoreScale, as_scale
from dprag_core.retrieval.selection import dp_threshold_select
from dprag_core.validation import (
    finite,
    nonnegative_finite,
    positive_finite,
    positive_int,
    strict_init,
)

__all__ = ["DPThreshold"]


class DPThreshold:
    """Select the privacy units above an ε-DP similarity threshold.

    ``bounds``: the public (s_lo, s_hi) score range (e.g. (-1, 1) for cosine),
    a pair or a :class:`~dprag_core.retrieval.scores.ScoreScale`;
    ``utility``: ``"top_k"`` (aim at ``k`` units) or ``"top_p"`` (aim at a share
    ``p`` of the total weight, weights sharpened by ``alpha``).

    >>> DPThreshold(epsilon=0.5, bounds=(-1.0, 1.0), utility="top_p", p=0.3).cost()
    Budget(epsilon=0.5, delta=0.0)
    """

    @strict_init
    def __init__(
        self,
        *,
        epsilon: float,
        bounds: ScoreScale | tuple[float, float] = (-1.0, 1.0),
        utility: Utility = "top_k",
        k: int = 10,
        p: float = 0.5,
        alpha: float = 1.0,
    ) -> None:
        self.epsilon = positive_finite("epsilon", epsilon)
        self.scale = as_scale(bounds, parameter="bounds")
        self.bounds = self.scale.bounds
        if not math.isfinite(self.bounds[1] - self.bounds[0]):
            raise ValueError(
                f"bounds must be finite (the threshold's grid spans them), got {self.bounds!r}"
            )
        if utility not in ("top_k", "top_p"):
            raise ValueError(f"utility must be 'top_k' or 'top_p', got {utility!r}")
        self.utility: Utility = utility
        self.k = positive_int("k", k)
        pp = finite("p", p)
        if not 0.0 < pp < 1.0:
            raise ValueError(f"p must be in (0, 1), got {p!r}")
        self.p = pp
        self.alpha = nonnegative_finite("alpha", alpha)

    def cost(self) -> Budget:
        """The privacy cost of one selection: ε-DP (pure)."""
        return Budget(self.epsilon)

    def threshold(self, docs: Sequence[ScoredDocument], *, rng: RngLike = None) -> float:
        """Sample τ from the units' max scores (the only step that touches the data)."""
        return dp_threshold_select(docs, rng=rng, **self._parameters()).tau

    def select(
        self, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> list[ScoredDocument]:
        """All chunks of the units whose (clipped) max score exceeds a DP threshold, best first.

        Charge :meth:`cost` before releasing the result.
        """
        return dp_threshold_select(docs, rng=rng, **self._parameters()).documents

    def _parameters(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "scale": self.scale,
            "utility": self.utility,
            "k": self.k,
            "p": self.p,
            "alpha": self.alpha,
        }

    def __repr__(self) -> str:
        return (
            f"DPThreshold(epsilon={self.epsilon:g}, bounds={self.bounds}, "
            f"utility={self.utility!r}, k={self.k}, p={self.p:g}, alpha={self.alpha:g})"
        )
