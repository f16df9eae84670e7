"""One score scale: how a store's raw scores become dprag similarities on a public range.

Every selection proof reads scores as similarities (higher = more relevant) on
a **public** range [low, high] fixed before any data is seen: the DP
threshold's bounds, MuRAG's τ, the clipping that bounds each unit's influence.
:class:`ScoreScale` holds that range with the conversion from the store's raw
score: ``transform`` (e.g. squared L2 → cosine on unit vectors), then
``direction`` (``"distance"`` negates), then clipping into [low, high].

**Reading a raw score (one rule, everywhere).** :func:`read_score` is the only
place a store's raw score becomes a number: every value of a real-number type
reads as that number, whatever the type: Python ``int`` and ``float``,
``fractions.Fraction``, ``decimal.Decimal``, NumPy scalars of any width
(``float16`` to ``longdouble``, signed and unsigned integers) and 0-d arrays
of those (also anything NumPy reads as one through ``__array__``, e.g. a 0-d
CPU tensor). Stores return such types: LangChain's FAISS store (dprag's own
:func:`~langchain_dprag.vectorstores.faiss_inner_product` too) gives
``numpy.float32``. Not a score, so NaN: ``None``, strings, complex numbers,
arrays of more than one value, and **booleans** (``bool``, ``numpy.bool_``: a
truth value measures no relevance; reading ``True`` as 1 would be a guess).

**NaN policy (one, everywhere).** A raw score that is missing, not of a real
number type, NaN or infinite (or too large for a float), or that the transform
turns into one (or on which the transform raises an arithmetic, value or type
error), converts to NaN, and the adapters turn a NaN score into a placeholder
that keeps its rank slot and is never a candidate
(:func:`~dprag_core.retrieval.documents.admit`). Why this policy and not "NaN →
low bound" or "raise":

- scores are converted *after* the query was charged, so raising would make
  the occurrence of an error depend on the private data;
- dropping is a function of that one document alone, so neighbouring corpora
  still differ by one unit (clipping ±inf to a bound would claim a relevance
  the store never measured and rank the document first or last);
- a NaN never enters a sort or a comparison (where it makes every order
  meaningless), and the placeholder keeps "fewer than k came back" meaning
  "the store is exhausted".

**Metrics.** What a store's raw score *is* (cosine similarity, cosine
distance, squared L2, ...) is a fact about the store, read from the store object
by the adapters' store tables, never guessed from the scores. :data:`METRICS`
names each kind once (its direction and its range on unit-norm vectors), and
:data:`METRIC_SCALES` gives, per metric, the scale that turns it into a cosine
similarity on [-1, 1] for unit-norm embeddings (e.g. ``1 - d`` for a cosine
distance, ``1 - d/2`` for a squared L2 distance). On other embeddings the
conversion still keeps the store's order; only the public range is then the
user's to declare.

>>> import numpy as np
>>> COSINE_SCALE.convert(1.5), COSINE_SCALE.convert(float("nan")), read_score(np.float32(0.5))
(1.0, nan, 0.5)
>>> ScoreScale("l2", low=-4.0, high=0.0, direction="distance").convert(0.5)
-0.5
>>> METRIC_SCALES["cosine_distance"].convert(0.25), METRICS["squared_l2"].direction
(0.75, 'distance')
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from numbers import Real
from typing import Literal

import numpy as np

from dprag_core.validation import finite

__all__ = [
    "COSINE_SCALE",
    "METRICS",
    "METRIC_SCALES",
    "Direction",
    "Metric",
    "ScoreScale",
    "as_scale",
    "read_score",
]

Direction = Literal["similarity", "distance"]
_DIRECTIONS = ("similarity", "distance")


_REAL_KINDS = frozenset("fiu")  # NumPy dtype kinds: float, signed and unsigned integer


def read_score(raw: object) -> float:
    """``raw`` as a finite float when it is a real number, else NaN (module docstring).

    The one reading of a raw score, for every store and adapter; never raises.

    >>> from decimal import Decimal
    >>> from fractions import Fraction
    >>> import numpy as np
    >>> [read_score(v) for v in (np.float16(0.5), np.int64(2), Decimal("0.25"), Fraction(1, 4))]
    [0.5, 2.0, 0.25, 0.25]
    >>> read_score(np.array(0.75, dtype=np.float32)), read_score(10**400), read_score(True)
    (0.75, nan, nan)
    >>> [read_score(v) for v in (None, "0.5", 1j, np.array([0.5]), Decimal("sNaN"))]
    [nan, nan, nan, nan, nan]
    """
    if isinstance(raw, (bool, np.bool_)):
        return math.nan
    if not isinstance(raw, (Real, Decimal)):
        try:  # a 0-d array, or what NumPy reads as one (__array__)
            array = np.asarray(raw) if hasattr(raw, "__array__") else None
        except Exception:  # someone else's __array__: any failure is "not a number"
            return math.nan
        if array is None or array.ndim != 0 or array.dtype.kind not in _REAL_KINDS:
            return math.nan
        raw = array[()]
    try:
        value = float(raw)
    except (ArithmeticError, ValueError, TypeError):  # too large, a signalling NaN
        return math.nan
    return value if math.isfinite(value) else math.nan


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

    def with_range(self, low: float | None = None, high: float | None = None) -> ScoreScale:
        """The same conversion on a narrower (or other) public range.

        >>> COSINE_SCALE.with_range(low=0.3).bounds
        (0.3, 1.0)
        """
        return replace(
            self,
            low=self.low if low is None else low,
            high=self.high if high is None else high,
        )

    @property
    def as_is(self) -> bool:
        """True for a similarity read as it is (no transform): only a range on the raw score.

        >>> COSINE_SCALE.as_is, ScoreScale("d", low=-1.0, high=0.0, direction="distance").as_is
        (True, False)
        """
        return self.transform is _identity and self.direction == "similarity"

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

        ``raw`` is read by :func:`read_score` (any real-number type); never
        raises on the value (module docstring: the one NaN policy).

        >>> import numpy as np
        >>> COSINE_SCALE.convert(None), COSINE_SCALE.convert(float("inf"))
        (nan, nan)
        >>> METRIC_SCALES["cosine_distance"].convert(np.float32(0.25))
        0.75
        """
        number = read_score(raw)
        if math.isnan(number):
            return math.nan
        try:
            value = float(self.transform(number))
        except (ArithmeticError, ValueError, TypeError):
            return math.nan
        if not math.isfinite(value):
            return math.nan
        return self.clip(-value if self.direction == "distance" else value)


