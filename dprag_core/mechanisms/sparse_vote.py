"""The composed per-token rule of DPSparseVote (Koga et al. Alg. 3; MuRAG Alg. 5).

One token step over a vote histogram of m voters (each voter's greedy token
counts once) and the public prompt's greedy token y_pub:

1. AboveThreshold with ε_token/2 (sensitivity 1) on ``−count[y_pub]`` vs ``−τ``
   (Koga's test ``count + Lap(4/(ε/2)) ≤ τ + Lap(2/(ε/2))``; Laplace noise is
   symmetric). When it does not fire, y_pub is emitted at no cost.
2. When it fires ("spend"), the token is chosen privately with ε_token/2:
   LimitedDomain(ε_token/2, δ_token, k̄ = m, at most 2 counts changed, not
   monotone; ⊥ = -1 stops generation) or the exponential mechanism over the
   full-vocabulary counts (Δ = 1, not monotone; ``selection="exponential"``),
   and the noisy threshold is re-drawn.

**Claim**: each spend closes one SVT run and is (ε_token, δ_token)-DP
(ε_token/2 for the SVT run + ε_token/2 for the selection; δ_token = 0 for the
exponential selection, which is then pure ε_token-DP), w.r.t. neighbouring
histograms that differ in **one voter's vote** (one count −1 and another +1:
L∞ sensitivity 1, two counts change), which is what one added or removed
privacy unit does to the voters (one substituted voter, docs/design.md §1). Steps that
do not spend cost nothing beyond their SVT run's share; a trailing run without
a spend fits in an unused slot. The composition over a whole answer (c_max
spends) is :mod:`dprag_core.accounting.dpvote`'s.

Tests: tests/mechanisms/test_sparse_vote.py checks the exact law of two steps
(closed-form SVT tail times the selection's law, threshold kept across free
steps) and audits a LimitedDomain-path spend; tests/algorithms/test_dpvote_audit.py
audits a spend on the SVT canary pair.

Cost per step does not grow with the vocabulary: both selections are exact
O(m) samplers over the non-zero counts (:func:`vote_select`).

>>> counts = SparseCounts.from_dense([3, 0, 0])
>>> vote_select(counts, selection="exponential", epsilon=60.0, delta=0.0, k_bar=3, size=2,
...             rng=np.random.default_rng(0)).tolist()
[0, 0]
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.mechanisms.limited_domain import (
    limited_domain_candidates_sparse,
    limited_domain_sample,
)
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.sparse_exponential import sparse_exponential_sample
from dprag_core.mechanisms.sparse_vector import AboveThresholdBatch
from dprag_core.validation import finite, positive_finite, positive_int, probability, strict_init

__all__ = ["MAX_CHANGED", "SELECTIONS", "Selection", "SparseVoteRule", "vote_select"]

Selection = Literal["limited_domain", "exponential"]
SELECTIONS = ("limited_domain", "exponential")
#: One voter's vote moving from token a to token b changes 2 counts (substitution).
MAX_CHANGED = 2


def vote_select(
    counts: SparseCounts,
    *,
    selection: Selection,
    epsilon: float,
    delta: float,
    k_bar: int,
    size: int,
    rng: np.random.Generator,
    domain: npt.NDArray[np.intp] | None = None,
) -> npt.NDArray[np.intp]:
    """``size`` independent private selections from one histogram (-1 = ⊥), in O(m).

    Both selections read only the non-zero counts and are exactly the dense
    mechanisms on ``counts.dense()``: the exponential mechanism via
    :func:`~dprag_core.mechanisms.sparse_exponential.sparse_exponential_sample`
    (``domain``, public sorted ids, restricts it), LimitedDomain via
    :func:`~dprag_core.mechanisms.limited_domain.limited_domain_candidates_sparse`.
    """
    if selection == "exponential":
        return sparse_exponential_sample(
            counts,
            epsilon=epsilon,
            sensitivity=1.0,
            monotone=False,
            size=size,
            domain=domain,
            rng=rng,
        )
    candidates = limited_domain_candidates_sparse(
        counts,
        epsilon=epsilon,
        delta=delta,
        k_bar=k_bar,
        max_changed=MAX_CHANGED,
        monotone=False,
    )
    return limited_domain_sample(candidates, size=size, rng=rng)


class SparseVoteRule:
    """The DPSparseVote token rule for ``runs`` independent answers in lockstep.

    :class:`DPSparseVote` uses ``runs=1``; privacy audits use many runs at once on
    the same histograms (the code path is the same). :meth:`decide` returns, per
    run, the token (-1 for ⊥) and whether the step spent budget. ``allowed`` is a
    public mask of the tokens the exponential selection may return (default: all).
    Histograms may be dense arrays or :class:`SparseCounts`; either way the
    selection runs on the non-zero counts (O(m) per step, exact: see :func:`vote_select`).

    >>> rule = SparseVoteRule(epsilon_token=2.0, delta_token=1e-6, threshold=1.0, m=2,
    ...                       selection="exponential", rng=0)
    >>> tokens, spent = rule.decide(np.array([2, 0, 0]), public=0)
    >>> tokens.tolist(), spent.tolist()
    ([0], [False])
    """

    @strict_init
    def __init__(
        self,
        *,
        epsilon_token: float,
        delta_token: float,
        threshold: float,
        m: int,
        selection: Selection,
        runs: int = 1,
        allowed: npt.NDArray[np.bool_] | None = None,
        rng: RngLike = None,
    ) -> None:
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        self._half = positive_finite("epsilon_token", epsilon_token) / 2
        self._delta = probability("delta_token", delta_token, allow_zero=selection == "exponential")
        self._m = positive_int("m", m)
        self._selection: Selection = selection
        self._rng = make_rng(rng)
        # Koga's test  count + Lap(4/e) <= tau + Lap(2/e)  is AboveThreshold on -count vs -tau
        # (Laplace noise is symmetric), sensitivity 1.
        self._svt = AboveThresholdBatch(
            threshold=-finite("threshold", threshold),
            epsilon=self._half,
            sensitivity=1.0,
            runs=runs,
            rng=self._rng,
        )
        self._runs = runs
        self._domain = None if allowed is None else np.flatnonzero(np.asarray(allowed, dtype=bool))

    def decide(
        self, counts: SparseCounts | npt.ArrayLike, *, public: int
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """One token step: free public token, or a private selection (spend)."""
        if not isinstance(counts, SparseCounts):
            counts = SparseCounts.from_dense(counts)
        spend = self._svt.test(-float(counts.count(public)))
        tokens = np.full(self._runs, public, dtype=np.intp)
        n_spend = int(spend.sum())
        if n_spend:
            tokens[spend] = vote_select(
                counts,
                selection=self._selection,
                epsilon=self._half,
                delta=self._delta,
                k_bar=self._m,
                size=n_spend,
                rng=self._rng,
                domain=self._domain,
            )
        return tokens, spend
