"""Statistical audit of one DPSparseVote spend (SVT run + private selection), docs/design.md §9.

One spend of DPSparseVote is an SVT run with ε_token/2 (the free tokens before it
and the test that fires) followed by a selection with ε_token/2: claimed
(ε_token, δ_token)-DP, pure ε_token for the exponential variant. The audit runs
the production :class:`SparseVoteRule` (vectorised over runs, same code as
``runs=1``) on a worst-case pair of voter sets: one voter differs and its vote
moves in opposite directions before and at the spend (the SVT canary shape), with
m = 2 and threshold m/2. The output of a run is (step of the first spend, token),
or "never": a post-processing of the transcript that depends only on the first run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dprag_core.audit import audit_epsilon
from dprag_core.mechanisms.sparse_vote import SparseVoteRule

RUNS = 200_000
STEPS = 8
PUBLIC = 0


def _pair() -> tuple[list[list[int]], list[list[int]]]:
    """Vote histograms over tokens [public, other] per step, for D and D'.

    Voter 1 always votes public before the last step and public at it; voter 2 (the
    one whose documents differ) votes public before the last step in D and switches
    to "other" at the last step, the reverse in D'.
    """
    d = [[2, 0]] * (STEPS - 1) + [[1, 1]]
    d_prime = [[1, 1]] * (STEPS - 1) + [[2, 0]]
    return d, d_prime


def _first_spend(
    histograms: list[list[int]], *, rule_cls: type, epsilon_token: float, selection: str, seed: int
) -> np.ndarray:
    rule = rule_cls(
        epsilon_token=epsilon_token,
        delta_token=0.0 if selection == "exponential" else 1e-6,
        threshold=1.0,
        m=2,
        selection=selection,
        runs=RUNS,
        rng=seed,
    )
    out = np.full(RUNS, -100, dtype=np.int64)
    done = np.zeros(RUNS, dtype=bool)
    for step, counts in enumerate(histograms):
        tokens, spent = rule.decide(np.asarray(counts, dtype=np.int64), public=PUBLIC)
        new = spent & ~done
        out[new] = 10 * step + tokens[new] + 1  # token -1 (⊥) -> 10*step
        done |= spent
    return out


def _audit(rule_cls: type, *, epsilon_token: float, selection: str) -> Any:
    d, d_prime = _pair()
    kw: dict[str, Any] = {"rule_cls": rule_cls, "epsilon_token": epsilon_token}
    on_d = _first_spend(d, selection=selection, seed=11, **kw)
    on_d_prime = _first_spend(d_prime, selection=selection, seed=12, **kw)
    delta = 0.0 if selection == "exponential" else 1e-6
    return audit_epsilon(on_d, on_d_prime, delta=delta)


class _NoSplit(SparseVoteRule):
    """Broken: SVT and selection each get the full ε_token (the halving is forgotten)."""

    def __init__(self, **kw: Any) -> None:
        kw["epsilon_token"] = 2 * kw["epsilon_token"]
        super().__init__(**kw)


@pytest.mark.parametrize("selection", ["exponential", "limited_domain"])
def test_sparse_vote_spend_within_claim(selection: str) -> None:
    result = _audit(SparseVoteRule, epsilon_token=2.0, selection=selection)
    assert 0.3 < result.epsilon_lower_bound <= 2.0, result


def test_mutation_without_budget_split_exceeds_claim() -> None:
    result = _audit(_NoSplit, epsilon_token=2.0, selection="exponential")
    assert result.epsilon_lower_bound > 2.0, result
