"""The DP answer type: what every mechanism returns.

A :class:`DPAnswer` holds the released text, the guarantee it was released
under (a :class:`~dprag_core.budget.Budget`, or ``None`` for a non-private
baseline), the mechanism's name and details that are safe to publish (counts
and flags, never documents).

>>> from dprag_core.budget import Budget
>>> DPAnswer("aspirin", Budget(1.0), "DPSparseVote").epsilon
1.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dprag_core.budget import Budget

__all__ = ["DPAnswer"]


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
