"""Bad input to the accounting functions: ValueError/TypeError naming the parameter and range."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest

from dprag_core.accounting import (
    InMemoryCorpusAccountant,
    advanced_composition,
    approximate_rdp_to_dp,
    composition_fits,
    gaussian_rdp,
    max_compositions,
    optimal_composition,
    per_token_epsilon,
    pure_dp_rdp,
    rdp_composition,
    rdp_to_dp,
    sequential_composition,
)
from dprag_core.budget import Budget

NAN = math.nan
S, T = Budget(0.1), Budget(10.0, 1e-6)
CURVE = pure_dp_rdp(0.5, [2.0, 4.0])

CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("count < 1", lambda: sequential_composition(S, 0), ValueError,
     "count must be an integer >= 1"),
    ("count float", lambda: optimal_composition(S, 2.5, delta=1e-6), TypeError,  # type: ignore[arg-type]
     "count must be an integer >= 1"),
    ("count bool", lambda: rdp_composition(S, True, delta=1e-6), TypeError,
     "count must be an integer >= 1"),
    ("eps0 = 0", lambda: max_compositions(Budget(0.0), T), ValueError,
     "step.epsilon must be > 0"),
    ("total 0", lambda: per_token_epsilon(Budget(0.0), 3), ValueError,
     "total.epsilon must be > 0"),
    ("eps0 < 0", lambda: per_token_epsilon(Budget(-1.0), 3), ValueError,
     "epsilon must be a finite number >= 0"),
    ("eps0 NaN", lambda: pure_dp_rdp(NAN), ValueError, "epsilon must be a finite number > 0"),
    ("eps0 inf", lambda: Budget(math.inf), ValueError, "epsilon must be a finite number >= 0"),
    ("delta >= 1", lambda: Budget(1.0, 1.0), ValueError, "delta must be in [0, 1)"),
    ("delta NaN", lambda: optimal_composition(S, 3, delta=NAN), ValueError,
     "delta must be in [0, 1)"),
    ("conversion delta 0", lambda: rdp_to_dp(CURVE, [2.0, 4.0], delta=0.0), ValueError,
     "delta must be in (0, 1)"),
    ("delta_slack = 1", lambda: advanced_composition(S, 5, delta_slack=1.0), ValueError,
     "delta_slack must be in (0, 1)"),
    ("approximate_delta < 0",
     lambda: approximate_rdp_to_dp(CURVE, [2.0, 4.0], delta=1e-6, approximate_delta=-1e-3),
     ValueError, "approximate_delta must be in [0, 1)"),
    ("step bigger than total", lambda: max_compositions(Budget(11.0), T), ValueError,
     "step must fit within total (step.epsilon <= 10"),
    ("step delta bigger than total", lambda: max_compositions(Budget(1.0, 1e-5), T), ValueError,
     "step.delta <= 1e-06"),
    ("step not a Budget", lambda: max_compositions(0.1, T), TypeError,  # type: ignore[arg-type]
     "step must be a Budget"),
    ("bounded_range non-bool", lambda: max_compositions(S, T, bounded_range=1), TypeError,  # type: ignore[arg-type]
     "bounded_range must be a bool (True or False)"),
    ("bounded_range str", lambda: per_token_epsilon(T, 3, bounded_range="yes"), TypeError,  # type: ignore[arg-type]
     "bounded_range must be a bool (True or False)"),
    ("bounded_range impure step",
     lambda: max_compositions(Budget(0.1, 1e-9), T, bounded_range=True), ValueError,
     "bounded_range=True needs a pure step (step.delta == 0)"),
    ("tokens < 1", lambda: per_token_epsilon(T, 0), ValueError, "tokens must be an integer >= 1"),
    ("total not a Budget", lambda: per_token_epsilon(10.0, 3), TypeError,  # type: ignore[arg-type]
     "total must be a Budget"),
    ("count * delta0 >= 1", lambda: sequential_composition(Budget(0.1, 0.4), 3), ValueError,
     "count * step.delta must be < 1"),
    ("unknown bound", lambda: composition_fits("kov", S, 3, T), ValueError,
     "bound must be one of ('sequential', 'advanced', 'optimal', 'rdp', 'bounded_range_rdp')"),
    ("orders <= 1", lambda: pure_dp_rdp(1.0, [0.5, 2.0]), ValueError,
     "orders must be a non-empty 1-D array of finite numbers > 1"),
    ("orders not numbers", lambda: gaussian_rdp(1.0, ["a"]), TypeError,
     "orders must be a 1-D array of numbers > 1"),
    ("sigma <= 0", lambda: gaussian_rdp(-1.0), ValueError, "sigma must be a finite number > 0"),
    ("sensitivity inf", lambda: gaussian_rdp(1.0, sensitivity=math.inf), ValueError,
     "sensitivity must be a finite number > 0"),
    ("rdp shape", lambda: rdp_to_dp([1.0], [2.0, 3.0], delta=1e-5), ValueError,
     "rdp must have the shape of orders"),
    ("rdp negative", lambda: rdp_to_dp(np.array([-1.0, 1.0]), [2.0, 3.0], delta=1e-5),
     ValueError, "rdp must hold numbers >= 0"),
    ("accountant total", lambda: InMemoryCorpusAccountant(1.0), TypeError,  # type: ignore[arg-type]
     "total must be a Budget"),
]  # fmt: skip


@pytest.mark.parametrize(("fn", "exc", "message"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_rejected_with_a_clear_message(
    fn: Callable[[], object], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        fn()


def test_bad_charge_spends_nothing() -> None:
    acc = InMemoryCorpusAccountant(Budget(1.0, 1e-6))
    with pytest.raises(TypeError, match="cost must be a Budget"):
        acc.charge(0.5)  # type: ignore[arg-type]
    assert (acc.spent_epsilon, acc.spent_delta, acc.queries) == (0.0, 0.0, 0)
