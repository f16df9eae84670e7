"""Privacy budgets, the DP answer type, and the exhausted-budget error.

A :class:`Budget` is an (epsilon, delta) pair. A :class:`DPAnswer` is what every
mechanism returns: the text, the guarantee it was released under, and details
that are safe to publish (counts and flags, never documents).

>>> Budget(1.0, 1e-6)
Budget(epsilon=1.0, delta=1e-06)
>>> Budget(1.0) + Budget(0.5, 1e-6)
Budget(epsilon=1.5, delta=1e-06)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dprag_core.validation import positive_finite, probability, strict_init

__all__ = ["FIT_SLACK", "Budget", "DPAnswer", "PrivacyBudgetExhausted"]

FIT_SLACK = 1e-12
"""Relative slack for 'fits within a budget' checks: 100 steps of 0.1 fit in 10."""


@dataclass(frozen=True, order=True)
class Budget:
    """An (epsilon, delta) differential-privacy guarantee or allowance.

    ``epsilon`` must be finite and > 0; ``delta`` must lie in [0, 1).
    Addition is basic sequential composition. A misspelt keyword is refused
    with the nearest valid one.

    >>> Budget(2.0, 0.0).epsilon
    2.0
    >>> Budget(epsilon=1.0, detla=1e-6)
    Traceback (most recent call last):
    ...
    TypeError: Budget got an unknown keyword argument 'detla'; did you mean 'delta'?
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", positive_finite("epsilon", self.epsilon))
        object.__setattr__(self, "delta", probability("delta", self.delta))

    def __add__(self, other: Budget) -> Budget:
        return Budget(self.epsilon + other.epsilon, min(self.delta + other.delta, 1 - 1e-300))

    def covers(self, other: Budget) -> bool:
        """True when spending ``other`` fits within this allowance.

        >>> Budget(1.0, 1e-6).covers(Budget(0.5, 1e-7))
        True
        """
        return other.epsilon <= self.epsilon * (1 + FIT_SLACK) and other.delta <= self.delta * (
            1 + FIT_SLACK
        )


Budget.__init__ = strict_init(Budget.__init__)  # type: ignore[method-assign]


class PrivacyBudgetExhausted(RuntimeError):
    """Raised *before* any work when a query would overspend a privacy budget.

    The message states the requested and remaining budget (and, for per-unit
    ledgers, only how many units lacked budget — never their ids or text).
    """


def _frozen(details: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(details))


@dataclass(frozen=True)
class DPAnswer:
    """The result of one DP query.

    ``text`` is the released answer; ``guarantee`` the (epsilon, delta) with which
    it is DP with respect to the corpus (add/remove one privacy unit), or ``None``
    for the non-private baselines: ``NonRAG`` (``uses_corpus=False``, epsilon 0)
    and ``RAG``/``VoteRAG``/``KSA`` (epsilon infinite);
    ``mechanism`` the mechanism's name; ``details`` publishable facts such as
    ``private_tokens``, ``ptr_passed`` and ``stop_reason`` (why the answer
    ended, :mod:`dprag_core.stop_reasons`). It never holds retrieved documents,
    voter outputs or anything derived from them beyond what was DP-released.
    An empty answer is the empty string: ``text=None`` (a text model that
    returned nothing) becomes ``""``.

    >>> a = DPAnswer("aspirin", Budget(1.0), "DPSparseVote", {"private_tokens": 2})
    >>> a.details["private_tokens"]
    2
    >>> DPAnswer(None, Budget(1.0), "DPKSA").text
    ''
    """

    text: str
    guarantee: Budget | None
    mechanism: str
    details: Mapping[str, Any] = field(default_factory=dict)
    uses_corpus: bool = True

    def __post_init__(self) -> None:
        if self.text is None:  # a text model that answered nothing: an empty answer is ""
            object.__setattr__(self, "text", "")
        elif not isinstance(self.text, str):
            raise TypeError(f"text must be a str, got {type(self.text).__name__}")
        object.__setattr__(self, "details", _frozen(self.details))

    @property
    def epsilon(self) -> float:
        """The epsilon of the guarantee: 0 without corpus access, inf if not private."""
        if self.guarantee is not None:
            return self.guarantee.epsilon
        return float("inf") if self.uses_corpus else 0.0

    @property
    def delta(self) -> float:
        """The delta of the guarantee (1.0 for a non-private answer that used the corpus)."""
        if self.guarantee is not None:
            return self.guarantee.delta
        return 1.0 if self.uses_corpus else 0.0
