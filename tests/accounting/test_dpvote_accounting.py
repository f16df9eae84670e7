"""The default per-token δ of DPVote / DPSparseVote: it maximises c_max (pinned against
dp_accounting's PLD) and is the largest δ_token that does."""

from __future__ import annotations

import pytest

from dprag_core.accounting.composition import max_compositions
from dprag_core.accounting.dpvote import default_delta_token, token_limit
from dprag_core.budget import Budget
from tests.accounting.test_composition import pld_epsilon


def test_issue_example_reaches_the_optimal_count() -> None:
    # (ε, δ, ε_token) = (1, 1e-5, 0.01): δ/(2·100) per token held c_max to 200.
    old = token_limit(epsilon=1.0, delta=1e-5, epsilon_token=0.01, delta_token=1e-5 / 200)
    assert old.count == 200
    d_tok = default_delta_token(epsilon=1.0, delta=1e-5, epsilon_token=0.01)
    new = token_limit(epsilon=1.0, delta=1e-5, epsilon_token=0.01, delta_token=d_tok)
    assert (new.count, new.bound) == (720, "optimal")
    # Independently: dp_accounting's PLD of 720 (0.01, δ_token) steps fits (ε=1, δ=1e-5) ...
    assert pld_epsilon(Budget(0.01, d_tok), 720, 1e-5) <= 1.0
    # ... and 721 steps do not fit even with pure steps (no δ_token could reach 721).
    assert pld_epsilon(Budget(0.01), 721, 1e-5) > 1.0


@pytest.mark.parametrize(
    ("epsilon", "delta", "epsilon_token"),
    [(1.0, 1e-5, 0.01), (10.0, 1e-6, 0.1), (1.0, 1e-4, 0.05), (5.0, 1e-4, 5 / 6)],
)
def test_default_is_the_largest_delta_token_reaching_the_pure_count(
    epsilon: float, delta: float, epsilon_token: float
) -> None:
    best = max_compositions(Budget(epsilon_token), Budget(epsilon, delta)).count
    d_tok = default_delta_token(epsilon=epsilon, delta=delta, epsilon_token=epsilon_token)
    kwargs = {"epsilon": epsilon, "delta": delta, "epsilon_token": epsilon_token}
    assert token_limit(**kwargs, delta_token=d_tok).count == best
    if d_tok < delta / best:  # bisected: 1% more δ_token loses a token
        assert token_limit(**kwargs, delta_token=1.01 * d_tok).count < best


def test_sequential_regime_gives_every_token_its_share_of_delta() -> None:
    # ε_token = ε/6 (the benchmarks' setting): 6 tokens by the sequential bound, δ/6 each
    # (the earlier default gave δ/12, a higher LimitedDomain threshold for no extra token).
    d_tok = default_delta_token(epsilon=5.0, delta=1e-4, epsilon_token=5 / 6)
    assert d_tok == pytest.approx(1e-4 / 6, rel=1e-12)
    limit = token_limit(epsilon=5.0, delta=1e-4, epsilon_token=5 / 6, delta_token=d_tok)
    assert (limit.count, limit.bound) == (6, "sequential")


def test_zero_delta_is_refused() -> None:
    with pytest.raises(ValueError, match="delta must be > 0"):
        default_delta_token(epsilon=1.0, delta=0.0, epsilon_token=0.1)
