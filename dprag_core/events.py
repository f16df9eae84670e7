"""The public event payloads of one DP query, for callbacks and instrumentation.

Adapters report each DP query to the framework's observers (LangChain
callbacks, LlamaIndex instrumentation and callback managers) with these
payloads and nothing else. Every field is public, for one of two reasons:

- a **public parameter** fixed before any data is seen: the mechanism's name and
  the (ε, δ) it charges (``query_cost()``, or the guarantee it states);
- a **post-processing of DP outputs**: ``stop_reason``
  (:mod:`dprag_core.stop_reasons`: derived from the released tokens and the
  SVT/PTR outcomes), ``private_tokens`` (how many released tokens went through
  a DP token step: the transcript of those steps is itself DP-released),
  ``keywords_released`` (DP-KSA: the size of the released keyword set) and
  ``public_fallback`` (decided from the DP answer's text alone,
  :mod:`dprag_core.fallback`).

Left out on purpose, because they depend on the documents beyond what was
DP-released: timings (prefill and generation time grow with document length),
per-voter counts or votes, document counts and lengths, token usage of the voter
prompts, and the ids of retrieved documents. The payloads carry no time, but the
frameworks stamp each event and time each span: the difference between a
query's start and end is its latency, which grows with the documents' lengths
(as the caller's own clock shows). Timing is outside the guarantee, as it is for
the answer itself: the guarantee covers what is released, not when.

>>> from dprag_core.answers import DPAnswer
>>> from dprag_core.budget import Budget
>>> answer = DPAnswer("aspirin", Budget(1.0, 1e-6), "DPSparseVote",
...                   {"stop_reason": "eos", "private_tokens": 2, "m": 10})
>>> end_payload(answer)  # doctest: +NORMALIZE_WHITESPACE
{'mechanism': 'DPSparseVote', 'epsilon': 1.0, 'delta': 1e-06, 'stop_reason': 'eos',
 'private_tokens': 2, 'keywords_released': None, 'public_fallback': False}
"""

from __future__ import annotations

from typing import Any

from dprag_core.algorithms.base import Mechanism
from dprag_core.answers import DPAnswer
from dprag_core.stop_reasons import STOP_REASONS

__all__ = ["END_FIELDS", "START_FIELDS", "end_payload", "start_payload"]

START_FIELDS = ("mechanism", "epsilon", "delta")
"""The keys of :func:`start_payload`."""

END_FIELDS = (
    "mechanism",
    "epsilon",
    "delta",
    "stop_reason",
    "private_tokens",
    "keywords_released",
    "public_fallback",
)
"""The keys of :func:`end_payload`."""


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def start_payload(mechanism: Mechanism) -> dict[str, Any]:
    """What a DP query announces before it runs: public parameters only.

    ``epsilon``/``delta`` are the fixed per-query cost charged to the corpus
    budget, or ``None`` for a mechanism without one (a per-unit ledger such as
    MuRAG's charges inside the query; the non-private baselines charge nothing).

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
    >>> start_payload(NonRAG(Api()))
    {'mechanism': 'NonRAG', 'epsilon': None, 'delta': None}
    """
    cost = mechanism.query_cost()
    return {
        "mechanism": mechanism.name,
        "epsilon": None if cost is None else cost.epsilon,
        "delta": None if cost is None else cost.delta,
    }


def end_payload(answer: DPAnswer) -> dict[str, Any]:
    """What a DP query reports once its answer is released: see the module docstring.

    Only the fields in :data:`END_FIELDS`, read from ``answer`` (its guarantee
    and its publishable details); any other detail is dropped, so a detail a
    future mechanism adds is not in these events unreviewed (observers that
    receive the framework's response object, e.g. LlamaIndex's
    ``QueryEndEvent``, see its metadata: an output, with the same fields the
    caller gets), and a
    ``stop_reason`` outside :data:`~dprag_core.stop_reasons.STOP_REASONS`
    becomes ``None``.

    >>> from dprag_core.budget import Budget
    >>> end_payload(DPAnswer("", Budget(2.0), "DPKSA", {"stop_reason": "ptr_failed",
    ...     "keywords_released": 0}))["keywords_released"]
    0
    """
    details = answer.details
    reason = details.get("stop_reason")
    return {
        "mechanism": answer.mechanism,
        "epsilon": answer.epsilon,
        "delta": answer.delta,
        "stop_reason": reason if reason in STOP_REASONS else None,
        "private_tokens": _count(details.get("private_tokens")),
        "keywords_released": _count(details.get("keywords_released")),
        "public_fallback": details.get("public_fallback") is True,
    }
