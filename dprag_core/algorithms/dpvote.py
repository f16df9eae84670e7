"""DPVote and DPSparseVote: token-by-token DP voting over m voters (Koga et al. Alg. 2, 3;
MuRAG Alg. 5 for the exponential-mechanism variant).

The top m*k retrieved candidates are split uniformly at random into m voters
(:func:`~dprag_core.retrieval.partition.partition_voters`); each voter's prompt holds
its documents, the question and the answer so far. Neighbouring corpora (add/remove
one privacy unit) give retrieved lists that differ by one substitution, so exactly
one voter's documents differ and the per-token vote histograms differ in one vote:
one count −1 and another +1 (L∞ sensitivity 1, at most 2 counts change, NOT
monotone). Every mechanism below is calibrated for that relation.

- **DPVote** (Alg. 2): each token is LimitedDomain(ε_token, δ_token) over the vote
  histogram with k̄ = m (⊥ stops generation). (ε_token, δ_token) per token, at
  most c_max tokens.
- **DPSparseVote** (Alg. 3): the public (no-context) prompt's greedy token y_pub is
  free when the voters agree with it: AboveThreshold with ε_token/2 tests
  ``count[y_pub] + Lap(4/(ε_token/2)) ≤ τ + Lap(2/(ε_token/2))`` (run as an
  above-threshold query on −count vs −τ, sensitivity 1); when it fires ("spend")
  the token is chosen privately — LimitedDomain(ε_token/2, δ_token) (Koga) or the
  exponential mechanism over the full-vocabulary counts with ε_token/2, Δ = 1
  (MuRAG, ``selection="exponential"``) — and the noisy threshold is re-drawn;
  otherwise y_pub is emitted at no cost. Each spend closes one SVT run:
  ε_token/2 (SVT) + ε_token/2 (selection), δ_token; a trailing run without a spend
  fits in one of the unused slots. At most c_max spends.

Cost per token does not grow with the vocabulary: the engine hands over the m + 1
greedy token ids, the histogram keeps only its ≤ m non-zero counts
(:class:`~dprag_core.mechanisms.histogram.SparseCounts`), and both selections are
exact O(m) samplers of the same full-vocabulary mechanisms
(:func:`~dprag_core.mechanisms.sparse_vote.vote_select`). The composed per-token rule
of DPSparseVote, with its claim, is
:class:`~dprag_core.mechanisms.sparse_vote.SparseVoteRule`.

**Word units** (``unit="word"``, both mechanisms, LimitedDomain selection only):
each decision is a word instead of a token (:mod:`~dprag_core.algorithms._words`):
every row proposes its next word (its own greedy continuation, cut at the next
whitespace-led token or end token, at most ``max_word_tokens`` tokens), the vote
histogram counts each voter's word once, and the rule above runs on it
unchanged (a free decision releases the public word as it is, voted for or not;
only the private selection's zero-count entries mean ⊥); ε_token, δ_token and
c_max are then per private *word*. The relation
and the sensitivity are the same (one substituted voter moves one vote), so is
the claim. An entity the tokenizer splits into several pieces costs one private
decision instead of one per piece.

c_max comes from :func:`~dprag_core.accounting.dpvote.token_limit`: the
tightest valid composition bound (sequential, advanced, optimal/KOV, pure-DP RDP,
and for the exponential variant the mixed SVT + bounded-range RDP curve);
``details["c_max_bound"]`` says which won. The guarantee of every answer is the
query budget Budget(epsilon, delta), charged before retrieval by the pipeline.

>>> mech = DPSparseVote(model, m=40, k=1, epsilon=10.0, delta=1e-4,
...                     epsilon_token=2.0, max_new_tokens=48)  # doctest: +SKIP
>>> mech.answer("Which drug?", docs).details["private_tokens"]  # doctest: +SKIP
3
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dprag_core.accounting.composition import CompositionCount
from dprag_core.accounting.dpvote import default_delta_token, token_limit
from dprag_core.algorithms._voting import Choice, Unit, VotingMechanism
from dprag_core.budget import FIT_SLACK, Budget
from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.mechanisms.limited_domain import BOTTOM
from dprag_core.mechanisms.sparse_vote import SELECTIONS, Selection, SparseVoteRule, vote_select
from dprag_core.models.base import TokenModel
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE
from dprag_core.validation import nonnegative_finite, positive_finite, probability

__all__ = ["DPSparseVote", "DPVote", "SparseVoteRule"]


def _check_delta_token(
    delta_token: float | None, *, eps: float, dlt: float, eps_tok: float, pure: bool
) -> float:
    if pure:
        if delta_token not in (None, 0, 0.0):
            raise ValueError(
                f"delta_token must be 0 with selection='exponential', got {delta_token!r}"
            )
        return 0.0
    if delta_token is None:
        return default_delta_token(epsilon=eps, delta=dlt, epsilon_token=eps_tok)
    d_tok = probability("delta_token", delta_token, allow_zero=False)
    if d_tok > dlt:
        raise ValueError(f"delta_token must be in (0, delta={dlt:g}], got {delta_token!r}")
    return d_tok


class _DPVotingBase(VotingMechanism):
    """Shared budget plumbing of DPVote and DPSparseVote."""

    epsilon: float
    delta: float
    epsilon_token: float
    delta_token: float
    limit: CompositionCount

    def _set_budget(
        self,
        *,
        epsilon: float,
        delta: float,
        epsilon_token: float,
        delta_token: float | None,
        pure: bool,
    ) -> None:
        """Validate the query and per-token budgets and compute c_max (module docstring).

        ``pure``: the exponential-selection variant (δ may be 0, δ_token must be 0).
        """
        self.epsilon = positive_finite("epsilon", epsilon)
        self.delta = probability("delta", delta, allow_zero=pure)
        self.epsilon_token = positive_finite("epsilon_token", epsilon_token)
        if self.epsilon_token > self.epsilon * (1 + FIT_SLACK):
            raise ValueError(
                f"epsilon_token must be <= epsilon ({self.epsilon:g}), got {epsilon_token!r}"
            )
        self.delta_token = _check_delta_token(
            delta_token, eps=self.epsilon, dlt=self.delta, eps_tok=self.epsilon_token, pure=pure
        )
        self.limit = token_limit(
            epsilon=self.epsilon,
            delta=self.delta,
            epsilon_token=self.epsilon_token,
            delta_token=self.delta_token,
            exponential_svt=pure,
        )
        if self.limit.count < 1:
            raise ValueError(
                "epsilon_token/delta_token leave no private token within (epsilon, delta): "
                "lower epsilon_token or delta_token"
            )

    def query_cost(self) -> Budget:
        """The (epsilon, delta) guarantee of one answer, charged before retrieval."""
        return Budget(self.epsilon, self.delta)

    def _token_limit(self) -> int:
        return self.limit.count

    def _details(self) -> Mapping[str, Any]:
        return {
            "c_max": self.limit.count,
            "c_max_bound": self.limit.bound,
            "epsilon_token": self.epsilon_token,
            "delta_token": self.delta_token,
        }


class DPVote(_DPVotingBase):
    """DPVoteRAG (Koga et al. Alg. 2): LimitedDomain(ε_token, δ_token) per token.

    Claim: (epsilon, delta)-DP w.r.t. the corpus (add/remove one privacy unit;
    one voter changes, vote histogram L∞ sensitivity 1, 2 counts change, not
    monotone), for any question; at most c_max tokens, each (ε_token, δ_token)-DP,
    c_max from the tightest valid composition bound. ``delta_token`` defaults to
    the largest per-token δ that maximises c_max
    (:func:`~dprag_core.accounting.dpvote.default_delta_token`).
    LimitedDomain uses k̄ = m; its ⊥ stops generation. With ``unit="word"`` each
    decision is a word (module docstring) and the same claim holds per word.

    >>> DPVote(model, m=30, k=1, epsilon=10.0, delta=1e-4, epsilon_token=1.0,
    ...        max_new_tokens=32).query_cost()  # doctest: +SKIP
    Budget(epsilon=10.0, delta=0.0001)
    """

    name = "DPVote"

    def __init__(
        self,
        model: TokenModel,
        *,
        m: int,
        k: int,
        epsilon: float,
        delta: float,
        epsilon_token: float,
        max_new_tokens: int,
        delta_token: float | None = None,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
        unit: Unit = "token",
        max_word_tokens: int = 8,
    ) -> None:
        super().__init__(
            model,
            m=m,
            k=k,
            max_new_tokens=max_new_tokens,
            template=template,
            public_template=public_template,
            unit=unit,
            max_word_tokens=max_word_tokens,
        )
        self._set_budget(
            epsilon=epsilon,
            delta=delta,
            epsilon_token=epsilon_token,
            delta_token=delta_token,
            pure=False,
        )

    def _choose(
        self,
        counts: SparseCounts,
        public: int | None,
        state: Any,
        rng: np.random.Generator,
    ) -> Choice:
        pick = int(
            vote_select(
                counts,
                selection="limited_domain",
                epsilon=self.epsilon_token,
                delta=self.delta_token,
                k_bar=self.m,
                size=1,
                rng=rng,
            )[0]
        )
        return Choice(None if pick == BOTTOM else pick, True)

    def __repr__(self) -> str:
        return (
            f"DPVote(m={self.m}, k={self.k}, epsilon={self.epsilon}, delta={self.delta}, "
            f"epsilon_token={self.epsilon_token}, max_new_tokens={self.max_new_tokens}"
            f"{self._unit_repr()})"
        )


class DPSparseVote(_DPVotingBase):
    """DPSparseVoteRAG (Koga et al. Alg. 3) and MuRAG's pure variant (Alg. 5).

    Claim: (epsilon, delta)-DP w.r.t. the corpus (same relation as :class:`DPVote`);
    with ``selection="exponential"`` and ``delta=0`` pure epsilon-DP. Per token:
    SVT (ε_token/2, sensitivity 1) on the vote count of the public model's greedy
    token vs ``threshold`` (default m/2); free when the voters agree, else a private
    selection with ε_token/2 (LimitedDomain with δ_token and k̄ = m, or the
    exponential mechanism over counts with Δ = 1). At most c_max private tokens
    (module docstring). ``unit="word"`` decides per word (LimitedDomain only: the
    exponential mechanism needs the finite vocabulary as its domain).

    >>> DPSparseVote(model, m=40, k=1, epsilon=10.0, delta=0.0, epsilon_token=2.0,
    ...              selection="exponential", max_new_tokens=48).query_cost()  # doctest: +SKIP
    Budget(epsilon=10.0, delta=0.0)
    """

    name = "DPSparseVote"
    uses_public = True

    def __init__(
        self,
        model: TokenModel,
        *,
        m: int,
        k: int,
        epsilon: float,
        delta: float,
        epsilon_token: float,
        max_new_tokens: int,
        threshold: float | None = None,
        selection: Selection = "limited_domain",
        delta_token: float | None = None,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
        unit: Unit = "token",
        max_word_tokens: int = 8,
    ) -> None:
        if unit == "word" and selection == "exponential":
            raise ValueError(
                "selection='exponential' needs a finite domain (the vocabulary): use "
                "unit='token' with it, or selection='limited_domain' with unit='word'"
            )
        super().__init__(
            model,
            m=m,
            k=k,
            max_new_tokens=max_new_tokens,
            template=template,
            public_template=public_template,
            unit=unit,
            max_word_tokens=max_word_tokens,
        )
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        self.selection: Selection = selection
        self._set_budget(
            epsilon=epsilon,
            delta=delta,
            epsilon_token=epsilon_token,
            delta_token=delta_token,
            pure=selection == "exponential",
        )
        self.threshold = (
            self.m / 2 if threshold is None else nonnegative_finite("threshold", threshold)
        )
        if self.threshold > self.m:
            raise ValueError(f"threshold must be in [0, m={self.m}], got {threshold!r}")

    def _start(self, rng: np.random.Generator) -> SparseVoteRule:
        # The selection's domain is the model's vocabulary, ids 0..vocab_size-1 (the HF
        # engine excludes padded logit rows from it); with unit="word" it is the ballot's
        # words and its zero-count entries (dprag_core.algorithms._words).
        return SparseVoteRule(
            epsilon_token=self.epsilon_token,
            delta_token=self.delta_token,
            threshold=self.threshold,
            m=self.m,
            selection=self.selection,
            rng=rng,
        )

    def _choose(
        self,
        counts: SparseCounts,
        public: int | None,
        state: Any,
        rng: np.random.Generator,
    ) -> Choice:
        assert public is not None
        tokens, spent = state.decide(counts, public=public)
        pick = int(tokens[0])
        return Choice(None if pick == BOTTOM else pick, bool(spent[0]))

    def _details(self) -> Mapping[str, Any]:
        return {**super()._details(), "selection": self.selection, "threshold": self.threshold}

    def __repr__(self) -> str:
        return (
            f"DPSparseVote(m={self.m}, k={self.k}, epsilon={self.epsilon}, delta={self.delta}, "
            f"epsilon_token={self.epsilon_token}, selection={self.selection!r}, "
            f"max_new_tokens={self.max_new_tokens}{self._unit_repr()})"
        )
