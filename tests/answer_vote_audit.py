"""DPAnswerVote audits shared by the core and adapter tests (docs/design.md §9).

The mechanism's randomness is the voter partition and the selection; with one
record per voter (k = 1) the voters' keys do not depend on the partition, and the
model here is deterministic, so one query per corpus through an entry point
(``PrivateRAG``, ``DPRAGChain``, ``DPQueryEngine``) records the keys that reached the
selection (:class:`KeyRecorder`: the production class, recording), and the
selection is then sampled ``TRIALS`` times from those keys by the production
:meth:`~dprag_core.algorithms.answer_vote.DPAnswerVote.select`. The corpora are a
worst-case neighbouring pair: D' = D + one unit ranked first, which pushes D's last
unit out of the top m (a substitution of one voter).

Mutations (each must make the same audit exceed the claim): LimitedDomain's ln term
dropped (:class:`NoLnTerm`), its noise halved (:class:`HalfNoise`: the monotone form).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dprag_core.algorithms._words import word_ballot
from dprag_core.algorithms.answer_vote import DPAnswerVote
from dprag_core.audit import audit_epsilon
from dprag_core.mechanisms.limited_domain import (
    BOTTOM,
    limited_domain_candidates_sparse,
    limited_domain_sample,
)
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.sparse_vote import MAX_CHANGED

EPSILON, DELTA, M = 2.0, 1e-3, 20
TRIALS = 200_000
ASPIRIN, IBUPROFEN, UNSURE = "Aspirin.", "The drug is ibuprofen.", "I don't know."


def record_answer(prompt: str) -> str:
    """What the test models answer: the record's text between « and » (:func:`ranking`'s
    records, in any app's prompt), else the line after ``Context:`` (dprag's prompt)."""
    if "«" in prompt:
        return prompt.split("«", 1)[1].split("»", 1)[0]
    return prompt.split("Context:\n")[1].split("\n")[0]


class Reader:
    """A dprag TextModel answering :func:`record_answer`; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self.calls += 1
        return [record_answer(p) for p in prompts]


def ranking(name: str, *, with_new_unit: bool) -> list[tuple[str, str, str]]:
    """(id, unit, text) best first, M units; D' puts unit x first.

    ``"skew"``: 12 aspirin then 8 ibuprofen records; x answers aspirin, so D' has
    13 / 7 (the minority key's probability moves by nearly e^ε); ``"skew-2"``: 11 / 9
    against 12 / 8 (the same shape for the halved noise scale). ``"lone"``: 19
    unsure records then one aspirin record; x is unsure, so D' has no vote at all
    (a key of one vote against none: what LimitedDomain's ln term is for).
    """
    if name == "lone":
        texts, new = [UNSURE] * (M - 1) + [ASPIRIN], UNSURE
    else:
        first = 12 if name == "skew" else 11
        texts, new = [ASPIRIN] * first + [IBUPROFEN] * (M - first), ASPIRIN
    rows = [(f"r{i:02d}", f"u{i:02d}", f"Record: «{t}»") for i, t in enumerate(texts)]
    return [("x", "x", f"Record: «{new}»"), *rows] if with_new_unit else rows


class KeyRecorder(DPAnswerVote):
    """DPAnswerVote, recording the keys each query hands its selection."""

    seen: list[list[str]]

    def select(self, keys: Sequence[str], *, rng: RngLike = None, size: int = 1) -> list[Any]:
        if not hasattr(self, "seen"):
            self.seen = []
        self.seen.append(list(keys))
        return super().select(keys, rng=rng, size=size)


class NoLnTerm(KeyRecorder):
    """MUTATION: LimitedDomain's threshold without its ln(min(Δ0, k̄)/δ) term."""

    def select(self, keys: Sequence[str], *, rng: RngLike = None, size: int = 1) -> list[Any]:
        KeyRecorder.select(self, keys, rng=0)  # records, as the others do
        ballot = word_ballot(list(keys), public=None, m=self.m)
        fair = limited_domain_candidates_sparse(
            ballot.counts,
            epsilon=self.epsilon,
            delta=self.delta,
            k_bar=self.m,
            max_changed=MAX_CHANGED,
            monotone=False,
        )
        broken = replace(fair, h_bottom=fair.h_bottom - fair.scale * math.log(2 / self.delta))
        picks = limited_domain_sample(broken, size=size, rng=make_rng(rng))
        return [None if p == BOTTOM else ballot.chosen(int(p), private=True) for p in picks]


class HalfNoise(KeyRecorder):
    """MUTATION: the monotone form (Gumbel 1/ε, +1): noise halved for a substituted vote."""

    def select(self, keys: Sequence[str], *, rng: RngLike = None, size: int = 1) -> list[Any]:
        KeyRecorder.select(self, keys, rng=0)
        ballot = word_ballot(list(keys), public=None, m=self.m)
        candidates = limited_domain_candidates_sparse(
            ballot.counts, epsilon=self.epsilon, delta=self.delta, k_bar=self.m, monotone=True
        )
        picks = limited_domain_sample(candidates, size=size, rng=make_rng(rng))
        return [None if p == BOTTOM else ballot.chosen(int(p), private=True) for p in picks]


def audit_keys(mech: DPAnswerVote, keys_d: Sequence[str], keys_d_prime: Sequence[str]) -> float:
    """The audit's lower bound on ε from ``mech.select`` on the keys recorded for D and D'."""
    on_d = mech.select(keys_d, rng=11, size=TRIALS)
    on_d_prime = mech.select(keys_d_prime, rng=12, size=TRIALS)
    code: dict[str | None, int] = {None: -1}
    for o in [*on_d, *on_d_prime]:
        code.setdefault(o, len(code))
    as_int = [np.array([code[o] for o in outs]) for outs in (on_d, on_d_prime)]
    return audit_epsilon(*as_int, delta=mech.delta).epsilon_lower_bound
