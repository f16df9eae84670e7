"""DPICL: Grislain's DP-RAG — DP threshold selection, then DP in-context token generation.

1. :class:`~dprag_core.retrieval.threshold.DPThreshold` (ε_sel) keeps the
   privacy units above a DP similarity threshold.
2. One prompt per selected unit (``template`` with its chunks as context) plus
   one public prompt (``public_template``, no documents) go into ONE
   :class:`~dprag_core.models.base.LogprobModel` session (the mechanism reads
   full distributions: ``prefill_logprobs``).
3. Each token is :func:`dprag_core.mechanisms.icl.dp_icl_token` (ε_tok) over the
   full vocabulary on the rows' log-probabilities; every row appends the same
   token. No top-k/top-p warper ever touches the distribution.

**Guarantee** (``query_cost()``): the calibrated (ε, δ) of the selection plus
``max_new_tokens`` token steps (:func:`dprag_core.accounting.icl.calibrate_icl`;
all ``max_new_tokens`` are charged even if EOS comes first), w.r.t.
add/remove of one privacy unit, given that ``docs`` holds every unit scoring
above the public lower bound (``candidates_needed() = None`` with
``min_score() = bounds[0]``: the pipeline retrieves exactly those). Given the DP
threshold, neighbouring corpora select sets differing by at most that unit, so
each token's utility moves by at most C (L∞ sensitivity C). An empty selection
generates from the public prompt alone (still through the mechanism). ``details``: ``tokens``
(generated; ``private_tokens`` too: every token is a DP release),
``max_new_tokens``, ``stopped_at_eos``, ``stop_reason`` (``"eos"`` or
``"max_tokens"``, :mod:`dprag_core.stop_reasons`) — nothing about the
selected documents (their number is not a DP output).

>>> from types import SimpleNamespace
>>> import numpy as np
>>> class Toy:  # 3-token vocabulary; token 2 is EOS
...     vocab_size, eos_token_ids = 3, frozenset({2})
...     def decode(self, ids): return "".join("ab"[i] for i in ids)
...     def prefill_logprobs(self, prompts):
...         lp = np.log(np.tile([0.6, 0.3, 0.1], (len(prompts), 1)))
...         return SimpleNamespace(logprobs=lp, step=lambda tok: None)
>>> icl = DPICL(Toy(), epsilon=50.0, delta=1e-6, max_new_tokens=3, theta=0.0)
>>> icl.answer("Which token?", [], rng=0).details["max_new_tokens"]
3
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

import numpy as np

from dprag_core.accounting.icl import ICLParameters, calibrate_icl
from dprag_core.algorithms._decoding import IncrementalDecoder
from dprag_core.algorithms.base import (
    CONTEXT_FIELDS,
    QUESTION_FIELDS,
    PublicModel,
    StreamingMechanism,
    Templates,
)
from dprag_core.answers import DPAnswer, answer_source
from dprag_core.budget import Budget
from dprag_core.mechanisms.icl import dp_icl_token
from dprag_core.mechanisms.rng import RngLike
from dprag_core.mechanisms.threshold import Utility
from dprag_core.models.base import LogprobModel
from dprag_core.models.checks import callback_attributes, check_token_model, framework_of
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.retrieval.threshold import DPThreshold
from dprag_core.retrieval.units import group_by_unit
from dprag_core.stop_reasons import EOS, MAX_TOKENS
from dprag_core.validation import nonnegative_finite, positive_finite, positive_int

__all__ = ["DPICL"]


class DPICL(StreamingMechanism):
    """Grislain's DP-RAG: DP threshold retrieval + DP in-context token generation.

    Privacy: ``epsilon``, ``delta`` per query; ``selection_share`` of ε goes to
    the threshold (ε_sel), the per-token ε is calibrated over
    ``max_new_tokens``. Selection: ``bounds`` (public score range), ``utility``
    (``"top_k"``/``"top_p"``), ``k``, ``p``, ``threshold_alpha``. Token step:
    ``alpha`` (sharpening), ``clip`` (C), ``theta`` (public prior weight; None
    = 2C/ε_tok, i.e. the public distribution at temperature 1 reweighted by the
    private votes).

    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(vocab_size=5, eos_token_ids=frozenset(), prefill_logprobs=None)
    >>> DPICL(model, epsilon=4.0, max_new_tokens=8).query_cost().epsilon <= 4.0
    True
    """

    context_template_field = "template"
    templates: ClassVar[Templates] = {
        "template": CONTEXT_FIELDS,
        "public_template": QUESTION_FIELDS,
    }

    name = "DPICL"

    def __init__(
        self,
        model: LogprobModel,
        *,
        epsilon: float,
        delta: float = 1e-6,
        max_new_tokens: int = 32,
        bounds: tuple[float, float] = (-1.0, 1.0),
        utility: Utility = "top_k",
        k: int = 10,
        p: float = 0.5,
        threshold_alpha: float = 1.0,
        selection_share: float = 0.1,
        alpha: float = 1.0,
        clip: float = 1.0,
        theta: float | None = None,
        template: str = RAG_TEMPLATE,
        public_template: str = NO_CONTEXT_TEMPLATE,
    ) -> None:
        if framework_of(model) is not None or callback_attributes(model):
            check_token_model(model)  # refused, saying what to use
        for attr in ("prefill_logprobs", "eos_token_ids", "vocab_size"):
            if not hasattr(model, attr):
                raise TypeError(
                    f"model must be a LogprobModel (a TokenModel with full distributions), "
                    f"missing {attr!r}"
                )
        self.model = model
        total = Budget(positive_finite("epsilon", epsilon), delta)
        share = positive_finite("selection_share", selection_share)
        if share >= 1.0:
            raise ValueError(f"selection_share must be in (0, 1), got {selection_share!r}")
        self.parameters: ICLParameters = calibrate_icl(
            total,
            max_new_tokens=positive_int("max_new_tokens", max_new_tokens),
            selection_epsilon=share * total.epsilon,
        )
        self.selector = DPThreshold(
            epsilon=self.parameters.selection_epsilon,
            bounds=bounds,
            utility=utility,
            k=k,
            p=p,
            alpha=threshold_alpha,
        )
        self.alpha = nonnegative_finite("alpha", alpha)
        self.clip = positive_finite("clip", clip)
        self.theta = (
            2.0 * self.clip / self.parameters.epsilon_token
            if theta is None
            else nonnegative_finite("theta", theta)
        )
        self.template = template
        self.public_template = public_template

    def candidates_needed(self) -> None:
        """None: retrieve every unit above :meth:`min_score` (a top-N would break the relation)."""
        return None

    def min_score(self) -> float:
        """The public lower score bound s_lo."""
        return self.selector.bounds[0]

    def query_cost(self) -> Budget:
        """The calibrated (ε, δ) of one query (selection + all ``max_new_tokens`` tokens)."""
        return self.parameters.achieved

    def public_model(self) -> PublicModel:
        """The model with ``public_template``, ``max_new_tokens`` long (as the DP answer)."""
        return PublicModel(self.model, self.public_template, self.parameters.max_new_tokens)

    def _prompts(
        self, question: str, docs: Sequence[ScoredDocument], gen: np.random.Generator
    ) -> list[str]:
        selected = self.selector.select(docs, rng=gen)
        prompts = [
            self.template.format(context=join_context([d.text for d in group]), question=question)
            for group in group_by_unit(selected).values()
        ]
        return [*prompts, self.public_template.format(question=question)]

    def stream(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> Iterator[str | DPAnswer]:
        """Yield text as each DP token is released, then the :class:`DPAnswer`."""
        query = as_query(query, rng=rng)
        gen = query.rng
        session = self.model.prefill_logprobs(self._prompts(query.question, docs, gen))
        logprobs = np.asarray(session.logprobs, dtype=np.float64)
        eos = self.model.eos_token_ids
        decoder = IncrementalDecoder(self.model)
        tokens = 0
        stopped = False
        for step in range(self.parameters.max_new_tokens):
            token = dp_icl_token(
                logprobs[:-1],
                logprobs[-1],
                epsilon=self.parameters.epsilon_token,
                alpha=self.alpha,
                clip=self.clip,
                theta=self.theta,
                rng=gen,
            )
            if token in eos:
                stopped = True
                break
            tokens += 1
            chunk = decoder.push(token)
            if chunk:
                yield chunk
            if step + 1 < self.parameters.max_new_tokens:
                session.step(token)
                logprobs = np.asarray(session.logprobs, dtype=np.float64)
        tail = decoder.flush()
        if tail:
            yield tail
        details = {
            "tokens": tokens,
            "max_new_tokens": self.parameters.max_new_tokens,
            "stopped_at_eos": stopped,
            "private_tokens": tokens,
            "stop_reason": EOS if stopped else MAX_TOKENS,
            # every token is sampled by the DP step over the selected units' prompts
            "answer_source": answer_source(decoder.text, from_documents=True),
        }
        yield DPAnswer(decoder.text, self.parameters.achieved, self.name, details)

    def __repr__(self) -> str:
        b = self.parameters.achieved
        return (
            f"DPICL(epsilon={b.epsilon:g}, delta={b.delta:g}, "
            f"max_new_tokens={self.parameters.max_new_tokens})"
        )
