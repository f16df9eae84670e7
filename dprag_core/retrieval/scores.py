"""One score scale: how a store's raw scores become dprag similarities on a public range.

Every selection proof reads scores as similarities (higher = more relevant) on
a **public** range [low, high] fixed before any data is seen: the DP
threshold's bounds, MuRAG's τ, the clipping that bounds each unit's influence.
:class:`ScoreScale` holds that range with the conversion from the store's raw
score: ``transform`` (e.g. squared L2 → cosine on unit vectors), then
``direction`` (``"distance"`` negates), then clipping into [low, high].

**NaN policy (one, everywhere).** A raw score that is missing, not a real
number, NaN or infinite, or that the transform turns into one (or on which the
transform raises an arithmetic, value or type error), converts to NaN, and the
adapters turn a NaN score into a placeholder that keeps its rank slot and is
never a candidate (:func:`~dprag_core.retrieval.documents.admit`). Why this
policy and not "NaN → low bound" or "raise":

- scores are converted *after* the query was charged, so raising would make
  the occurrence of an error depend on the private data;
- dropping is a function of that one document alone, so neighbouring corpora
  still differ by one unit (clipping ±inf to a bound would claim a relevance
  the store never measured and rank the document first or last);
- a NaN never enters a sort or a comparison (where it makes every order
  meaningless), and the placeholder keeps "fewer than k came back" meaning
  "the store is exhausted".

>>> COSINE_SCALE.convert(1.5), COSINE_SCALE.convert(float("nan"))
(1.0, nan)
>>> ScoreScale("l2", low=-4.0, high=0.0, direction="distance").convert(0.5)
-0.5
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Literal

from dprag_core.validation import finite

__all__ = ["COSINE_SCALE", "Direction", "ScoreScale", "as_scale"]

Direction = Literal["similarity", "distance"]
_DIRECTIONS = ("similarity", "distance")


def _identity(raw: float) -> float:
    return raw


@dataclass(frozen=True)
class ScoreScale:
    """A public score range with the conversion from a store's raw scores (module docstring).

    ``name`` labels the scale in reprs and error messages; ``low`` < ``high``
    (finite) is the public range of the *converted* similarities;
    ``transform`` maps a raw score first; ``direction="distance"`` then negates
    it (a store range [0, 4] of distances is ``low=-4, high=0``).

    >>> ScoreScale("neg", low=-2.0, high=0.0, transform=lambda d: -d).convert(0.5)
    -0.5
    >>> ScoreScale("cosine", low=-1.0, high=1.0).bounds
    (-1.0, 1.0)
    """

    name: str
    low: float
    high: float
    transform: Callable[[float], float] = _identity
    direction: Direction = "similarity"

    def __post_init__(self) -> None:
        low, high = finite("low", self.low), finite("high", self.high)
        if not low < high:
            raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")
        if self.direction not in _DIRECTIONS:
            raise ValueError(
                f"direction must be 'similarity' or 'distance', got {self.direction!r}"
            )
        if not callable(self.transform):
            raise TypeError(f"transform must be callable, got {type(self.transform).__name__}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @classmethod
    def unclipped(cls, direction: Direction = "similarity") -> ScoreScale:
        """A scale that keeps every finite score as it is (for steps that need no range).

        >>> ScoreScale.unclipped("distance").convert(3.0)
        -3.0
        """
        top = sys.float_info.max
        return cls("unclipped", low=-top, high=top, direction=direction)

    @property
    def bounds(self) -> tuple[float, float]:
        """The public range ``(low, high)``."""
        return (self.low, self.high)

    def check_threshold(self, tau: object, *, parameter: str = "tau") -> float:
        """``tau`` as a float if it is a usable public threshold here: ``low <= tau < high``.

        The one rule for every entry point that takes a τ (MuRAG's ``tau``,
        MuRAG-Ada's lowest bin edge, a mechanism's ``min_score()`` against a
        source's declared ``scale`` (PrivateRAG, the adapters), the LangChain
        retriever's and the LlamaIndex postprocessor's ``tau``). Why this range:
        a document counts as relevant only when its score is *strictly above* τ
        (:func:`~dprag_core.retrieval.selection.ledger_filter`,
        :func:`~dprag_core.retrieval.selection.units_above`,
        :func:`~dprag_core.retrieval.above.retrieve_above`) and scores are
        clipped into ``[low, high]``, so τ = ``high`` selects nothing, ever:
        every query would be charged for an empty selection. τ = ``low``
        selects every unit scoring above the floor (DP-ICL's cut). τ below
        ``low`` would count scores clipped up to ``low`` (any score at all) as
        relevant, and make the growing search fetch the whole store. A τ that
        is not a finite real is refused (TypeError / ValueError naming
        ``parameter``); nothing is charged, this runs before any query.

        >>> COSINE_SCALE.check_threshold(0.5), COSINE_SCALE.check_threshold(-1)
        (0.5, -1.0)
        >>> COSINE_SCALE.check_threshold(1.0, parameter="tau")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: tau must be in [-1.0, 1.0) ... got 1.0
        """
        value = finite(parameter, tau)
        if not self.low <= value < self.high:
            raise ValueError(
                f"{parameter} must be in [{self.low}, {self.high}) (score range {self.name!r}: "
                f"only a score above it is selected, and none is above the top), got {value!r}"
            )
        return value

    def clip(self, score: float) -> float:
        """``score`` clipped into [low, high].

        >>> COSINE_SCALE.clip(-3.0)
        -1.0
        """
        return min(max(score, self.low), self.high)

    def convert(self, raw: object) -> float:
        """The similarity of a raw store score, clipped into the range; NaN when unusable.

        Never raises on the value (module docstring: the one NaN policy).

        >>> COSINE_SCALE.convert(None), COSINE_SCALE.convert(float("inf"))
        (nan, nan)
        """
        if isinstance(raw, bool) or not isinstance(raw, Real):
            return math.nan
        try:
            value = float(self.transform(float(raw)))
        except (ArithmeticError, ValueError, TypeError):
            return math.nan
        if not math.isfinite(value):
            return math.nan
        return self.clip(-value if self.direction == "distance" else value)


COSINE_SCALE = ScoreScale("cosine", low=-1.0, high=1.0)
"""Cosine similarity (or inner product of unit vectors) on [-1, 1]."""


def as_scale(value: ScoreScale | Sequence[float], *, parameter: str) -> ScoreScale:
    """``value`` if it is a :class:`ScoreScale`, else a pair ``(low, high)`` made into one.

    Errors name ``parameter``.

    >>> as_scale((0, 1), parameter="bounds").bounds
    (0.0, 1.0)
    """
    if isinstance(value, ScoreScale):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError(f"{parameter} must be a ScoreScale or a pair (low, high) of finite numbers")
    low, high = finite(f"{parameter}[0]", value[0]), finite(f"{parameter}[1]", value[1])
    if not low < high:
        raise ValueError(f"{parameter} must satisfy low < high, got ({low!r}, {high!r})")
    return ScoreScale(parameter, low=low, high=high)