COSINE_SCALE = ScoreScale("cosine", low=-1.0, high=1.0)
"""Cosine similarity (or inner product of unit vectors) on [-1, 1]."""


@dataclass(frozen=True)
class Metric:
    """One kind of raw store score: its name, direction and meaning.

    ``unit_range``: the raw range on unit-norm embeddings (``None``: no fixed
    range, e.g. an L1 distance grows with the dimension).

    >>> METRICS["cosine_distance"].unit_range
    (0.0, 2.0)
    """

    name: str
    direction: Direction
    meaning: str
    unit_range: tuple[float, float] | None


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("cosine", "similarity", "cosine similarity", (-1.0, 1.0)),
        Metric("inner_product", "similarity", "inner product", (-1.0, 1.0)),
        Metric("cosine_distance", "distance", "cosine distance 1 - cos", (0.0, 2.0)),
        Metric("ip_distance", "distance", "inner-product distance 1 - q.v", (0.0, 2.0)),
        Metric("negative_inner_product", "distance", "negative inner product -q.v", (-1.0, 1.0)),
        Metric("squared_l2", "distance", "squared L2 distance", (0.0, 4.0)),
        Metric("l2", "distance", "L2 distance", (0.0, 2.0)),
        Metric("manhattan", "distance", "L1 (Manhattan) distance", None),
    )
}
"""Every raw score kind the store tables name (module docstring)."""


def _one_minus(raw: float) -> float:
    return 1.0 - raw


def _negated(raw: float) -> float:
    return -raw


def _squared_l2_to_cosine(raw: float) -> float:
    return 1.0 - raw / 2.0


def _l2_to_cosine(raw: float) -> float:
    return 1.0 - raw * raw / 2.0


METRIC_SCALES: dict[str, ScoreScale] = {
    "cosine": COSINE_SCALE,
    "inner_product": COSINE_SCALE,
    "cosine_distance": ScoreScale("cosine_distance", low=-1.0, high=1.0, transform=_one_minus),
    "ip_distance": ScoreScale("ip_distance", low=-1.0, high=1.0, transform=_one_minus),
    "negative_inner_product": ScoreScale(
        "negative_inner_product", low=-1.0, high=1.0, transform=_negated
    ),
    "squared_l2": ScoreScale(
        "squared_l2_unit", low=-1.0, high=1.0, transform=_squared_l2_to_cosine
    ),
    "l2": ScoreScale("l2_unit", low=-1.0, high=1.0, transform=_l2_to_cosine),
}
"""Per metric, the conversion to a cosine similarity on [-1, 1] (unit-norm embeddings).

Each transform is non-increasing in a distance and the identity on a
similarity, so the converted scores keep the store's order. No entry for
``manhattan``: an L1 distance is not a function of the cosine.
"""


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
