"""The kit's mechanism suites can fail: each one, given a broken subject, raises.

A suite that passes everything proves nothing, so each of its checks is run here
on a subject that breaks it: a docstring without its claim, a mutant that is not
broken, a wrong exact law, a pair that is not tight.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from toy_mechanisms import ToyMechanism

from dprag_core.algorithms.base import Mechanism
from dprag_core.testing.mechanisms import (
    ExactLaw,
    MechanismContract,
    WorstCaseAudit,
    exact_loss,
    missing_claim,
)

EPSILON = math.log(3)


class Coin(ExactLaw[float, int], WorstCaseAudit[float, int]):
    """Randomized response keeping the bit with probability ``keep``: ln 3-DP at 3/4."""

    epsilon = EPSILON
    trials = 20_000

    def mechanism(self) -> float:
        return 0.75

    def mutant(self) -> float:
        return 0.9

    def pair(self) -> tuple[int, int]:
        return 0, 1

    def sample(self, keep: float, bit: int, trials: int, rng: np.random.Generator) -> np.ndarray:
        return np.where(rng.random(trials) < keep, bit, 1 - bit)

    def law(self, keep: float, bit: int) -> dict[int, float]:
        return {bit: keep, 1 - bit: 1 - keep}


class TestCoin(Coin):
    power = 0.8


class HarmlessMutant(Coin):
    seed = 1

    def mutant(self) -> float:
        return 0.7  # within the claim: the audit cannot catch it


class WrongLaw(Coin):
    seed = 2

    def law(self, keep: float, bit: int) -> dict[int, float]:
        return {bit: 0.7, 1 - bit: 0.3}


class OverClaimed(Coin):
    seed = 3
    epsilon = 0.5  # the coin spends ln 3 = 1.1


class LooseClaim(Coin):
    seed = 4
    epsilon = 3.0
    power = 0.8


@pytest.mark.parametrize(
    ("suite", "test"),
    [
        (HarmlessMutant, "test_the_audit_catches_the_mutant"),
        (WrongLaw, "test_the_samples_follow_the_law"),
        (OverClaimed, "test_the_audit_stays_within_the_claim"),
        (OverClaimed, "test_the_exact_loss_stays_within_the_claim"),
        (LooseClaim, "test_the_audit_stays_within_the_claim"),
    ],
    ids=["harmless mutant", "wrong law", "over-claimed audit", "over-claimed law", "not tight"],
)
def test_each_statistical_check_fails_on_its_broken_subject(suite: type, test: str) -> None:
    with pytest.raises(AssertionError):
        getattr(suite(), test)()


def test_exact_loss_is_the_hockey_stick_divergence() -> None:
    assert exact_loss({0: 0.75, 1: 0.25}, {0: 0.25, 1: 0.75}, epsilon=EPSILON) < 1e-12
    assert exact_loss({0: 0.75, 1: 0.25}, {0: 0.25, 1: 0.75}, epsilon=0.5) == pytest.approx(
        0.75 - math.exp(0.5) * 0.25
    )


class Vague(ToyMechanism):
    """Answers with its candidate count; epsilon-DP."""

    __module__ = "app"


class VagueContract(MechanismContract):
    def build(self, **changes: Any) -> Mechanism:
        return Vague(**changes)


def test_the_claim_check_names_what_the_docstring_leaves_out() -> None:
    assert missing_claim(Vague) == ["delta", "sensitivity", "neighbouring relation"]
    with pytest.raises(AssertionError, match="delta, sensitivity, neighbouring relation"):
        VagueContract().test_its_docstring_states_its_claim()


def test_bad_arguments_that_are_accepted_fail_the_contract() -> None:
    class Lenient(VagueContract):
        bad_arguments = (({"k": -1}, "k must be"),)  # the toy accepts any k

    with pytest.raises(pytest.fail.Exception):
        Lenient().test_bad_arguments_are_refused_when_built()


def test_without_pytest_the_kit_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "try:\n    import dprag_core.testing.mechanisms\n"
        "except ImportError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "dprag_core.testing needs pytest: pip install 'dprag[testing]'"
