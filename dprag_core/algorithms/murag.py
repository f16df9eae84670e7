"""Multi-query DP RAG: MuRAG, MuRAG-Ada (individual accounting) and NAIVE-MULTI.

All three wrap a single-query DP mechanism ``inner`` (default in the paper: the
pure exponential-mechanism variant of DPSparseVote, MuRAG paper Alg. 5).

**MuRAG** (Alg. 1) — every privacy unit has a budget M·ε_q in a persistent
:class:`~dprag_core.accounting.ledger.Ledger`. Per query, with τ public and
fixed before any data is seen: the relevant units are those with a document
scoring > τ; **every** relevant unit that still has ε_q left is charged ε_q
(atomically, before anything runs — not only the top-k, because whether a unit
is in the top-k depends on the other units, which would make its charge depend
on other people's data); then the top-k of the charged units' documents, padded
with empty documents to exactly k, go to ``inner`` run with ε_q.

**MuRAG-Ada** (Alg. 2) — ε_q = ε_thr + ε_RAG. Public score bins are walked from
the most relevant: each active unit in a visited bin is charged ε_thr and counted,
the noisy prefix sum (:func:`~dprag_core.mechanisms.prefix_bins.noisy_bin_walk`)
halts once it exceeds K = k; then every unit found with ε_RAG left is charged
ε_RAG, and the top-k of their documents go to ``inner`` run with ε_RAG.

Guarantee of MuRAG / MuRAG-Ada (Lemmas 1 and 2, by the individual privacy filter
of Feldman & Zrnic 2021, Cor. 3.3, which allows fully adaptive queries): over
*all* queries ever answered against the ledger, the whole transcript of answers
is ε-DP with ε = M·ε_q = ``ledger.budget_per_unit`` with respect to adding or
removing one privacy unit, because each unit is charged exactly the privacy loss
it can incur in each query (0 when it is not relevant/visited, else ε_q, ε_thr,
ε_RAG) and takes part only while its remaining budget covers that loss. Within a query
the sensitivities are the inner mechanism's (one added unit substitutes at most one
of the top-k it is given) and, for MuRAG-Ada's walk, 1 (one unit adds one to one
bin's count, so at most one to every noisy prefix sum).
Each :class:`~dprag_core.answers.DPAnswer` therefore reports
``guarantee = Budget(M·ε_q)``: the guarantee of the whole transcript, this
answer included, which is what the theorem proves. The most any unit can lose
in this one query, ε_q, is in ``details["epsilon_query"]``; it is a bound
*conditional on the earlier transcript* (the ledger state depends on past
answers), not a stand-alone guarantee of the answer. A unit's exhaustion is
never signalled (that would leak): its documents silently stop being used, so
answers fall back towards the non-RAG answer. The ledger must be the *only* ledger of the corpus
and charges are recorded before the answer exists (a crash loses budget, never
privacy). Units are the ``ScoredDocument.unit`` ids; a unit whose chunks fall in
several bins belongs to the bin of its best chunk.

**NaiveMulti** (Alg. 4) — the baseline: each query costs ``inner``'s guarantee
(its ``query_cost()``, known before the query), composed sequentially in the
:class:`~dprag_core.accounting.accountant.CorpusAccountant` it is built with,
whose total is the corpus-level cap. Like every fixed-cost mechanism it is
charged by the app (``PrivateRAG`` or an adapter) before retrieval, and a query
that would exceed the cap raises :class:`~dprag_core.budget.PrivacyBudgetExhausted`
before any work.

>>> from dprag_core.accounting.ledger import InMemoryLedger
>>> murag = MuRAG(inner, ledger=InMemoryLedger(budget_per_unit=10.0), tau=0.5,
...               epsilon_query=2.0, k=8, score_bounds=(-1.0, 1.0))  # doctest: +SKIP
>>> murag.answer("Who treats Ann?", docs).details["per_unit_budget"]  # doctest: +SKIP
10.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.accounting.ledger import Ledger, charge_active
from dprag_core.algorithms.base import Mechanism, MechanismWrapper
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.prefix_bins import noisy_bin_walk
from dprag_core.mechanisms.rng import RngLike
from dprag_core.query_ids import Query, as_query, step_id
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.scores import ScoreScale, as_scale
from dprag_core.retrieval.selection import ledger_filter
from dprag_core.retrieval.units import best_chunk_per_unit
from dprag_core.validation import finite, positive_finite, positive_int

__all__ = ["MuRAG", "MuRAGAda", "NaiveMulti"]

_REL = 1e-9  # float slack when comparing epsilons (e.g. M = budget / eps_q)


def _check_wrappable(inner: object) -> Mechanism:
    """``inner`` must be a Mechanism charged to the app's budget (not NaiveMulti's own)."""
    if not isinstance(inner, Mechanism):
        raise TypeError(f"inner must be a dprag Mechanism, got {type(inner).__name__}")
    if inner.corpus_accountant() is not None:
        raise ValueError(f"inner must not carry its own accountant ({inner.name} does)")
    return inner


def _check_inner(inner: object, epsilon: float, name: str) -> Mechanism:
    """``inner`` must be a Mechanism whose query cost is exactly Budget(epsilon, 0)."""
    mechanism = _check_wrappable(inner)
    cost = mechanism.query_cost()
    if not isinstance(cost, Budget) or cost.delta != 0:
        raise ValueError(f"inner must be pure epsilon-DP (query_cost delta 0), got {cost!r}")
    if not math.isclose(cost.epsilon, epsilon, rel_tol=_REL):
        raise ValueError(
            f"inner's query_cost epsilon {cost.epsilon!r} must equal {name}={epsilon!r}"
        )
    return mechanism


def _check_k(inner: Mechanism, k: int | None) -> int:
    wanted = inner.candidates_needed()
    if k is None:
        if wanted is None:
            raise ValueError("k is required when inner does not declare candidates_needed()")
        return wanted
    k = positive_int("k", k)
    if wanted is not None and wanted != k:
        raise ValueError(f"k must equal inner.candidates_needed()={wanted}, got {k}")
    return k


def _check_ledger(ledger: object, epsilon_query: float) -> tuple[Ledger, float]:
    if not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a dprag Ledger, got {type(ledger).__name__}")
    m = ledger.budget_per_unit / epsilon_query
    if m < 1 - _REL:
        raise ValueError(
            "M = ledger.budget_per_unit / epsilon_query must be >= 1 (each unit must afford "
            f"one query), got {m:g}"
        )
    return ledger, m


def _padded(top: list[ScoredDocument], k: int) -> list[ScoredDocument]:
    """MuRAG's TOP-K result padded with empty documents to exactly ``k``."""
    return top + [ScoredDocument.padding(i) for i in range(k - len(top))]


