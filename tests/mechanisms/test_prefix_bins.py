"""MuRAG-Ada's noisy prefix-sum bin walk: exact law, audit on the worst-case pair, mutation
(through the kit's suites, dprag_core.testing.mechanisms)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from dprag_core.mechanisms.noise import discrete_laplace
from dprag_core.mechanisms.prefix_bins import noisy_bin_walk
from dprag_core.testing.mechanisms import ExactLaw, WorstCaseAudit, chi_square_pvalue

EPSILON = 1.0
TARGET = 3
TRIALS = 40_000
# Worst-case pair: the neighbour adds one unit to the first bin, which decides whether
# the walk halts there: P[halt at 1] = P[N >= 0] vs P[N >= 1], a ratio of exactly e^eps.
D = [TARGET + 1, 0, 2]
D_PRIME = [TARGET, 0, 2]


def exact_law(counts: list[int], *, epsilon: float, target: int) -> np.ndarray:
    """P[visited = i] for i = 1..B, by propagating the running-sum distribution."""
    half = int(60 / epsilon) + 10 * (sum(counts) + target + 1)
    support = np.arange(-half, half + 1)
    a = math.exp(-epsilon)
    noise = (1 - a) / (1 + a) * a ** np.abs(np.arange(-half, half + 1))
    running = np.zeros_like(support, dtype=float)
    running[half] = 1.0  # sum 0 before any bin
    law = []
    for i, c in enumerate(counts):
        running = np.convolve(running, noise, mode="same")
        running = np.roll(running, c)
        above = support > target
        if i == len(counts) - 1:
            law.append(running.sum())
        else:
            law.append(running[above].sum())
            running = np.where(above, 0.0, running)
    return np.array(law)


def broken_walk(bin_counts, *, epsilon, target, rng=None):  # type: ignore[no-untyped-def]
    """Mutation: noise scale 1/(2 epsilon) — half the noise the claim needs."""
    total = 0
    for i, c in enumerate(bin_counts, start=1):
        total += c + discrete_laplace(1 / (2 * epsilon), rng=rng)
        if total > target:
            return i
    return i


Walk = Callable[..., int]


class TestBinWalk(ExactLaw[Walk, list[int]], WorstCaseAudit[Walk, list[int]]):
    """The kit's suites on the worst-case pair; the mutant has half the noise."""

    epsilon = EPSILON
    trials = TRIALS
    seed = 2
    power = 0.8

    def mechanism(self) -> Walk:
        return noisy_bin_walk

    def mutant(self) -> Walk:
        return broken_walk

    def pair(self) -> tuple[list[int], list[int]]:
        return D, D_PRIME

    def sample(
        self, walk: Walk, counts: list[int], trials: int, gen: np.random.Generator
    ) -> np.ndarray:
        return np.array(
            [walk(counts, epsilon=EPSILON, target=TARGET, rng=gen) for _ in range(trials)]
        )

    def law(self, walk: Walk, counts: list[int]) -> dict[int, float]:
        return dict(enumerate(exact_law(counts, epsilon=EPSILON, target=TARGET).tolist(), start=1))


def test_the_pair_is_tight_and_the_law_test_has_power() -> None:
    law = exact_law(D, epsilon=EPSILON, target=TARGET)
    assert abs(law.sum() - 1) < 1e-9
    # the exact privacy loss of "halt at bin 1" is exactly epsilon
    p, q = law[0], exact_law(D_PRIME, epsilon=EPSILON, target=TARGET)[0]
    assert math.log(p / q) == pytest.approx(EPSILON, rel=1e-9)
    # power: the law with the wrong epsilon is rejected
    draws = TestBinWalk().drawn("mechanism", 0)
    wrong = exact_law(D, epsilon=2 * EPSILON, target=TARGET)
    assert chi_square_pvalue(draws, dict(enumerate(wrong.tolist(), start=1))) < 1e-6


def test_bins_are_read_lazily_and_all_visited_when_never_exceeded() -> None:
    read: list[int] = []

    def counts():  # type: ignore[no-untyped-def]
        for c in (1000, 1, 2):
            read.append(c)
            yield c

    assert noisy_bin_walk(counts(), epsilon=5.0, target=10, rng=0) == 1
    assert read == [1000]
    assert noisy_bin_walk([0, 0, 0, 0], epsilon=20.0, target=10, rng=0) == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bin_counts": [1], "epsilon": 0.0, "target": 1}, "epsilon"),
        ({"bin_counts": [1], "epsilon": 1.0, "target": -1}, "target"),
        ({"bin_counts": [-1], "epsilon": 1.0, "target": 1}, "bin_counts"),
        ({"bin_counts": [1.5], "epsilon": 1.0, "target": 1}, "bin_counts"),
        ({"bin_counts": [], "epsilon": 1.0, "target": 1}, "at least one bin"),
    ],
)
def test_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        noisy_bin_walk(**kwargs)
