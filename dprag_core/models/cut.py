"""A completion that stopped at its token limit: :class:`CutText`, a ``str`` that says so.

A text model (:class:`~dprag_core.models.base.TextModel`) returns plain strings; a
completion the generator stopped because it reached ``max_new_tokens`` (the
provider's ``finish_reason="length"``, Anthropic's ``stop_reason="max_tokens"``, a
local generation that emitted no end token) comes back as a :class:`CutText`
instead: the same text, so every caller that treats it as a string is unchanged,
and :func:`was_cut` tells a reader whose last word may be a fragment
("Combination Qu") to drop it
(:func:`~dprag_core.algorithms.answer_keys.answer_key` does).

Whether one completion was cut depends on that completion alone (on its prompt),
so reading it keeps a voter's key a function of that voter's records.

>>> text = marked("The capital is Lis", "length")
>>> text, was_cut(text), was_cut(marked("Lisbon.", "stop"))
('The capital is Lis', True, False)
"""

from __future__ import annotations

from typing import Final

__all__ = ["LIMIT_REASONS", "CutText", "marked", "was_cut"]

LIMIT_REASONS: Final = frozenset({"length", "max_tokens", "MAX_TOKENS", "max_output_tokens"})
"""The stop reasons providers give for "the token limit was reached" (OpenAI-style
``finish_reason``, Anthropic's ``stop_reason``, Gemini's ``finish_reason``)."""


class CutText(str):
    """A completion cut by its token limit (a ``str``; ``was_cut`` reads the mark).

    >>> CutText("Combination Qu").upper()
    'COMBINATION QU'
    """

    __slots__ = ()


def marked(text: str, reason: object) -> str:
    """``text`` as a :class:`CutText` when ``reason`` is a token-limit stop, else as is.

    >>> type(marked("ab", "length")).__name__, type(marked("ab", None)).__name__
    ('CutText', 'str')
    """
    if isinstance(reason, str) and reason in LIMIT_REASONS:
        return CutText(text)
    return text


def was_cut(text: object) -> bool:
    """True when ``text`` is a completion its generator stopped at the token limit.

    >>> was_cut("plain"), was_cut(CutText("cut"))
    (False, True)
    """
    return isinstance(text, CutText)