def _relevant(docs: Sequence[ScoredDocument], floor: float) -> list[ScoredDocument]:
    return [d for d in docs if not d.is_padding and d.score > floor]


class _Individual(MechanismWrapper):
    """Shared plumbing of MuRAG and MuRAG-Ada: charge, select, run inner, wrap."""

    ledger: Ledger
    k: int
    epsilon_query: float
    max_retrievals: float

    def candidates_needed(self) -> int | None:
        """None: every candidate above :meth:`min_score` must be retrieved."""
        return None

    def query_cost(self) -> Budget | None:
        """None: the per-unit ledger is charged inside :meth:`answer`."""
        return None

    def unit_ledger(self) -> Ledger:
        """The per-unit ledger charged inside :meth:`answer` (the app claims each query's id)."""
        return self.ledger

    def _select(
        self, query: Query, docs: Sequence[ScoredDocument]
    ) -> tuple[list[ScoredDocument], dict[str, Any]]:
        raise NotImplementedError

    def _details(self) -> dict[str, Any]:
        return {
            "accounting": "individual",
            "epsilon_query": self.epsilon_query,
            "per_unit_budget": self.ledger.budget_per_unit,
            "max_retrievals_per_unit": self.max_retrievals,
            "k": self.k,
            "inner": self.inner.name,
        }

    def _wrap(self, inner_answer: DPAnswer, query_id: str, extra: Mapping[str, Any]) -> DPAnswer:
        details = {
            **inner_answer.details,
            **self._details(),
            **extra,
            "query_id": query_id,
        }
        guarantee = Budget(self.ledger.budget_per_unit)
        return DPAnswer(inner_answer.text, guarantee, self.name, details)

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Charge the ledger first, then stream ``inner``'s text and the wrapped DPAnswer.

        The ledger charges are recorded under ``query.id`` (the app's Query:
        the caller's ``query_id``, claimed by the app before this runs, and
        ``query.retry`` for an accepted retry, so a retry is charged once); a
        plain question gets a fresh id (:func:`~dprag_core.query_ids.as_query`).
        ``inner`` runs the same Query (its generator included).
        """
        query = as_query(query, rng=rng)
        top_k, extra = self._select(query, docs)
        self.ledger.settle()  # the app's claim of the id durable (free after a charge)
        for item in self.inner.stream(query, top_k):
            yield self._wrap(item, query.id, extra) if isinstance(item, DPAnswer) else item


class MuRAG(_Individual):
    """MuRAG (multi-query DP RAG paper, Alg. 1): fixed public τ, individual accounting.

    ``inner``: a pure-DP single-query Mechanism whose ``query_cost()`` is
    ``Budget(epsilon_query)``; ``ledger``: the corpus's per-unit ledger, with
    ``budget_per_unit = M·epsilon_query`` (M >= 1 queries per unit); ``tau``: the
    public relevance threshold, inside ``score_bounds`` (the retriever's public
    score range: a pair or a :class:`~dprag_core.retrieval.scores.ScoreScale`);
    ``k``: documents passed to ``inner`` (default and required:
    ``inner.candidates_needed()``). Guarantee: module docstring.

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> MuRAG(inner, ledger=InMemoryLedger(budget_per_unit=4.0), tau=0.3,
    ...       epsilon_query=2.0)  # doctest: +SKIP
    MuRAG(tau=0.3, epsilon_query=2.0, k=8, per_unit_budget=4.0)
    """

    name = "MuRAG"

    def __init__(
        self,
        inner: Mechanism,
        *,
        ledger: Ledger,
        tau: float,
        epsilon_query: float,
        k: int | None = None,
        score_bounds: ScoreScale | tuple[float, float] = (-1.0, 1.0),
    ) -> None:
        self.epsilon_query = positive_finite("epsilon_query", epsilon_query)
        scale = as_scale(score_bounds, parameter="score_bounds")
        self.score_bounds = scale.bounds
        self.tau = scale.check_threshold(tau)
        self.inner = _check_inner(inner, self.epsilon_query, "epsilon_query")
        self.k = _check_k(self.inner, k)
        self.ledger, self.max_retrievals = _check_ledger(ledger, self.epsilon_query)

    def min_score(self) -> float:
        """The public threshold τ: retrieve every candidate scoring above it."""
        return self.tau

    def _select(
        self, query: Query, docs: Sequence[ScoredDocument]
    ) -> tuple[list[ScoredDocument], dict[str, Any]]:
        top = ledger_filter(
            docs, ledger=self.ledger, tau=self.tau, cost=self.epsilon_query, k=self.k,
            query_id=query.id, retry=query.retry,
        )  # fmt: skip
        return _padded(top, self.k), {"tau": self.tau}

    def __repr__(self) -> str:
        return (
            f"MuRAG(tau={self.tau}, epsilon_query={self.epsilon_query}, k={self.k}, "
            f"per_unit_budget={self.ledger.budget_per_unit})"
        )


def _check_bins(bins: object, scale: ScoreScale) -> tuple[float, ...]:
    """MuRAG-Ada's edges, highest first: at least 2, distinct, finite, inside ``scale``.

    The lowest edge is a threshold (:meth:`ScoreScale.check_threshold`: below
    the range every clipped score would count); the highest may be the top of
    the range (documents above it still count in the top bin).

    >>> _check_bins([0.2, 1.0, 0.6], ScoreScale("cosine", low=-1.0, high=1.0))
    (1.0, 0.6, 0.2)
    """
    if isinstance(bins, (str, bytes)) or not isinstance(bins, Iterable):
        raise TypeError(f"bins must be a sequence of finite numbers, got {type(bins).__name__}")
    edges = sorted((finite("bins", b) for b in bins), reverse=True)
    if len(edges) < 2 or len(set(edges)) != len(edges):
        raise ValueError("bins must hold at least 2 distinct finite edges")
    scale.check_threshold(edges[-1], parameter="min(bins)")
    if edges[0] > scale.high:
        raise ValueError(
            f"max(bins) must be <= {scale.high} (the top of score_bounds), got {edges[0]!r}"
        )
    return tuple(edges)


class MuRAGAda(_Individual):
    """MuRAG-Ada (multi-query DP RAG paper, Alg. 2): private per-query threshold.

    ``bins``: B+1 distinct public score edges inside ``score_bounds`` (the
    retriever's public score range, as for MuRAG; any order, walked from the
    highest); a document scoring above the highest edge counts in the top
    bin, one at or below the lowest is never relevant (the lowest edge is the
    mechanism's ``min_score()``, so it obeys the one threshold rule,
    :meth:`~dprag_core.retrieval.scores.ScoreScale.check_threshold`).
    ``epsilon_threshold`` (ε_thr) pays for the bin walk, ``epsilon_rag``
    (ε_RAG) for ``inner`` (its ``query_cost()`` must be ``Budget(epsilon_rag)``);
    ε_q = ε_thr + ε_RAG and ``ledger.budget_per_unit`` = M·ε_q. The walk halts
    once the noisy count exceeds K = ``k``. Guarantee: module docstring.

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> MuRAGAda(inner, ledger=InMemoryLedger(budget_per_unit=3.0), bins=[1, .8, .6, .4],
    ...          epsilon_threshold=1.0, epsilon_rag=2.0)  # doctest: +SKIP
    MuRAGAda(bins=4, epsilon_threshold=1.0, epsilon_rag=2.0, k=8, per_unit_budget=3.0)
    """

    name = "MuRAGAda"

    def __init__(
        self,
        inner: Mechanism,
        *,
        ledger: Ledger,
        bins: Sequence[float],
        epsilon_threshold: float,
        epsilon_rag: float,
        k: int | None = None,
        score_bounds: ScoreScale | tuple[float, float] = (-1.0, 1.0),
    ) -> None:
        self.epsilon_threshold = positive_finite("epsilon_threshold", epsilon_threshold)
        self.epsilon_rag = positive_finite("epsilon_rag", epsilon_rag)
        self.epsilon_query = self.epsilon_threshold + self.epsilon_rag
        scale = as_scale(score_bounds, parameter="score_bounds")
        self.score_bounds = scale.bounds
        self.edges = _check_bins(bins, scale)
        self.inner = _check_inner(inner, self.epsilon_rag, "epsilon_rag")
        self.k = _check_k(self.inner, k)
        self.ledger, self.max_retrievals = _check_ledger(ledger, self.epsilon_query)

    def min_score(self) -> float:
        """The lowest bin edge: only documents scoring above it can be relevant."""
        return self.edges[-1]

    def _bin_of(self, score: float) -> int:
        for i in range(len(self.edges) - 1):
            if score > self.edges[i + 1]:
                return i
        raise AssertionError("score below the lowest edge")  # filtered by _relevant

    def _select(
        self, query: Query, docs: Sequence[ScoredDocument]
    ) -> tuple[list[ScoredDocument], dict[str, Any]]:
        relevant = _relevant(docs, self.edges[-1])
        best: dict[str, float] = {}
        for d in relevant:
            best[d.unit] = max(best.get(d.unit, -math.inf), d.score)
        per_bin: list[list[str]] = [[] for _ in range(len(self.edges) - 1)]
        for unit, score in best.items():
            per_bin[self._bin_of(score)].append(unit)
        found: list[str] = []
        query_id, retry = query.id, query.retry

        def counts() -> Iterator[int]:
            for i, units in enumerate(per_bin):  # charged only when the walk reaches the bin
                bin_id = step_id(query_id, f"bin{i}")  # one ledger id per charge (retries: no-ops)
                eps = self.epsilon_threshold
                charged = charge_active(self.ledger, bin_id, units, eps, retry=retry)
                found.extend(charged)
                yield len(charged)

        visited = noisy_bin_walk(
            counts(), epsilon=self.epsilon_threshold, target=self.k, rng=query.rng
        )
        rag_id = step_id(query_id, "rag")
        usable = set(charge_active(self.ledger, rag_id, found, self.epsilon_rag, retry=retry))
        # TOP-K over units, as in MuRAG (selection.ledger_filter): one best chunk per unit
        top = best_chunk_per_unit(d for d in relevant if d.unit in usable)[: self.k]
        return _padded(top, self.k), {"bins_visited": visited, "threshold": self.edges[visited]}

    def _details(self) -> dict[str, Any]:
        return {
            **super()._details(),
            "epsilon_threshold": self.epsilon_threshold,
            "epsilon_rag": self.epsilon_rag,
        }

    def __repr__(self) -> str:
        return (
            f"MuRAGAda(bins={len(self.edges)}, epsilon_threshold={self.epsilon_threshold}, "
            f"epsilon_rag={self.epsilon_rag}, k={self.k}, "
            f"per_unit_budget={self.ledger.budget_per_unit})"
        )


class NaiveMulti(MechanismWrapper):
    """NAIVE-MULTI-RAG (multi-query DP RAG paper, Alg. 4): sequential composition.

    ``query_cost()`` is ``inner.query_cost()``, charged to ``accountant`` (the
    corpus-level cap, :meth:`corpus_accountant`) by ``PrivateRAG`` and the
    adapters *before* retrieval, like every fixed-cost mechanism: give the app
    no other accountant (or this same one). Over all answered queries the
    transcript is (Σε, Σδ)-DP (basic composition), reported in ``details`` as
    ``cumulative_epsilon``/``cumulative_delta``. A query that would exceed the
    cap raises :class:`~dprag_core.budget.PrivacyBudgetExhausted` before any
    work. Called directly, :meth:`answer` charges nothing (as for every mechanism).

    >>> from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    >>> NaiveMulti(inner, accountant=InMemoryCorpusAccountant(Budget(10.0)))  # doctest: +SKIP
    NaiveMulti(inner=..., accountant=InMemoryCorpusAccountant(total=Budget(epsilon=10.0, ...), ...))
    """

    name = "NaiveMulti"

    def __init__(self, inner: Mechanism, *, accountant: CorpusAccountant) -> None:
        cost = _check_wrappable(inner).query_cost()
        if not isinstance(cost, Budget):
            raise ValueError("inner must be DP: its query_cost() must be a Budget")
        if not isinstance(accountant, CorpusAccountant):
            raise TypeError(
                f"accountant must be a CorpusAccountant, got {type(accountant).__name__}"
            )
        if not accountant.total.covers(cost):
            raise ValueError(f"the accountant's total {accountant.total!r} cannot afford one query")
        self.inner = inner
        self.cost = cost
        self.accountant = accountant

    def candidates_needed(self) -> int | None:
        """What ``inner`` needs."""
        return self.inner.candidates_needed()

    def min_score(self) -> float | None:
        """What ``inner`` needs."""
        return self.inner.min_score()

    def query_cost(self) -> Budget:
        """``inner``'s guarantee, charged to :meth:`corpus_accountant` before retrieval."""
        return self.cost

    def corpus_accountant(self) -> CorpusAccountant:
        """The accountant this wrapper was built with: the app charges every query to it."""
        return self.accountant

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Stream ``inner``'s text and the DPAnswer (the app charged the query already)."""
        for item in self.inner.stream(as_query(query, rng=rng), docs):
            if isinstance(item, DPAnswer):
                details = {
                    **item.details,
                    "inner": self.inner.name,
                    "accounting": "sequential",
                    "cumulative_epsilon": self.accountant.spent_epsilon,
                    "cumulative_delta": self.accountant.spent_delta,
                    "total_budget": self.accountant.total.epsilon,
                }
                yield DPAnswer(item.text, self.cost, self.name, details)
            else:
                yield item

    def __repr__(self) -> str:
        return f"NaiveMulti(inner={self.inner!r}, accountant={self.accountant!r})"
