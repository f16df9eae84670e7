"""End-to-end retrieval audits: worst-case neighbouring corpora through the public entry points.

Each audit builds a corpus D and its neighbour D' = D + one privacy unit, runs the
public entry point (PrivateRAG, DPRAGChain, DPQueryEngine, ...) on both with a
:class:`Recorder` mechanism, and audits a reference vote on what reached it:

* each of the ``n`` candidate slots votes a label in {0, 1} that depends on the
  question and that slot's document alone (a padding slot votes 0);
* the answer is the exponential mechanism over the two labels' counts,
  P[1] ∝ exp(ε·h1/2), P[0] ∝ exp(ε·h0/2): ε-DP when one added unit changes at
  most one slot (a substitution), which is exactly what the retrieval must give.

Retrieval is deterministic given the corpus (only the vote is random), so it runs
once per corpus and the vote is sampled ``TRIALS`` times, vectorised; a
transcript of several queries is the tuple of their votes. The statistical audit
(:func:`dprag_core.audit.audit_epsilon`) must stay at or below the claim, and
today's broken retrieval (the mutation) must exceed it.

Document texts carry their labels: ``"A:1 B:0"`` votes 1 for question ``A``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dprag_core.accounting.accountant import CorpusAccountant, InMemoryCorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.answers import DPAnswer
from dprag_core.audit import AuditResult, audit_epsilon
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.units import best_chunk_per_unit

TRIALS = 100_000
EPSILON = 2.0


def accountant() -> CorpusAccountant:
    """A corpus budget large enough for every audit query (passed explicitly everywhere)."""
    return InMemoryCorpusAccountant(Budget(1e6, 0.5))


class Recorder(Mechanism):
    """Records the candidates each query hands the mechanism; costs ``Budget(epsilon)``.

    ``n`` = ``candidates_needed()`` (None: every candidate above ``tau``).
    """

    name = "Recorder"

    def __init__(self, n: int | None, *, epsilon: float = EPSILON, tau: float | None = None):
        self.n = n
        self.epsilon = epsilon
        self.tau = tau
        self.seen: list[tuple[str, list[ScoredDocument]]] = []

    def candidates_needed(self) -> int | None:
        return self.n

    def min_score(self) -> float | None:
        return self.tau

    def query_cost(self) -> Budget:
        return Budget(self.epsilon)

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        self.seen.append((as_query(query, rng=rng).question, list(docs)))
        return DPAnswer("recorded", self.query_cost(), self.name, {"stop_reason": "eos"})

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        result = self.answer(query, docs, rng=rng)
        yield result.text  # the chunks join to the answer's text (the contract)
        yield result


def label(question: str, text: str) -> int:
    """The vote of one document for ``question`` (module docstring)."""
    return int(f"{question}:1" in text)


def histograms(seen: Sequence[tuple[str, Sequence[Any]]], slots: int) -> list[tuple[int, int]]:
    """(h0, h1) per recorded query: ``slots`` votes, from texts (padding and missing vote 0)."""
    out = []
    for question, docs in seen:
        texts = [getattr(d, "text", d) for d in docs if not getattr(d, "is_padding", False)]
        ones = sum(label(question, t) for t in texts[:slots])
        out.append((slots - ones, ones))
    return out


def sample_transcripts(
    hists: Sequence[tuple[int, int]], *, epsilon: float, trials: int, rng: np.random.Generator
) -> np.ndarray:
    """``trials`` transcripts: bit q is query q's exponential-mechanism vote."""
    out = np.zeros(trials, dtype=np.int64)
    for q, (h0, h1) in enumerate(hists):
        p1 = 1.0 / (1.0 + np.exp(-epsilon * (h1 - h0) / 2.0))
        out |= (rng.random(trials) < p1).astype(np.int64) << q
    return out


def audit_pair(
    hists_d: Sequence[tuple[int, int]],
    hists_d_prime: Sequence[tuple[int, int]],
    *,
    epsilon: float = EPSILON,
    seed: int = 0,
) -> AuditResult:
    """Audit the reference vote on the candidates recorded for D and for D'."""
    gen = np.random.default_rng(seed)
    on_d = sample_transcripts(hists_d, epsilon=epsilon, trials=TRIALS, rng=gen)
    on_d_prime = sample_transcripts(hists_d_prime, epsilon=epsilon, trials=TRIALS, rng=gen)
    return audit_epsilon(on_d, on_d_prime)


def old_top_units(retriever: Any, question: str, n: int) -> list[ScoredDocument]:
    """The broken variant that shipped: a window re-sorted by (score, id), capped."""
    k, max_k = n, 1_000_000
    while True:
        docs = list(retriever(question, k))
        units = best_chunk_per_unit(docs)
        if len(units) >= n or len(docs) < k or k >= max_k:
            return units[:n]
        k = min(2 * k, max_k)


# -- the two worst cases ---------------------------------------------------------------

UNITS = 4
"""Top-n audits: n = 4 units, one vote each."""


def unscored_ranking(*, with_new_unit: bool) -> list[tuple[str, str, str]]:
    """(id, unit, text) in rank order, all scores tied: D = z1..z4 (vote 0), a5..a8 (vote 1).

    D' puts unit x (7 chunks, vote 1) first. The first 4 units: z1..z4 on D, x z1 z2 z3
    on D' (one substitution). Re-sorting a window by id instead widens the window to 16
    chunks (x holds 7) and picks a5..a8: all four slots change.
    """
    old = [(f"z{i}", f"z{i}", "Q:0") for i in range(1, 5)]
    old += [(f"a{i}", f"a{i}", "Q:1") for i in range(5, 9)]
    new = [(f"x{c}", "x", "Q:1") for c in range(1, 8)] if with_new_unit else []
    return new + old


