"""Every public mechanism rejects bad parameters with an error naming the parameter."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dprag_core.audit import audit_epsilon, run_audit
from dprag_core.mechanisms import (
    AboveThreshold,
    discrete_laplace,
    exponential_mechanism,
    exponential_probabilities,
    gaussian,
    gumbel,
    laplace,
    limited_domain_top1,
)

COUNTS = [3, 1, 0]


def ld(**kw: Any) -> Callable[[], object]:
    args: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-5, "k_bar": 2, "rng": 0, **kw}
    counts = args.pop("counts", COUNTS)
    return lambda: limited_domain_top1(counts, **args)


def em(utilities: Any = (0.0, 1.0), **kw: Any) -> Callable[[], object]:
    args: dict[str, Any] = {"epsilon": 1.0, "rng": 0, **kw}
    return lambda: exponential_mechanism(utilities, **args)


def svt(**kw: Any) -> Callable[[], object]:
    args: dict[str, Any] = {"threshold": 1.0, "epsilon": 1.0, **kw}
    return lambda: AboveThreshold(**args)


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("laplace scale 0", lambda: laplace(0.0), ValueError, "scale"),
    ("laplace scale -1", lambda: laplace(-1.0), ValueError, "scale"),
    ("laplace scale nan", lambda: laplace(math.nan), ValueError, "scale"),
    ("laplace scale str", lambda: laplace("1"), TypeError, "scale"),  # type: ignore[call-overload]
    ("gaussian sigma inf", lambda: gaussian(math.inf), ValueError, "sigma"),
    ("gumbel scale 0", lambda: gumbel(0.0), ValueError, "scale"),
    ("discrete_laplace scale -2", lambda: discrete_laplace(-2.0), ValueError, "scale"),
    ("discrete_laplace bad rng", lambda: discrete_laplace(1.0, rng="seed"), TypeError, "rng"),  # type: ignore[call-overload]
    ("em epsilon 0", em(epsilon=0.0), ValueError, "epsilon"),
    ("em epsilon nan", em(epsilon=math.nan), ValueError, "epsilon"),
    ("em epsilon bool", em(epsilon=True), TypeError, "epsilon"),
    ("em sensitivity 0", em(sensitivity=0.0), ValueError, "sensitivity"),
    ("em utilities nan", em([math.nan, 1.0]), ValueError, "utilities"),
    ("em utilities empty", em([]), ValueError, "utilities"),
    ("em utilities all -inf", em([-math.inf]), ValueError, "utilities"),
    (
        "em probabilities epsilon inf",
        lambda: exponential_probabilities([1.0], epsilon=math.inf),
        ValueError,
        "epsilon",
    ),
    ("ld epsilon -1", ld(epsilon=-1.0), ValueError, "epsilon"),
    ("ld delta 0", ld(delta=0.0), ValueError, "delta"),
    ("ld delta 1", ld(delta=1.0), ValueError, "delta"),
    ("ld delta nan", ld(delta=math.nan), ValueError, "delta"),
    ("ld k_bar 0", ld(k_bar=0), ValueError, "k_bar"),
    ("ld k_bar float", ld(k_bar=2.0), TypeError, "k_bar"),
    ("ld max_changed 0", ld(max_changed=0), ValueError, "max_changed"),
    ("ld counts empty", ld(counts=[]), ValueError, "counts"),
    ("ld counts negative", ld(counts=[3, -1]), ValueError, "counts"),
    ("ld counts inf", ld(counts=[math.inf, 1]), ValueError, "counts"),
    ("ld counts 2-D", ld(counts=[[1, 2]]), ValueError, "counts"),
    ("svt epsilon 0", svt(epsilon=0.0), ValueError, "epsilon"),
    ("svt threshold nan", svt(threshold=math.nan), ValueError, "threshold"),
    ("svt sensitivity -1", svt(sensitivity=-1.0), ValueError, "sensitivity"),
    (
        "svt value nan",
        lambda: AboveThreshold(threshold=0.0, epsilon=1.0).test(math.nan),
        ValueError,
        "value",
    ),
    ("audit empty", lambda: audit_epsilon([], [1]), ValueError, "samples_d"),
    ("audit nan output", lambda: audit_epsilon([1.0], [math.nan]), ValueError, "samples_d_prime"),
    ("audit str outputs", lambda: audit_epsilon(["a"], ["b"]), TypeError, "samples_d"),
    ("audit delta 1", lambda: audit_epsilon([1], [1], delta=1.0), ValueError, "delta"),
    (
        "audit confidence 1",
        lambda: audit_epsilon([1], [1], confidence=1.0),
        ValueError,
        "confidence",
    ),
    (
        "run_audit trials 0",
        lambda: run_audit(lambda d, n, g: np.zeros(n), 0, 1, trials=0),
        ValueError,
        "trials",
    ),
]


@pytest.mark.parametrize(("case", "call", "error", "name"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_naming_the_parameter(
    case: str, call: Callable[[], object], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        call()


def test_numeric_parameters_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        exponential_mechanism([0.0, 1.0], 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        limited_domain_top1(COUNTS, 1.0, 1e-5, 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        AboveThreshold(1.0, 1.0)  # type: ignore[misc]
