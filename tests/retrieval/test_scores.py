"""ScoreScale: one conversion and one NaN policy for every adapter, MuRAG and DPThreshold."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dprag_core.retrieval.documents import admit
from dprag_core.retrieval.scores import COSINE_SCALE, ScoreScale, as_scale, read_score
from dprag_core.retrieval.threshold import DPThreshold
from langchain_dprag import ScoreFunction
from llamaindex_dprag.units import normalise_score, score_scale


def _fails(raw: float) -> float:
    if raw > 0.5:
        raise ValueError("a private value")  # a transform that raises on some data
    return math.log(raw)  # ValueError at 0 and below: math domain error


@pytest.mark.parametrize("raw", [None, "0.3", True, math.nan, math.inf, -math.inf, 0.9, 0.0])
def test_unusable_scores_become_nan_never_an_error(raw: object) -> None:
    scale = ScoreScale("log", low=-10.0, high=0.0, transform=_fails)
    assert math.isnan(scale.convert(raw))


def test_convert_applies_transform_then_direction_then_clips() -> None:
    assert COSINE_SCALE.convert(0.25) == 0.25
    assert COSINE_SCALE.convert(3) == 1.0 and COSINE_SCALE.convert(-3) == -1.0
    distance = ScoreScale("l2", low=-4.0, high=0.0, direction="distance")
    assert distance.convert(0.5) == -0.5 and distance.convert(9.0) == -4.0
    half = ScoreScale("half", low=-1.0, high=1.0, transform=lambda d: 1 - d / 2)
    assert half.convert(1.0) == 0.5


def test_unclipped_keeps_finite_scores_and_drops_the_rest() -> None:
    scale = ScoreScale.unclipped()
    assert scale.convert(1e300) == 1e300 and math.isnan(scale.convert(math.inf))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"low": 1.0, "high": 1.0}, ValueError, "low must be < high"),
        ({"low": math.nan, "high": 1.0}, ValueError, "low must be a finite number"),
        ({"low": 0.0, "high": 1.0, "direction": "up"}, ValueError, "direction must be"),
        ({"low": 0.0, "high": 1.0, "transform": 3}, TypeError, "transform must be callable"),
    ],
)
def test_bad_scales_are_refused(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        ScoreScale("x", **kwargs)  # type: ignore[arg-type]


def test_as_scale_takes_a_pair_and_names_the_parameter() -> None:
    assert as_scale((0, 1), parameter="bounds").bounds == (0.0, 1.0)
    assert as_scale(COSINE_SCALE, parameter="bounds") is COSINE_SCALE
    with pytest.raises(ValueError, match="score_bounds must satisfy low < high"):
        as_scale((1, 0), parameter="score_bounds")
    with pytest.raises(TypeError, match="bounds must be a ScoreScale or a pair"):
        as_scale("ab", parameter="bounds")  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [0.3, 1.7, -0.2, math.nan, math.inf, None])
def test_both_adapters_convert_alike(raw: float | None) -> None:
    langchain = ScoreFunction("distance", low=-2.0, high=0.0, direction="distance").convert(raw)
    llamaindex = normalise_score(raw, score_direction="distance", score_range=(0.0, 2.0))
    assert (math.isnan(langchain) and math.isnan(llamaindex)) or langchain == llamaindex
    assert score_scale(score_direction="distance", score_range=(0.0, 2.0)).bounds == (-2.0, 0.0)


def test_dpthreshold_takes_a_scale() -> None:
    scale = ScoreScale("unit", low=0.0, high=1.0)
    assert DPThreshold(epsilon=1.0, bounds=scale).bounds == (0.0, 1.0)


REALS = [
    0.25,
    np.float16(0.25),
    np.float32(0.25),
    np.float64(0.25),
    np.longdouble(0.25),
    Decimal("0.25"),
    Fraction(1, 4),
    np.array(0.25, dtype=np.float32),
    np.array(0.25),
]
INTEGERS = [1, np.int8(1), np.int64(1), np.uint8(1), np.uint64(1), np.array(1, dtype=np.int32)]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(r, 0.25) for r in REALS] + [(i, 1.0) for i in INTEGERS],
    ids=lambda v: type(v).__name__,
)
def test_every_real_number_type_reads_as_its_number(raw: object, expected: float) -> None:
    assert read_score(raw) == expected and type(read_score(raw)) is float
    # one reading everywhere: the scale, the LlamaIndex conversion and the placeholder policy
    assert COSINE_SCALE.convert(raw) == expected
    assert normalise_score(raw) == expected  # type: ignore[arg-type]
    assert admit("a", "t", raw, "u", slot=0).score == expected


class _Broken:
    def __array__(self) -> np.ndarray:
        raise RuntimeError("someone else's conversion")


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "0.25",
        b"1",
        True,
        np.bool_(True),
        np.array(True),
        1j,
        np.complex64(1),
        np.array([0.25]),
        np.array([]),
        np.float32("nan"),
        np.float16("inf"),
        Decimal("NaN"),
        Decimal("sNaN"),
        Decimal("1e400"),
        Fraction(10**400, 3),
        10**400,
        np.longdouble("1e4000"),
        np.datetime64("2020-01-01"),
        _Broken(),
    ],
    ids=lambda v: type(v).__name__,  # stable across processes (xdist)
)
def test_what_is_not_a_finite_real_reads_as_nan_never_an_error(raw: object) -> None:
    assert math.isnan(read_score(raw)) and math.isnan(COSINE_SCALE.convert(raw))
    assert admit("a", "t", raw, "u", slot=3).is_padding