CAP = 4
"""Threshold audits: the capped source returns at most 4 documents."""

TAU = 0.5


def capped_corpus(*, with_new_unit: bool) -> dict[str, list[tuple[str, str, float]]]:
    """Per question, (id, text, score) in rank order; MuRAG with k = 4, M = 1.

    Question A ranks u1..u4 (vote 0 for A); D' adds x (vote 1 for A) on top. Question B
    ranks u4 (vote 1 for B) over f1..f3 (vote 0). Complete retrieval charges u1..u4 on
    A in both corpora, so u4 is spent before B. A source capped at 4 leaves u4 out on
    D' (x took its place): u4 is not charged and votes on B, so x changes two answers.
    """
    a = [("u1", "A:0 B:0", 0.9), ("u2", "A:0 B:0", 0.89), ("u3", "A:0 B:0", 0.88)]
    a += [("u4", "A:0 B:1", 0.87)]
    a += [(f"f{i}", "A:0 B:0", 0.1) for i in range(1, 4)]
    if with_new_unit:
        a = [("x", "A:1 B:0", 0.95), *a]
    b = [("u4", "A:0 B:1", 0.95)] + [(f"f{i}", "A:0 B:0", 0.9) for i in range(1, 4)]
    b += [(u, "A:0 B:0", 0.1) for u in ("u1", "u2", "u3")]
    if with_new_unit:
        b.append(("x", "A:1 B:0", 0.05))
    return {"A": a, "B": b}


def tied_corpus(new_prefix: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(id, unit, text) in insertion order for a store where every score ties.

    D: a5..a8 (vote 1), then z1..z4 (vote 0); D' adds unit x (7 chunks, ids
    ``new_prefix + c``, vote 1) last. Read as one fixed ranking (ties by id) both
    corpora give a5..a8. Today's variant read the store's own tie order (newest or
    largest ids first) and re-sorted a window by id: z1..z4 on D, a5..a8 on D' (x's
    7 chunks widen the window), all four slots changed.
    """
    d = [(f"a{i}", f"a{i}", "Q:1") for i in range(5, 9)]
    d += [(f"z{i}", f"z{i}", "Q:0") for i in range(1, 5)]
    return d, d + [(f"{new_prefix}{c}", "x", "Q:1") for c in range(1, 8)]


SELECTION_EPSILON = 0.1
"""DP-threshold audits: a small selection ε, so that the vote's leak dominates."""


def threshold_votes(
    candidates: Sequence[ScoredDocument],
    question: str,
    *,
    bounds: tuple[float, float],
    k: int,
    trials: int,
    rng: np.random.Generator,
    epsilon: float = EPSILON,
) -> np.ndarray:
    """DPThreshold (ε = SELECTION_EPSILON) on ``candidates``, then the vote on the selection.

    Vectorised over ``trials``: τ from the production law, each unit (its best
    chunk's clipped score, its first chunk's vote) selected when above τ, then the
    exponential-mechanism vote P[1] ∝ exp(ε·h1), P[0] ∝ exp(ε·h0) over the selected
    units: ε-DP when one added unit raises one count by one (a monotone utility),
    2ε when a unit is also pushed out. Claim: SELECTION_EPSILON + ``epsilon``.
    """
    from dprag_core.mechanisms.threshold import _sample_tau, threshold_intervals
    from dprag_core.retrieval.units import group_by_unit

    groups = list(group_by_unit(candidates).values())
    scores = np.array([np.clip(max(d.score for d in g), *bounds) for g in groups])
    votes = np.array([label(question, g[0].text) for g in groups], dtype=bool)
    law = threshold_intervals(scores, epsilon=SELECTION_EPSILON, bounds=bounds, k=k)
    taus = _sample_tau(law, size=trials, rng=rng)
    chosen = scores[None, :] > taus[:, None]
    h1 = (chosen & votes[None, :]).sum(axis=1)
    h0 = (chosen & ~votes[None, :]).sum(axis=1)
    p1 = 1.0 / (1.0 + np.exp(-epsilon * (h1 - h0)))
    return (rng.random(trials) < p1).astype(np.int64)


SELECTION_BOUNDS = (0.0, 1.0)


def selection_corpus(*, with_new_unit: bool) -> list[tuple[str, str, float]]:
    """(id, text, score) best first: u1..u5 (u4 votes 1), D' adds x (votes 1) on top.

    All scores lie in [0.96, 0.99], so τ (nearly uniform on [0, 1] at ε = 0.1, k = 5)
    selects every unit 96 % of the time. Every unit above the lower bound: D' = D + x,
    one count moves by one. A top-5 cut (``fetch_k``, an upstream top-N) drops u5
    (votes 0) on D' instead: x in, u5 out, the vote moves by two.
    """
    rows = [(f"u{i}", f"Q:{int(i == 4)} u{i}", 0.985 - i / 200) for i in range(1, 6)]
    return [("x", "Q:1 x", 0.99), *rows] if with_new_unit else rows


SELECTION_K = 5
