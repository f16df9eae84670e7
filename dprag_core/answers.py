"""The DP answer type: what every mechanism returns.

A :class:`DPAnswer` holds the released text, the guarantee it was released
under (a :class:`~dprag_core.budget.Budget`, or ``None`` for a non-private
baseline), the mechanism's name and details that are safe to publish (counts
and flags, never documents).

Where an answer's content came from is ``details["answer_source"]``
(:func:`answer_source`): :data:`DOCUMENTS` when at least one piece of its text (a
token, a word, a keyword, an answer) was chosen by a decision over the retrieved
documents (a DP decision, or a non-private baseline's), :data:`MODEL` when all of
it came from the model alone (a public prediction, a zero-shot answer, the
public fallback, NonRAG), :data:`NOTHING` when the answer is empty. It is a
post-processing of what was released (which decisions released text), so it is
public.

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

__all__ = ["ANSWER_SOURCES", "DOCUMENTS", "MODEL", "NOTHING", "DPAnswer", "answer_source"]

DOCUMENTS = "documents"
"""``details["answer_source"]``: some of the text was decided from the retrieved documents."""
MODEL = "model"
"""``details["answer_source"]``: all of the text came from the model alone (no private decision)."""
NOTHING = "none"
"""``details["answer_source"]``: the answer is empty (nothing was released)."""
ANSWER_SOURCES = frozenset({DOCUMENTS, MODEL, NOTHING})
"""Every value ``details["answer_source"]`` can take."""


def answer_source(text: str, *, from_documents: bool) -> str:
    """Where an answer's content came from: :data:`NOTHING` for a blank text, else
    :data:`DOCUMENTS` when ``from_documents`` (some released text was decided from
    the documents), else :data:`MODEL`.

    >>> answer_source("Metformin", from_documents=True), answer_source(" ", from_documents=True)
    ('documents', 'none')
    >>> answer_source("The treatment is", from_documents=False)
    'model'
    """
    if not text.strip():
        return NOTHING
    return DOCUMENTS if from_documents else MODEL


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
