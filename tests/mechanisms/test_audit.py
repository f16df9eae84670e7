"""The audit harness itself: it must be sound (≤ the true ε) and have power (≈ the true ε)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprag_core.audit import AuditResult, audit_epsilon, clopper_pearson, run_audit

TRIALS = 200_000


def randomized_response(epsilon: float):
    """Randomized response on one bit: exactly epsilon-DP (the truth with prob e^ε/(1+e^ε))."""
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))

    def sample(bit: int, n: int, gen: np.random.Generator) -> np.ndarray:
        truthful = gen.random(n) < keep
        return np.where(truthful, bit, 1 - bit)

    return sample


def test_clopper_pearson_exact_values() -> None:
    lo, hi = clopper_pearson(np.array([0, 100]), 100, alpha=0.05)
    # k = 0: upper = 1 - alpha^(1/n); k = n: lower = alpha^(1/n)
    assert hi[0] == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert lo[1] == pytest.approx(0.05 ** (1 / 100), rel=1e-9)
    assert lo[0] == 0.0 and hi[1] == 1.0


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_randomized_response_bound_is_sound_and_tight(epsilon: float) -> None:
    result = run_audit(randomized_response(epsilon), 0, 1, trials=TRIALS, rng=1)
    assert isinstance(result, AuditResult)
    assert result.epsilon_lower_bound <= epsilon
    assert result.epsilon_lower_bound > 0.93 * epsilon  # power: close to the truth
    assert result.trials_d == result.trials_d_prime == TRIALS
    assert result.worst_output in (0, 1) and result.direction in ("D>D'", "D'>D")


def test_mutation_harness_detects_an_understated_claim() -> None:
    # the mechanism is 1.5-DP; claiming 1.0 must be refuted
    result = run_audit(randomized_response(1.5), 0, 1, trials=TRIALS, rng=2)
    assert result.epsilon_lower_bound > 1.0


def test_identical_distributions_give_about_zero() -> None:
    def sample(_: int, n: int, gen: np.random.Generator) -> np.ndarray:
        return gen.integers(0, 6, n)

    result = run_audit(sample, 0, 1, trials=TRIALS, rng=3)
    assert result.epsilon_lower_bound < 0.05


def test_direction_and_worst_output() -> None:
    on_d = np.array([7] * 9000 + [3] * 1000)
    on_d_prime = np.array([7] * 5000 + [3] * 5000)
    result = audit_epsilon(on_d, on_d_prime)
    # the larger ratio is P[3|D'] / P[3|D] = 5 (vs 1.8 for output 7)
    assert (result.worst_output, result.direction) == (3, "D'>D")
    assert 1.4 < result.epsilon_lower_bound < math.log(5)
    flipped = audit_epsilon(on_d_prime, on_d)
    assert (flipped.worst_output, flipped.direction) == (3, "D>D'")
    assert flipped.epsilon_lower_bound == pytest.approx(result.epsilon_lower_bound)


def test_delta_absorbs_a_rare_leak() -> None:
    # D emits a "leak" output (-1) with probability 1e-2, D' never: (0, 1e-2)-DP, not (ε, 0)
    gen = np.random.default_rng(4)
    on_d = np.where(gen.random(TRIALS) < 1e-2, -1, gen.integers(0, 2, TRIALS))
    on_d_prime = gen.integers(0, 2, TRIALS)
    assert audit_epsilon(on_d, on_d_prime).epsilon_lower_bound > 3.0
    assert audit_epsilon(on_d, on_d_prime, delta=1e-2).epsilon_lower_bound < 0.05


def test_float_outputs_are_accepted_when_finite() -> None:
    result = audit_epsilon(np.array([0.5, 1.5]), np.array([0.5, 1.5]))
    assert result.epsilon_lower_bound == 0.0 and result.worst_output is None
